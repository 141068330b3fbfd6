#include "core/graph.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/collective.h"
#include "core/error.h"

namespace weir {

const char* op_name(Op op) {
  switch (op) {
    case Op::Leaf: return "leaf";
    case Op::View: return "view";
    case Op::GetRows: return "get_rows";
    case Op::MulMat: return "mul_mat";
    case Op::RmsNorm: return "rms_norm";
    case Op::Mul: return "mul";
    case Op::Add: return "add";
    case Op::Scale: return "scale";
    case Op::Rope: return "rope";
    case Op::GeluMul: return "gelu_mul";
    case Op::SiluMul: return "silu_mul";
    case Op::Attention: return "attention";
    case Op::SetRows: return "set_rows";
    case Op::Sample: return "sample";
    case Op::AllowTokens: return "allow_tokens";
    case Op::AllReduce: return "all_reduce";
    case Op::AllGather: return "all_gather";
    case Op::TopK: return "top_k";
    case Op::MoeWeights: return "moe_weights";
    case Op::MulMatId: return "mul_mat_id";
    case Op::MoeSum: return "moe_sum";
    case Op::Softcap: return "softcap";
    case Op::SwigluOai: return "swiglu_oai";
    case Op::LayerNorm: return "layer_norm";
    case Op::Gelu: return "gelu";
    case Op::Count: break;
  }
  return "?";
}

void set_contiguous_strides(Tensor& t) {
  t.nb[0] = traits(t.dtype).type_size;
  t.nb[1] = t.row_size();
  for (int i = 2; i < kMaxDims; ++i) t.nb[i] = t.nb[i - 1] * size_t(t.ne[i - 1]);
}

bool Tensor::is_contiguous() const {
  Tensor c;
  c.dtype = dtype;
  for (int i = 0; i < kMaxDims; ++i) c.ne[i] = ne[i];
  set_contiguous_strides(c);
  for (int i = 1; i < kMaxDims; ++i)
    if (ne[i] > 1 && nb[i] != c.nb[i]) return false;
  return nb[0] == c.nb[0];
}

namespace {

[[noreturn]] void shape_error(const char* op, const Tensor* a, const Tensor* b) {
  auto s = [](const Tensor* t) {
    return t->name + "[" + std::to_string(t->ne[0]) + "," + std::to_string(t->ne[1]) + "," +
           std::to_string(t->ne[2]) + "," + std::to_string(t->ne[3]) + "]";
  };
  throw Error(std::string("graph: ") + op + ": incompatible shapes " + s(a) + " and " + s(b));
}

}  // namespace

Tensor* Graph::make(DType t, std::initializer_list<int64_t> ne, Op op, std::string name) {
  if (ne.size() == 0 || ne.size() > size_t(kMaxDims)) throw Error("graph: bad rank for " + name);
  Tensor& x = tensors_.emplace_back();
  x.dtype = t;
  int i = 0;
  for (int64_t n : ne) x.ne[i++] = n;
  set_contiguous_strides(x);
  x.op = op;
  x.id = int(tensors_.size()) - 1;
  x.name = std::move(name);
  return &x;
}

Tensor* Graph::external(DType t, std::initializer_list<int64_t> ne, void* data, std::string name) {
  Tensor* x = make(t, ne, Op::Leaf, std::move(name));
  x->data = data;
  return x;
}

Tensor* Graph::input(DType t, std::initializer_list<int64_t> ne, std::string name) {
  return make(t, ne, Op::Leaf, std::move(name));
}

void Graph::mark_output(Tensor* t) { outputs_.push_back(t); }

Tensor* Graph::get_rows(Tensor* table, Tensor* ids) {
  if (ids->dtype != DType::I32 || ids->ne[1] != 1) shape_error("get_rows", table, ids);
  Tensor* y = make(DType::F32, {table->ne[0], ids->ne[0]}, Op::GetRows, "get_rows");
  y->src[0] = table;
  y->src[1] = ids;
  return y;
}

Tensor* Graph::mul_mat(Tensor* w, Tensor* x) {
  if (w->ne[0] != x->ne[0] || w->ne[2] != 1 || w->ne[3] != 1 || x->dtype != DType::F32)
    shape_error("mul_mat", w, x);
  Tensor* y = make(DType::F32, {w->ne[1], x->ne[1] * x->ne[2] * x->ne[3]}, Op::MulMat, "mul_mat");
  y->src[0] = w;
  y->src[1] = x;
  return y;
}

Tensor* Graph::unary_like(Tensor* a, Op op) {
  Tensor* y = make(DType::F32, {a->ne[0], a->ne[1], a->ne[2], a->ne[3]}, op, op_name(op));
  y->src[0] = a;
  return y;
}

Tensor* Graph::rms_norm(Tensor* x, float eps) {
  Tensor* y = unary_like(x, Op::RmsNorm);
  y->fparams[0] = eps;
  return y;
}

Tensor* Graph::layer_norm(Tensor* x, float eps) {
  Tensor* y = unary_like(x, Op::LayerNorm);
  y->fparams[0] = eps;
  return y;
}

Tensor* Graph::gelu(Tensor* a) { return unary_like(a, Op::Gelu); }

Tensor* Graph::mul(Tensor* a, Tensor* b) {
  if (a->ne[0] != b->ne[0] || (b->n_rows() != 1 && b->n_rows() != a->n_rows())) shape_error("mul", a, b);
  Tensor* y = unary_like(a, Op::Mul);
  y->src[1] = b;
  return y;
}

Tensor* Graph::add(Tensor* a, Tensor* b) {
  if (a->ne[0] != b->ne[0] || (b->n_rows() != 1 && b->n_rows() != a->n_rows())) shape_error("add", a, b);
  Tensor* y = unary_like(a, Op::Add);
  y->src[1] = b;
  return y;
}

Tensor* Graph::scale(Tensor* a, float s) {
  Tensor* y = unary_like(a, Op::Scale);
  y->fparams[0] = s;
  return y;
}

Tensor* Graph::softcap(Tensor* a, float cap) {
  if (!(cap > 0) || !std::isfinite(cap))
    throw Error("softcap: cap " + std::to_string(cap) + " must be positive and finite");
  Tensor* y = unary_like(a, Op::Softcap);
  y->fparams[0] = cap;
  return y;
}

Tensor* Graph::rope(Tensor* x, Tensor* pos, const RopeParams& p) {
  if (pos->dtype != DType::I32 || pos->ne[0] != x->ne[2] || p.n_rot <= 0 || p.n_rot > x->ne[0] ||
      p.n_rot % 2)
    shape_error("rope", x, pos);
  if (Tensor* ff = p.freq_factors;
      ff && (ff->dtype != DType::F32 || ff->ne[0] != p.n_rot / 2 || ff->n_rows() != 1))
    shape_error("rope freq_factors", ff, x);
  Tensor* y = unary_like(x, Op::Rope);
  y->src[1] = pos;
  y->src[2] = p.freq_factors;
  y->iparams[0] = p.n_rot;
  y->iparams[1] = int32_t(p.mode);
  y->fparams[0] = p.base;
  y->fparams[1] = p.freq_scale;
  return y;
}

Tensor* Graph::rope_neox(Tensor* x, Tensor* pos, int n_rot, float base, float freq_scale) {
  return rope(x, pos, RopeParams{n_rot, base, freq_scale, RopeMode::Neox, nullptr});
}

Tensor* Graph::gelu_mul(Tensor* a, Tensor* b) {
  if (a->n_elements() != b->n_elements() || a->ne[0] != b->ne[0]) shape_error("gelu_mul", a, b);
  Tensor* y = unary_like(a, Op::GeluMul);
  y->src[1] = b;
  return y;
}

Tensor* Graph::swiglu_oai(Tensor* a, Tensor* b, float alpha, float limit) {
  if (a->n_elements() != b->n_elements() || a->ne[0] != b->ne[0]) shape_error("swiglu_oai", a, b);
  if (!(limit > 0) || !std::isfinite(limit) || !std::isfinite(alpha))
    throw Error("swiglu_oai: alpha " + std::to_string(alpha) + " and limit " + std::to_string(limit) +
                " must be finite, the limit positive");
  Tensor* y = unary_like(a, Op::SwigluOai);
  y->src[1] = b;
  y->fparams[0] = alpha;
  y->fparams[1] = limit;
  return y;
}

Tensor* Graph::silu_mul(Tensor* a, Tensor* b) {
  if (a->n_elements() != b->n_elements() || a->ne[0] != b->ne[0]) shape_error("silu_mul", a, b);
  Tensor* y = unary_like(a, Op::SiluMul);
  y->src[1] = b;
  return y;
}

Tensor* Graph::attention(Tensor* q, Tensor* k, Tensor* v, Tensor* mask, float scale, bool separate_tokens,
                         int32_t max_keys, const AttentionExtras& extras) {
  const int64_t D = q->ne[0], Hq = q->ne[1], T = q->ne[2];
  const int64_t Hkv = k->ne[1], S = k->ne[2];
  if (k->ne[0] != D || v->ne[0] != D || v->ne[1] != Hkv || v->ne[2] != S || Hkv == 0 ||
      Hq % Hkv != 0)
    shape_error("attention", q, k);
  if (mask->ne[0] != S || mask->ne[1] != T) shape_error("attention mask", mask, q);
  if (extras.sinks && (extras.sinks->dtype != DType::F32 || extras.sinks->n_elements() != Hq))
    shape_error("attention sinks", extras.sinks, q);
  if (extras.softcap < 0.0f || !std::isfinite(extras.softcap))
    throw Error("attention: soft cap " + std::to_string(extras.softcap) + " must be finite and >= 0");
  Tensor* y = make(DType::F32, {D * Hq, T}, Op::Attention, "attention");
  y->src[0] = q;
  y->src[1] = k;
  y->src[2] = v;
  y->src[3] = mask;
  y->fparams[0] = scale;
  y->iparams[0] = separate_tokens ? 1 : 0;
  y->iparams[1] = std::max<int32_t>(max_keys, 0);
  y->fparams[1] = extras.softcap;
  y->src[4] = extras.sinks;
  return y;
}

Tensor* Graph::set_rows(Tensor* dst, Tensor* src, Tensor* idx) {
  if (dst->ne[0] != src->ne[0] || idx->ne[0] != src->n_rows() || idx->dtype != DType::I32)
    shape_error("set_rows", dst, src);
  Tensor* y = make(dst->dtype, {dst->ne[0], dst->ne[1], dst->ne[2], dst->ne[3]}, Op::SetRows, "set_rows");
  // The result is dst itself, so readers of the result see the written rows.
  y->view_src = dst;
  for (int i = 0; i < kMaxDims; ++i) y->nb[i] = dst->nb[i];
  y->src[0] = dst;
  y->src[1] = src;
  y->src[2] = idx;
  return y;
}

Tensor* Graph::sample(Tensor* logits, Tensor* params) {
  if (logits->dtype != DType::F32 || params->dtype != DType::F32 || params->ne[0] != 5 ||
      params->n_rows() != logits->n_rows())
    shape_error("sample", logits, params);
  Tensor* y = make(DType::I32, {logits->n_rows()}, Op::Sample, "sample");
  y->src[0] = logits;
  y->src[1] = params;
  return y;
}

Tensor* Graph::allow_tokens(Tensor* logits, Tensor* allow) {
  if (logits->dtype != DType::F32 || allow->dtype != DType::I32 || allow->ne[0] != (logits->ne[0] + 31) / 32 ||
      allow->n_rows() != logits->n_rows())
    shape_error("allow_tokens", logits, allow);
  Tensor* y = make(DType::F32, {logits->ne[0], logits->n_rows()}, Op::AllowTokens, "allow_tokens");
  y->src[0] = logits;
  y->src[1] = allow;
  return y;
}

Tensor* Graph::top_k(Tensor* x, int k) {
  if (x->dtype != DType::F32 || k < 1 || k > x->ne[0]) shape_error("top_k", x, x);
  Tensor* y = make(DType::I32, {int64_t(k), x->n_rows()}, Op::TopK, "top_k");
  y->src[0] = x;
  return y;
}

Tensor* Graph::moe_weights(Tensor* logits, Tensor* ids, bool normalize) {
  if (logits->dtype != DType::F32 || ids->dtype != DType::I32 || ids->n_rows() != logits->n_rows() ||
      ids->ne[0] > logits->ne[0])
    shape_error("moe_weights", logits, ids);
  Tensor* y = make(DType::F32, {ids->ne[0], ids->n_rows()}, Op::MoeWeights, "moe_weights");
  y->src[0] = logits;
  y->src[1] = ids;
  y->iparams[0] = normalize ? 1 : 0;
  return y;
}

Tensor* Graph::mul_mat_id(Tensor* w, Tensor* x, Tensor* ids) {
  const int64_t K = w->ne[0], N = w->ne[1], k = ids->ne[0], T = ids->ne[1];
  if (x->dtype != DType::F32 || ids->dtype != DType::I32 || x->ne[0] != K || x->ne[2] != T ||
      (x->ne[1] != 1 && x->ne[1] != k) || x->ne[3] != 1 || w->ne[3] != 1 || ids->ne[2] != 1)
    shape_error("mul_mat_id", w, x);
  Tensor* y = make(DType::F32, {N, k, T}, Op::MulMatId, "mul_mat_id");
  y->src[0] = w;
  y->src[1] = x;
  y->src[2] = ids;
  return y;
}

Tensor* Graph::moe_sum(Tensor* y, Tensor* w) {
  if (y->dtype != DType::F32 || w->dtype != DType::F32 || w->ne[0] != y->ne[1] || w->ne[1] != y->ne[2] ||
      y->ne[3] != 1)
    shape_error("moe_sum", y, w);
  Tensor* out = make(DType::F32, {y->ne[0], y->ne[2]}, Op::MoeSum, "moe_sum");
  out->src[0] = y;
  out->src[1] = w;
  return out;
}

Tensor* Graph::all_reduce(Tensor* x, Collective* comm) {
  if (x->dtype != DType::F32 || !x->is_contiguous() || !comm) shape_error("all_reduce", x, x);
  Tensor* y = unary_like(x, Op::AllReduce);
  y->comm = comm;
  return y;
}

Tensor* Graph::all_gather(Tensor* x, int64_t total, Collective* comm) {
  if (x->dtype != DType::F32 || !x->is_contiguous() || !comm || x->ne[2] != 1 || x->ne[3] != 1 ||
      x->ne[0] != split_range(total, comm->size(), comm->rank()).size())
    shape_error("all_gather", x, x);
  Tensor* y = make(DType::F32, {total, x->ne[1]}, Op::AllGather, "all_gather");
  y->src[0] = x;
  y->comm = comm;
  return y;
}

Tensor* Graph::clone(const Tensor& t, const std::function<Tensor*(const Tensor*)>& map) {
  // Sources first (map may add them to this graph): a tensor comes after
  // what it reads, as everywhere in a graph.
  Tensor* src[kMaxSrc] = {};
  for (int i = 0; i < kMaxSrc; ++i)
    if (t.src[i]) src[i] = map(t.src[i]);
  Tensor* view_src = t.view_src ? map(t.view_src) : nullptr;
  Tensor& x = tensors_.emplace_back(t);
  x.id = int(tensors_.size()) - 1;
  for (int i = 0; i < kMaxSrc; ++i) x.src[i] = src[i];
  x.view_src = view_src;
  if (x.op != Op::Leaf) x.data = nullptr;
  return &x;
}

Tensor* Graph::reshape(Tensor* src, std::initializer_list<int64_t> ne) {
  if (!src->is_contiguous()) throw Error("graph: reshape of non-contiguous " + src->name);
  Tensor* y = make(src->dtype, ne, Op::View, src->name + " (reshaped)");
  if (y->n_elements() != src->n_elements()) shape_error("reshape", src, y);
  y->view_src = src;
  y->src[0] = src;
  return y;
}

Tensor* Graph::view(Tensor* src, std::initializer_list<int64_t> ne, std::initializer_list<size_t> nb,
                    size_t offset) {
  Tensor* y = make(src->dtype, ne, Op::View, src->name + " (view)");
  int i = 1;
  for (size_t s : nb) y->nb[i++] = s;
  y->view_src = src;
  y->view_offset = offset;
  y->src[0] = src;
  return y;
}

}  // namespace weir
