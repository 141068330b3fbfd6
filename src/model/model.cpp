#include "model/model.h"

#include <map>
#include <string>

#include "core/error.h"

namespace weir {
namespace {


std::string shape_str(const int64_t* ne, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

}  // namespace

// The architectures weir can build, by their GGUF general.architecture name.
std::unique_ptr<Model> make_bert(GGUFFile f);    // model/bert.cpp (bert, nomic-bert)
std::unique_ptr<Model> make_gemma2(GGUFFile f);  // model/gemma2.cpp
std::unique_ptr<Model> make_gemma3(GGUFFile f);  // model/gemma3.cpp
std::unique_ptr<Model> make_gpt_oss(GGUFFile f); // model/gpt_oss.cpp
std::unique_ptr<Model> make_llama(GGUFFile f);   // model/llama_family.cpp
std::unique_ptr<Model> make_qwen2(GGUFFile f);   // model/llama_family.cpp
std::unique_ptr<Model> make_qwen3(GGUFFile f);   // model/llama_family.cpp
std::unique_ptr<Model> make_qwen3moe(GGUFFile f);  // model/llama_family.cpp
std::unique_ptr<Model> make_phi3(GGUFFile f);      // model/llama_family.cpp

const std::map<std::string, ModelFactory>& architectures() {
  static const std::map<std::string, ModelFactory> r = {
      {"bert", make_bert},
      {"gemma2", make_gemma2},
      {"gemma3", make_gemma3},
      {"gpt-oss", make_gpt_oss},
      {"llama", make_llama},
      {"nomic-bert", make_bert},
      {"phi3", make_phi3},
      {"qwen2", make_qwen2},
      {"qwen3", make_qwen3},
      {"qwen3moe", make_qwen3moe},
  };
  return r;
}

std::unique_ptr<Model> Model::load(const std::string& path) {
  GGUFFile f = GGUFFile::open(path);
  const std::string arch(f.get_str("general.architecture"));
  auto it = architectures().find(arch);
  if (it == architectures().end()) {
    std::string known;
    for (auto& [k, v] : architectures()) known += (known.empty() ? "" : ", ") + k;
    throw Error(path + ": architecture '" + arch + "' (general.architecture) is not supported; known: " + known);
  }
  return it->second(std::move(f));
}

Model::Model(GGUFFile f) : file_(std::move(f)) {
  hp_ = HParams::from_gguf(file_);
  tokenizer_ = Tokenizer::from_gguf(file_);
  hp_.n_vocab = int64_t(tokenizer_->vocab().n_tokens());
}

size_t Model::weight_bytes() const {
  size_t n = 0;
  for (const auto& t : file_.tensors()) n += t.nbytes;
  return n;
}

uint64_t Model::n_params() const {
  uint64_t n = 0;
  for (const auto& t : file_.tensors()) n += uint64_t(t.n_elements());
  return n;
}

const GGUFTensorInfo* Model::weight_opt(const std::string& name, std::initializer_list<int64_t> ne) const {
  const GGUFTensorInfo* t = file_.find_tensor(name);
  if (!t) return nullptr;
  int i = 0;
  bool ok = int(ne.size()) >= t->n_dims;
  for (int64_t n : ne) ok = ok && t->ne[i++] == n;
  if (!ok) {
    std::vector<int64_t> want(ne);
    throw Error(file_.name() + ": tensor '" + name + "' has shape " + shape_str(t->ne, t->n_dims) +
                ", expected " + shape_str(want.data(), int(want.size())));
  }
  if (!traits(t->dtype).dequantizable)
    throw Error(file_.name() + ": tensor '" + name + "' has type " + dtype_name(t->dtype) +
                ", which weir cannot compute with yet");
  return t;
}

const GGUFTensorInfo& Model::weight(const std::string& name, std::initializer_list<int64_t> ne) const {
  const GGUFTensorInfo* t = weight_opt(name, ne);
  if (!t) throw Error(file_.name() + ": required tensor '" + name + "' is missing");
  return *t;
}

const GGUFTensorInfo* Model::vector_f32_opt(const std::string& name, int64_t n) const {
  const GGUFTensorInfo* t = weight_opt(name, {n});
  if (t && t->dtype != DType::F32)
    throw Error(file_.name() + ": tensor '" + name + "' has type " + dtype_name(t->dtype) +
                "; weir needs norm weights, biases and rope factors in f32");
  return t;
}

const GGUFTensorInfo& Model::vector_f32(const std::string& name, int64_t n) const {
  const GGUFTensorInfo* t = vector_f32_opt(name, n);
  if (!t) throw Error(file_.name() + ": required tensor '" + name + "' is missing");
  return *t;
}

Tensor* Model::leaf(Graph& g, const GGUFTensorInfo& w) {
  Tensor* t = g.external(w.dtype, {w.ne[0], w.ne[1], w.ne[2], w.ne[3]},
                         const_cast<uint8_t*>(w.data), std::string(w.name));
  return t;
}

Tensor* Model::leaf_rows(Graph& g, const GGUFTensorInfo& w, int64_t r0, int64_t r1) {
  const bool vec = w.n_dims == 1;
  const int64_t n = vec ? w.ne[0] : w.ne[1];
  if (vec ? false : (w.ne[2] != 1 || w.ne[3] != 1)) throw Error("leaf_rows: " + std::string(w.name) + " is not 2-D");
  if (r0 == 0 && r1 == n) return leaf(g, w);
  if (r0 < 0 || r1 > n || r0 >= r1) throw Error("leaf_rows: rows out of range of " + std::string(w.name));
  if (vec) {
    if (traits(w.dtype).block_size != 1) throw Error("leaf_rows: " + std::string(w.name) + " is a quantized vector");
    return g.external(w.dtype, {r1 - r0}, const_cast<uint8_t*>(w.data) + size_t(r0) * traits(w.dtype).type_size,
                      std::string(w.name) + " [" + std::to_string(r0) + ":" + std::to_string(r1) + "]");
  }
  const size_t row = row_bytes(w.dtype, w.ne[0]);
  return g.external(w.dtype, {w.ne[0], r1 - r0}, const_cast<uint8_t*>(w.data) + size_t(r0) * row,
                    std::string(w.name) + " rows [" + std::to_string(r0) + ":" + std::to_string(r1) + "]");
}

Tensor* Model::leaf_cols(Graph& g, const GGUFTensorInfo& w, int64_t c0, int64_t c1) {
  if (w.n_dims != 2) throw Error("leaf_cols: " + std::string(w.name) + " is not 2-D");
  if (c0 == 0 && c1 == w.ne[0]) return leaf(g, w);
  const int64_t block = traits(w.dtype).block_size;
  if (c0 < 0 || c1 > w.ne[0] || c0 >= c1 || c0 % block || c1 % block)
    throw Error(std::string(w.name) + ": columns [" + std::to_string(c0) + ", " + std::to_string(c1) +
                ") are not whole " + dtype_name(w.dtype) + " blocks of " + std::to_string(block));
  Tensor* t = g.external(w.dtype, {c1 - c0, w.ne[1]}, const_cast<uint8_t*>(w.data) + row_bytes(w.dtype, c0),
                         std::string(w.name) + " cols [" + std::to_string(c0) + ":" + std::to_string(c1) + "]");
  t->nb[1] = row_bytes(w.dtype, w.ne[0]);  // the file's rows
  t->nb[2] = t->nb[3] = t->nb[1] * size_t(w.ne[1]);
  return t;
}

}  // namespace weir
