// The CUDA attention op (backend/cuda/ops_attention.cu) against the CPU
// kernel, the reference: decode (flash-decoding splits on CUDA cores) and
// prefill (tensor cores for F16 caches), GQA ratios, head sizes 64/128/256 and
// an odd multiple of 8, causal / sliding-window / random masks, fully masked
// rows, strided q, unaligned cache views, and huge finite garbage in cells no
// token sees. The CPU reference is itself checked against a float64 one on
// the small cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_ops.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor.h"
#include "cuda_test_util.h"
#include "q8_blocks.h"

namespace weir {
namespace {

using cuda::test::DeviceBuffer;

// Sequences: token t is the newest of sequence t, whose cells are a region
// of S / T cells (t * S / T on, a length of its own), as a batched decode
// step with a region per sequence sees them; Interleaved: sequence t holds
// cells t, t + T, t + 2T, ... (one shared ring).
enum class MaskKind { None, Causal, Window, Random, Sequences, Interleaved };

struct AttnCase {
  std::string name;
  int D, Hq, Hkv, T, S;
  DType kv = DType::F16;
  MaskKind mask = MaskKind::Causal;
  int used = -1;       // cells in use; keys >= used are masked for every token (-1: S)
  int window = 0;      // MaskKind::Window: a token sees its last `window` positions
  int q_pad = 0;       // extra floats between q's heads (a strided view)
  int kv_pad = 0;      // extra elements between K/V positions (Q8_0: a multiple of 32)
  int kv_off = 0;      // elements from the cache start to the view (Q8_0: a multiple of 32)
  int m_pad = 0;       // extra floats per mask row
  int masked_row = -1; // a token whose keys are all masked
  float scale = 0.0f;  // 0: 1/sqrt(D)
  int sm = 0;          // OpCtx::sm_count; 0: the device's
  bool separate = false;  // the separate_tokens hint (graph.h)
};

// Tensor cores may take a case with F16 caches, D in {64, 128, 256} and
// 16-byte aligned rows, not batched decode: attn_dec (decode; short spans
// stay on attn_vec, and CudaOptions::attn_decode_mma turns it off). 8-bit caches
// too (attn_dec only), with rows aligned to its pieces (8 bytes for D 128,
// 16 for 256, 4 for 64).
bool may_use_decode_mma(const AttnCase& c) {
  const bool dims = c.D == 64 || c.D == 128 || c.D == 256;
  if (c.kv == DType::Q8_0) {
    const size_t cw = c.D == 256 ? 16 : c.D == 128 ? 8 : 4;
    return dims && row_bytes(c.kv, c.kv_off) % cw == 0 && row_bytes(c.kv, c.kv_pad) % cw == 0 && !c.separate;
  }
  const bool aligned = (size_t(c.kv_off) * 2) % 16 == 0 && (size_t(c.kv_pad) * 2) % 16 == 0;
  return c.kv == DType::F16 && dims && aligned && !c.separate;
}

// The kernel the CUDA op picks (ops_attention.cu) for more than 8 query
// rows per kv head: tensor cores (attn_mma) where they may (8-bit caches
// copied into halves first, any alignment); CUDA cores in f32 otherwise.
bool uses_tensor_cores(const AttnCase& c) {
  const bool rows = c.T * (c.Hq / c.Hkv) > 8;
  if (c.kv == DType::Q8_0) return (c.D == 64 || c.D == 128 || c.D == 256) && !c.separate && rows;
  return c.kv == DType::F16 && may_use_decode_mma(c) && rows;
}

// Host buffers of one case; tensors are made over them (host) or over device
// copies at the same offsets (device).
struct AttnData {
  AttnCase c;
  size_t es;
  int64_t q_nb1, q_nb2, kv_nb1, kv_nb2, m_nb1;  // elements
  std::vector<float> q, mask;
  std::vector<uint8_t> k, v;  // caches: kv_off elements, then S positions
  std::vector<std::vector<bool>> visible;  // [t][j]

  explicit AttnData(const AttnCase& cs) : c(cs) {
    std::mt19937 rng(uint32_t(c.D * 131 + c.Hq * 17 + c.T * 7 + c.S));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto randn = [&] {
      float x;
      do x = nd(rng);
      while (x == 0.0f);
      return x;
    };
    es = c.kv == DType::F16 ? 2 : 4;
    const int used = c.used < 0 ? c.S : c.used;
    q_nb1 = c.D + c.q_pad;
    q_nb2 = c.Hq * q_nb1 + 3 * c.q_pad;
    kv_nb1 = c.D;
    kv_nb2 = int64_t(c.Hkv) * c.D + c.kv_pad;
    m_nb1 = c.S + c.m_pad;

    q.resize(size_t(c.T) * size_t(q_nb2));
    for (float& x : q) x = randn();

    // Token t sits at position used - T + t.
    visible.assign(size_t(c.T), std::vector<bool>(size_t(c.S), false));
    std::bernoulli_distribution coin(0.5);
    for (int t = 0; t < c.T; ++t) {
      const int pos = used - c.T + t;
      for (int j = 0; j < used; ++j) {
        bool vis = true;
        if (c.mask == MaskKind::Causal) vis = j <= pos;
        if (c.mask == MaskKind::Window) vis = j <= pos && j > pos - c.window;
        if (c.mask == MaskKind::Random) vis = coin(rng);
        if (c.mask == MaskKind::Sequences) {
          const int region = c.S / c.T, len = 1 + (t * 37) % region;
          vis = j >= t * region && j < t * region + len;
        }
        if (c.mask == MaskKind::Interleaved) vis = j % c.T == t && j <= pos;
        visible[size_t(t)][size_t(j)] = vis && t != c.masked_row;
      }
    }
    mask.assign(size_t(c.T) * size_t(m_nb1), 7.0f);  // the padding is never read
    for (int t = 0; t < c.T; ++t)
      for (int j = 0; j < c.S; ++j) mask[size_t(t) * size_t(m_nb1) + size_t(j)] = visible[size_t(t)][size_t(j)] ? 0.0f : -INFINITY;

    // Caches: normal values where some token looks, huge finite garbage
    // elsewhere (8-bit caches: the values' blocks, a cell's row whole blocks).
    std::vector<bool> seen(size_t(c.S), false);  // by some token
    for (int t = 0; t < c.T; ++t)
      for (int j = 0; j < c.S; ++j)
        if (visible[size_t(t)][size_t(j)]) seen[size_t(j)] = true;
    const size_t n = size_t(c.kv_off) + size_t(c.S) * size_t(kv_nb2);
    const bool q8 = c.kv == DType::Q8_0;
    k.resize(q8 ? row_bytes(c.kv, int64_t(n)) : n * es);
    v.resize(k.size());
    for (auto* buf : {&k, &v}) {
      std::vector<float> vals(q8 ? n : 0);
      for (size_t i = 0; i < n; ++i) {
        const int64_t j = i < size_t(c.kv_off) ? -1 : int64_t(i - size_t(c.kv_off)) / kv_nb2;
        const float garbage = (i & 1) ? 6.0e4f : -6.0e4f;  // f32 caches: x 5e32
        const float x = j >= 0 && seen[size_t(j)] ? randn() : (c.kv == DType::F32 ? garbage * 5e32f : garbage);
        if (q8) {
          vals[i] = x;
        } else if (es == 2) {
          const uint16_t h = f32_to_fp16(x);
          std::memcpy(buf->data() + i * 2, &h, 2);
        } else {
          std::memcpy(buf->data() + i * 4, &x, 4);
        }
      }
      if (q8) *buf = test::q8_0_encode(vals);
    }
  }

  float scale() const { return c.scale != 0.0f ? c.scale : 1.0f / std::sqrt(float(c.D)); }

  // The op's tensors over the given q, k, v, mask and output storage.
  struct Tensors {
    Tensor q, k, v, mask, dst;
  };
  void make(Tensors& ts, void* qd, void* kd, void* vd, void* md, void* od) const {
    auto set = [](Tensor& t, DType dt, std::initializer_list<int64_t> ne, std::initializer_list<size_t> nb,
                  void* data, const char* name) {
      t.dtype = dt;
      int i = 0;
      for (int64_t x : ne) t.ne[i++] = x;
      i = 0;
      for (size_t x : nb) t.nb[i++] = x;
      t.data = data;
      t.name = name;
    };
    const size_t kvb = row_bytes(c.kv, c.kv_off), nb0 = c.kv == DType::Q8_0 ? test::kQ8Block : es;
    const size_t nb1 = row_bytes(c.kv, kv_nb1), nb2 = row_bytes(c.kv, kv_nb2);
    set(ts.q, DType::F32, {c.D, c.Hq, c.T, 1}, {4, size_t(q_nb1) * 4, size_t(q_nb2) * 4, size_t(q_nb2) * 4 * c.T}, qd,
        "q");
    set(ts.k, c.kv, {c.D, c.Hkv, c.S, 1}, {nb0, nb1, nb2, nb2 * c.S}, static_cast<uint8_t*>(kd) + kvb, "k");
    set(ts.v, c.kv, {c.D, c.Hkv, c.S, 1}, {nb0, nb1, nb2, nb2 * c.S}, static_cast<uint8_t*>(vd) + kvb, "v");
    set(ts.mask, DType::F32, {c.S, c.T, 1, 1}, {4, size_t(m_nb1) * 4, size_t(m_nb1) * 4 * c.T, size_t(m_nb1) * 4 * c.T},
        md, "mask");
    const size_t row = size_t(c.D) * size_t(c.Hq) * 4;
    set(ts.dst, DType::F32, {int64_t(c.D) * c.Hq, c.T, 1, 1}, {4, row, row * c.T, row * c.T}, od, "attn_out");
    ts.dst.op = Op::Attention;
    ts.dst.src[0] = &ts.q;
    ts.dst.src[1] = &ts.k;
    ts.dst.src[2] = &ts.v;
    ts.dst.src[3] = &ts.mask;
    ts.dst.fparams[0] = scale();
    ts.dst.iparams[0] = c.separate ? 1 : 0;
    ts.dst.iparams[1] = c.mask == MaskKind::Window ? c.window : 0;  // graph.h's max_keys hint, as gemma3 sets it
  }

  float kv_at(const std::vector<uint8_t>& buf, int j, int g, int d) const {
    const size_t i = size_t(c.kv_off) + size_t(j) * size_t(kv_nb2) + size_t(g) * size_t(kv_nb1) + size_t(d);
    if (c.kv == DType::Q8_0) return test::q8_0_at(buf.data(), int64_t(i));
    if (es == 2) {
      uint16_t h;
      std::memcpy(&h, buf.data() + i * 2, 2);
      return fp16_to_f32(h);
    }
    float x;
    std::memcpy(&x, buf.data() + i * 4, 4);
    return x;
  }

  // float64 attention, the semantics written out.
  std::vector<float> reference64() const {
    std::vector<float> out(size_t(c.T) * size_t(c.Hq) * size_t(c.D), 0.0f);
    const int group = c.Hq / c.Hkv;
    std::vector<double> s(size_t(c.S));
    for (int t = 0; t < c.T; ++t)
      for (int h = 0; h < c.Hq; ++h) {
        const int g = h / group;
        const float* qr = q.data() + size_t(t) * size_t(q_nb2) + size_t(h) * size_t(q_nb1);
        double mx = -INFINITY;
        for (int j = 0; j < c.S; ++j) {
          if (!visible[size_t(t)][size_t(j)]) continue;
          double dot = 0;
          for (int d = 0; d < c.D; ++d) dot += double(qr[d]) * kv_at(k, j, g, d);
          s[size_t(j)] = dot * scale();
          mx = std::max(mx, s[size_t(j)]);
        }
        if (mx == -INFINITY) continue;
        double sum = 0;
        for (int j = 0; j < c.S; ++j)
          if (visible[size_t(t)][size_t(j)]) sum += (s[size_t(j)] = std::exp(s[size_t(j)] - mx));
        for (int d = 0; d < c.D; ++d) {
          double a = 0;
          for (int j = 0; j < c.S; ++j)
            if (visible[size_t(t)][size_t(j)]) a += s[size_t(j)] / sum * kv_at(v, j, g, d);
          out[(size_t(t) * size_t(c.Hq) + size_t(h)) * size_t(c.D) + size_t(d)] = float(a);
        }
      }
    return out;
  }
};

// Largest over (token, head) of max |a - b| / max(max |b|, 1e-3) on the
// head's D values; infinity when a has a NaN.
double max_head_err(const std::vector<float>& a, const std::vector<float>& b, int D, std::string* where) {
  double worst = 0;
  for (size_t h0 = 0; h0 < b.size(); h0 += size_t(D)) {
    double num = 0, den = 1e-3;
    for (size_t i = h0; i < h0 + size_t(D); ++i) {
      if (!std::isfinite(a[i])) {
        *where = "non-finite at " + std::to_string(i);
        return INFINITY;
      }
      num = std::max(num, std::fabs(double(a[i]) - double(b[i])));
      den = std::max(den, std::fabs(double(b[i])));
    }
    if (num / den > worst) {
      worst = num / den;
      *where = "head row " + std::to_string(h0 / size_t(D));
    }
  }
  return worst;
}

int device_sms() {
  int dev = 0, n = 1;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
  return n;
}

// Runs one case on the CPU and on the GPU and compares.
void check_case(const AttnCase& c) {
  SCOPED_TRACE(c.name);
  AttnData data(c);
  const size_t out_n = size_t(c.T) * size_t(c.Hq) * size_t(c.D);

  std::vector<float> cpu_out(out_n, NAN);
  AttnData::Tensors host;
  data.make(host, data.q.data(), data.k.data(), data.v.data(), data.mask.data(), cpu_out.data());
  cpu::op_attention(host.dst, cpu::OpContext{});

  std::string where;
  if (double(c.T) * c.Hq * c.S * c.D <= 4e6) {
    const double e64 = max_head_err(cpu_out, data.reference64(), c.D, &where);
    EXPECT_LT(e64, 1e-4) << "CPU reference vs float64, " << where;
  }

  DeviceBuffer qd(data.q), kd(data.k), vd(data.v), md(data.mask), od(out_n * sizeof(float));
  AttnData::Tensors dev;
  data.make(dev, qd.get(), kd.get(), vd.get(), md.get(), od.get());
  // mask_fixed: the mask scanned before the wait on the kernel ahead (as
  // the backend does when no kernel of the graph writes the mask). Each
  // way with the default plan, then with the decode plan's choices turned
  // back (a head a block only where a span would be split, splits as fixed
  // chunks of the cache), with at most 2 rows a block and 4 blocks an SM,
  // and with the narrower blocks for short spans of 256-dim heads.
  // Plans 0 and 4-7 take long F16 spans on tensor cores (attn_dec; 4 takes
  // twice the splits, past what the default takes in clusters; 5 merges by
  // the merging launch only; 6 and 7 in clusters of at most 4 and 16 blocks
  // wherever it splits); 1-3 keep them on CUDA cores (attn_vec).
  std::vector<CudaOptions> plans(8);
  plans[1].attn_head_blocks = 1, plans[1].attn_strided = false;
  plans[2].attn_rows = 2, plans[2].attn_blocks = 4;
  plans[3].attn_head_blocks = 2;  // 256 threads for 256-dim heads
  for (int i = 1; i <= 3; ++i) plans[i].attn_decode_mma = false;
  plans[4].attn_blocks = 4;
  plans[5].attn_cluster = 0;
  plans[6].attn_cluster = 4;
  plans[7].attn_cluster = 16;
  size_t scratch_bytes = 0;
  for (const auto& o : plans) scratch_bytes = std::max(scratch_bytes, cuda::attention_scratch_bytes(dev.dst, o));
  DeviceBuffer scratch(scratch_bytes);
  for (size_t run = 0; run < 2 * plans.size(); ++run) {
    const bool mask_fixed = run % 2 == 1;
    const CudaOptions& opts = plans[run / 2];
    SCOPED_TRACE("plan " + std::to_string(run / 2) + (mask_fixed ? ", mask scanned early" : ""));
    od.fill(0xFF);  // NaN wherever the kernel does not write
    cuda::OpCtx ctx;
    ctx.opts = &opts;
    ctx.stream = nullptr;
    ctx.scratch = scratch.get();
    ctx.scratch_bytes = scratch.size();
    ctx.sm_count = c.sm ? c.sm : device_sms();
    ctx.weights_constant = mask_fixed;
    cuda::op_attention(dev.dst, ctx);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto gpu_out = od.download<float>();

    const double tol = uses_tensor_cores(c) || (opts.attn_decode_mma && may_use_decode_mma(c)) ? 2e-2 : 2e-3;
    const double e = max_head_err(gpu_out, cpu_out, c.D, &where);
    EXPECT_LT(e, tol) << where << (mask_fixed ? " (mask scanned early)" : "");
  }
}

AttnCase mk(std::string name, int D, int Hq, int Hkv, int T, int S, DType kv, MaskKind m) {
  AttnCase c;
  c.name = std::move(name);
  c.D = D, c.Hq = Hq, c.Hkv = Hkv, c.T = T, c.S = S, c.kv = kv, c.mask = m;
  return c;
}

constexpr DType F16 = DType::F16, F32 = DType::F32, Q8 = DType::Q8_0;

TEST(CudaAttention, Decode) {
  WEIR_REQUIRE_GPU();
  std::vector<AttnCase> cases = {
      mk("llama3 8B, padded span", 128, 32, 8, 1, 4096, F16, MaskKind::Causal),
      mk("gemma3 local", 256, 4, 1, 1, 4096, F16, MaskKind::Window),
      mk("qwen2.5 7B", 128, 28, 4, 1, 1000, F16, MaskKind::Causal),
      mk("D 64 MHA f32", 64, 8, 8, 1, 256, F32, MaskKind::Causal),
      mk("gqa 2 f32 random", 128, 4, 2, 1, 1000, F32, MaskKind::Random),
      mk("gqa 8 one key", 128, 16, 2, 1, 1, F16, MaskKind::None),
      mk("D 72", 72, 4, 2, 1, 37, F16, MaskKind::Causal),
      mk("D 72 f32", 72, 6, 3, 1, 256, F32, MaskKind::Causal),
      mk("T 3 gqa 1", 64, 4, 4, 3, 1000, F16, MaskKind::Causal),
      mk("T 3 gemma", 256, 4, 1, 3, 256, F16, MaskKind::Causal),
      mk("T 8 mha f32", 64, 4, 4, 8, 256, F32, MaskKind::Causal),
      mk("T 8 llama", 128, 32, 8, 8, 1000, F16, MaskKind::Causal),
      mk("T 8 gemma random", 256, 4, 1, 8, 256, F16, MaskKind::Random),
  };
  cases[0].used = 4096 - 200;  // n_kv padded to 256 cells beyond the used ones
  cases[1].used = 3000, cases[1].window = 512;
  cases[2].used = 777;
  cases[6].q_pad = 4;  // q rows not 16-byte aligned
  cases[11].used = 900;
  cases.push_back(cases[0]);
  cases.back().name += ", no split";
  cases.back().sm = 1;
  cases.push_back(cases[0]);
  cases.back().name += ", 4096 cells f32";
  cases.back().kv = F32, cases.back().used = -1;
  // Short spans: one split of 256 threads (one or two tiles), no merge.
  cases.push_back(mk("llama3 8B, short span", 128, 32, 8, 1, 256, F16, MaskKind::Causal));
  cases.back().used = 130;
  cases.push_back(mk("llama 1B, short span, two tiles", 64, 32, 8, 1, 512, F16, MaskKind::Causal));
  cases.back().used = 400;
  cases.push_back(mk("gemma3 local, short span", 256, 4, 1, 1, 128, F16, MaskKind::Window));
  cases.back().used = 100, cases.back().window = 64;
  cases.push_back(mk("mha, short span", 128, 8, 8, 1, 256, F16, MaskKind::Random));
  cases.push_back(mk("qwen2.5 7B (7 heads a kv head), short span", 128, 28, 4, 1, 256, F16, MaskKind::Causal));
  cases.back().used = 77;
  cases.push_back(mk("llama3 8B, two tokens, short span", 128, 32, 8, 2, 256, F16, MaskKind::Causal));
  cases.back().used = 200;
  // One split over a few keys: a block a query head, not one block a kv head.
  cases.push_back(mk("gemma3, 33 keys", 256, 4, 1, 1, 256, F16, MaskKind::Causal));
  cases.back().used = 33;
  cases.push_back(mk("gemma3, 200 keys", 256, 4, 1, 1, 256, F16, MaskKind::Causal));
  cases.back().used = 200;
  cases.push_back(mk("gemma3 local, 256 keys, window 100", 256, 4, 1, 1, 256, F16, MaskKind::Window));
  cases.back().window = 100;
  cases.push_back(mk("llama3 8B, 40 keys", 128, 32, 8, 1, 256, F16, MaskKind::Causal));
  cases.back().used = 40;
  // A sliding window deep in a long cache, split over the window's keys.
  cases.push_back(mk("gemma3 local at depth 4096", 256, 4, 1, 1, 4352, F16, MaskKind::Window));
  cases.back().used = 4129, cases.back().window = 512;
  cases.push_back(mk("llama 1B at depth 4096", 64, 32, 8, 1, 4352, F16, MaskKind::Causal));
  cases.back().used = 4129;
  cases.push_back(mk("gemma3 global at depth 4096", 256, 4, 1, 1, 4352, F16, MaskKind::Causal));
  cases.back().used = 4129;
  cases.push_back(mk("llama3 8B, two tokens at depth 2000", 128, 32, 8, 2, 2304, F16, MaskKind::Causal));
  cases.back().used = 2001;
  cases.push_back(mk("llama3 8B random mask at depth", 128, 32, 8, 1, 3000, F16, MaskKind::Random));
  for (const auto& c : cases) check_case(c);
}

// 8-bit caches (-ctk q8_0): the decode shapes of the models on attn_dec
// (long spans: its stages of blocks turned into halves) and attn_vec (short
// spans, several tokens, views with rows only 2-byte aligned), against the
// CPU reading the same blocks.
TEST(CudaAttention, DecodeQ8Cache) {
  WEIR_REQUIRE_GPU();
  std::vector<AttnCase> cases = {
      mk("llama3 8B at depth 4096", 128, 32, 8, 1, 4352, Q8, MaskKind::Causal),
      mk("llama 1B at depth 4096", 64, 32, 8, 1, 4352, Q8, MaskKind::Causal),
      mk("gemma3 local at depth 4096", 256, 4, 1, 1, 4352, Q8, MaskKind::Window),
      mk("gemma3 global", 256, 4, 1, 1, 2048, Q8, MaskKind::Causal),
      mk("qwen2.5 7B", 128, 28, 4, 1, 1000, Q8, MaskKind::Causal),
      mk("T 3 gqa 1", 64, 4, 4, 3, 1000, Q8, MaskKind::Causal),
      mk("T 8 llama", 128, 32, 8, 8, 1000, Q8, MaskKind::Causal),
      mk("T 8 gemma random", 256, 4, 1, 8, 256, Q8, MaskKind::Random),
      mk("llama3 8B, short span", 128, 32, 8, 1, 256, Q8, MaskKind::Causal),
      mk("gemma3, 33 keys", 256, 4, 1, 1, 256, Q8, MaskKind::Causal),
      mk("llama3 8B random mask at depth", 128, 32, 8, 1, 3000, Q8, MaskKind::Random),
      mk("D 96 (attn_vec only)", 96, 6, 2, 1, 700, Q8, MaskKind::Causal),
  };
  cases[0].used = 4129;
  cases[1].used = 4129;
  cases[2].used = 4129, cases[2].window = 512;
  cases[3].used = 1900;
  cases[4].used = 777;
  cases[6].used = 900;
  cases[8].used = 130;
  cases[9].used = 33;
  // Views whose rows lie at odd blocks (2-byte aligned: attn_vec), and at
  // pieces attn_dec still copies (8 bytes: kv_pad 128 dims = 136 bytes).
  cases.push_back(cases[0]);
  cases.back().name += ", rows 2-byte aligned", cases.back().kv_off = 32, cases.back().kv_pad = 32;
  cases.push_back(cases[0]);
  cases.back().name += ", rows 8-byte aligned", cases.back().kv_off = 128, cases.back().kv_pad = 128;
  cases.push_back(cases[0]);
  cases.back().name += ", no split", cases.back().sm = 1;
  for (const auto& c : cases) check_case(c);
}

// Batched decode: one token per sequence, with the separate_tokens hint
// (a block per token and kv-head group, reading only that token's keys).
TEST(CudaAttention, SeparateTokens) {
  WEIR_REQUIRE_GPU();
  std::vector<AttnCase> cases = {
      mk("llama 8B, 64 sequences in regions", 128, 32, 8, 64, 64 * 129, F16, MaskKind::Sequences),
      mk("gemma3, 16 sequences in regions", 256, 4, 1, 16, 16 * 40, F16, MaskKind::Sequences),
      mk("gqa 6 (2 rows a block), interleaved", 128, 12, 2, 20, 600, F16, MaskKind::Interleaved),
      mk("f32 mha, 5 sequences", 64, 4, 4, 5, 500, F32, MaskKind::Sequences),
      mk("q8 llama 8B, 16 sequences in regions", 128, 32, 8, 16, 16 * 129, Q8, MaskKind::Sequences),
  };
  cases[0].used = 64 * 129 - 40;
  cases[1].masked_row = 3;  // a token that sees no key at all
  for (auto& c : cases) c.separate = true;
  for (const auto& c : cases) check_case(c);
}

TEST(CudaAttention, Prefill) {
  WEIR_REQUIRE_GPU();
  std::vector<AttnCase> cases = {
      mk("llama-like T 64", 128, 8, 2, 64, 1000, F16, MaskKind::Causal),
      mk("gemma3 global T 300", 256, 4, 1, 300, 1000, F16, MaskKind::Causal),
      mk("gemma3 local T 300", 256, 4, 1, 300, 1000, F16, MaskKind::Window),
      mk("D 64 gqa 8 T 300", 64, 16, 2, 300, 1000, F16, MaskKind::Causal),
      mk("D 64 T 512", 64, 4, 1, 512, 512, F16, MaskKind::Causal),
      mk("T 64 S 4096", 128, 4, 4, 64, 4096, F16, MaskKind::Causal),
      mk("random mask", 128, 8, 4, 64, 256, F16, MaskKind::Random),
      mk("S 37 (early tokens see nothing)", 128, 4, 2, 64, 37, F16, MaskKind::Causal),
      mk("S 1", 64, 8, 2, 3, 1, F16, MaskKind::Causal),
      mk("f32 T 300", 128, 4, 4, 300, 1000, F32, MaskKind::Causal),
      mk("f32 D 72 T 64 random", 72, 8, 2, 64, 256, F32, MaskKind::Random),
      mk("f16 D 72 T 64", 72, 4, 1, 64, 256, F16, MaskKind::Window),
      mk("gqa 4 T 3 (tensor cores, 12 rows)", 128, 8, 2, 3, 256, F16, MaskKind::Causal),
      mk("q8 llama-like T 64", 128, 8, 2, 64, 1000, Q8, MaskKind::Causal),
      mk("q8 gemma3 local T 300", 256, 4, 1, 300, 1000, Q8, MaskKind::Window),
      mk("q8 D 64 gqa 8 T 300, rows at odd blocks", 64, 16, 2, 300, 1000, Q8, MaskKind::Causal),
      mk("q8 D 96 T 64 (attn_vec)", 96, 6, 2, 64, 300, Q8, MaskKind::Causal),
  };
  cases[1].used = 700;
  cases[2].used = 900, cases[2].window = 128;
  cases[3].masked_row = 5;
  cases[5].q_pad = 2;  // strided q, not 16-byte aligned
  cases[6].masked_row = 0;
  cases[10].masked_row = 63;
  cases[11].window = 40;
  cases[15].kv_off = 32, cases[15].kv_pad = 32;  // 2-byte aligned rows: copied into halves all the same
  AttnCase c = cases[0];
  c.name = "unaligned cache view (CUDA-core fallback)";
  c.kv_off = 1, c.kv_pad = 3, c.m_pad = 1;
  cases.push_back(c);
  c = cases[0];
  c.name = "padded cache rows, peaky softmax";
  c.kv_pad = 8, c.m_pad = 4, c.scale = 0.5f;
  cases.push_back(c);
  c = cases[1];
  c.name += ", no split";
  c.sm = 1;
  cases.push_back(c);
  for (const auto& cs : cases) check_case(cs);
}

TEST(CudaAttention, BadOperandsThrow) {
  WEIR_REQUIRE_GPU();
  AttnData data(mk("bad", 128, 4, 2, 1, 8, F16, MaskKind::None));
  AttnData::Tensors ts;
  std::vector<float> out(4 * 128);
  data.make(ts, data.q.data(), data.k.data(), data.v.data(), data.mask.data(), out.data());
  cuda::OpCtx ctx;
  ts.mask.ne[0] = 9;  // mask does not cover the keys
  EXPECT_THROW(cuda::op_attention(ts.dst, ctx), Error);
  try {
    cuda::op_attention(ts.dst, ctx);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attn_out"), std::string::npos) << e.what();
  }
  ts.mask.ne[0] = 8;
  ts.v.dtype = DType::F32;  // k and v differ
  EXPECT_THROW(cuda::op_attention(ts.dst, ctx), Error);
  ts.v.dtype = DType::F16;
  ts.q.ne[0] = ts.k.ne[0] = ts.v.ne[0] = 264;  // head size above 256
  ts.dst.ne[0] = 264 * 4;
  EXPECT_THROW(cuda::op_attention(ts.dst, ctx), Error);
  ts.q.ne[0] = ts.k.ne[0] = ts.v.ne[0] = 60;  // not a multiple of 8
  ts.dst.ne[0] = 60 * 4;
  EXPECT_THROW(cuda::op_attention(ts.dst, ctx), Error);
}

}  // namespace
}  // namespace weir
