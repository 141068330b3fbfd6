// Mixture-of-experts ops (core/graph.h): top_k, moe_weights, mul_mat_id,
// moe_sum.
//
// mul_mat_id groups the step's (slot, token) pairs by expert, so that each
// expert's weight rows are read once for all the tokens routed to it; the
// work items are (expert, chunk of rows), claimed from the shared counter.
// Every kernel here does all its reading inside claimed chunks (the
// barrier after a node waits for chunks, not threads).
// With x quantized for the integer kernels (the rounded shadow the backend
// makes, as for mul_mat) a chunk runs the weight type's dot tile over up to
// kTileMax gathered tokens at a time; with float x it dequantizes each row
// once and dots it with every routed token.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ops_common.h"
#include "backend/cpu/ops_dequant.h"
#include "backend/cpu/ops_mul_mat_q.h"
#include "backend/cpu/qdot.h"
#include "core/dtype.h"

namespace weir::cpu {
namespace {

float finite_or_low(float v) { return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v; }

// The (slot, token) pairs of each expert: flat output rows j + k*t, grouped
// by expert in token order.
struct Routes {
  std::vector<int32_t> offset;  // [E + 1]
  std::vector<int32_t> rows;    // j + k * t
};

std::string check_routes(const Tensor& ids, int64_t E) {
  const int64_t k = ids.ne[0], T = ids.ne[1];
  for (int64_t t = 0; t < T; ++t) {
    const int32_t* id = ids.row_ptr<const int32_t>(t);
    for (int64_t j = 0; j < k; ++j)
      if (id[j] < 0 || id[j] >= E)
        return "mul_mat_id: expert id " + std::to_string(id[j]) + " outside 0.." + std::to_string(E - 1);
  }
  return {};
}

void build_routes(const Tensor& ids, int64_t E, Routes* r) {
  const int64_t k = ids.ne[0], T = ids.ne[1];
  r->offset.assign(size_t(E) + 1, 0);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t* id = ids.row_ptr<const int32_t>(t);
    for (int64_t j = 0; j < k; ++j) ++r->offset[size_t(id[j]) + 1];
  }
  for (int64_t e = 0; e < E; ++e) r->offset[size_t(e) + 1] += r->offset[size_t(e)];
  r->rows.resize(size_t(k * T));
  std::vector<int32_t> next(r->offset.begin(), r->offset.end() - 1);  // each expert's next free place
  for (int64_t t = 0; t < T; ++t) {
    const int32_t* id = ids.row_ptr<const int32_t>(t);
    for (int64_t j = 0; j < k; ++j) r->rows[size_t(next[size_t(id[j])]++)] = int32_t(j + k * t);
  }
}

float dot_f32(const float* a, const float* b, int64_t n) {
  float s[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) s[l] += a[i + l] * b[i + l];
  float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

}  // namespace

void op_top_k(const Tensor& dst, const OpContext& c) {
  const Tensor& x = *dst.src[0];
  const int64_t E = x.ne[0], k = dst.ne[0], T = dst.ne[1];
  std::vector<float> best(static_cast<size_t>(k));
  // Chunks from the shared counter (never static slices): the barrier after
  // a node waits for its chunks.
  for_each_row_chunk(c, T, E, [&](int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    const float* v = flat_row<const float>(x, t);
    int32_t* out = dst.row_ptr<int32_t>(t);
    int64_t n = 0;  // kept so far, best first
    for (int64_t i = 0; i < E; ++i) {
      const float f = finite_or_low(v[i]);
      if (n == k && !(f > best[size_t(n - 1)])) continue;  // ties keep the lower index
      int64_t p = n < k ? n++ : k - 1;
      while (p > 0 && f > best[size_t(p - 1)]) {
        best[size_t(p)] = best[size_t(p - 1)];
        out[p] = out[p - 1];
        --p;
      }
      best[size_t(p)] = f;
      out[p] = int32_t(i);
    }
  }
  });
}

void op_moe_weights(const Tensor& dst, const OpContext& c) {
  const Tensor& logits = *dst.src[0];
  const Tensor& ids = *dst.src[1];
  const int64_t E = logits.ne[0], k = dst.ne[0], T = dst.ne[1];
  const bool normalize = dst.iparams[0] != 0;
  for_each_row_chunk(c, T, E, [&](int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    const float* l = flat_row<const float>(logits, t);
    const int32_t* id = ids.row_ptr<const int32_t>(t);
    float* w = dst.row_ptr<float>(t);
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < E; ++i) m = std::max(m, finite_or_low(l[i]));
    float sum = 0;
    for (int64_t i = 0; i < E; ++i) sum += std::exp(finite_or_low(l[i]) - m);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = id[j];
      w[j] = e >= 0 && e < E ? std::exp(finite_or_low(l[e]) - m) / sum : 0.0f;
    }
    if (normalize) {
      float s = 0;
      for (int64_t j = 0; j < k; ++j) s += w[j];
      if (s > 0)
        for (int64_t j = 0; j < k; ++j) w[j] /= s;
    }
  }
  });
}

void op_moe_sum(const Tensor& dst, const OpContext& c) {
  const Tensor& y = *dst.src[0];
  const Tensor& w = *dst.src[1];
  const int64_t N = y.ne[0], k = y.ne[1], T = y.ne[2];
  for_each_row_chunk(c, T, N, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* wt = w.row_ptr<const float>(t);
      float* out = dst.row_ptr<float>(t);
      const float* y0 = y.row_ptr<const float>(0, t);
      for (int64_t n = 0; n < N; ++n) out[n] = wt[0] * y0[n];
      for (int64_t j = 1; j < k; ++j) {
        const float* yj = y.row_ptr<const float>(j, t);
        const float wj = wt[j];
        for (int64_t n = 0; n < N; ++n) out[n] = out[n] + wj * yj[n];
      }
    }
  });
}

void op_mul_mat_id(const Tensor& dst, const OpContext& c) {
  const Tensor& W = *dst.src[0];
  const Tensor& X = *dst.src[1];
  const Tensor& ids = *dst.src[2];
  const int64_t K = W.ne[0], N = W.ne[1], E = W.ne[2], k = ids.ne[0], T = ids.ne[1];
  const int64_t xr_per_token = X.n_rows() / T;  // 1: shared by the slots; k: one a slot
  const bool quantized_x = is_quantized_activation(X.dtype);
  const QDotKernels kern = quantized_x ? qdot_kernels(W.dtype) : QDotKernels{};
  if (quantized_x && !kern) return fail(c, "mul_mat_id: no integer kernel for " + std::string(traits(W.dtype).name));
  if (!quantized_x && (X.dtype != DType::F32 || !traits(W.dtype).dequantizable))
    return fail(c, "mul_mat_id: weights of type " + std::string(traits(W.dtype).name) + " cannot be dequantized");
  // The routes are read from ids only inside a claimed chunk: the barrier
  // after this node waits for chunks, so a thread that read ids before
  // claiming one could still be reading when a later node reuses their
  // memory. Items are (expert, chunk of rows) for every expert; experts no
  // token chose are skipped.
  static thread_local Routes routes;
  bool have_routes = false;
  const auto* wbase = static_cast<const uint8_t*>(W.data);
  const size_t ws = W.nb[1];
  auto x_row = [&](int32_t flat) {  // the input row of output row j + k*t
    const int64_t j = flat % k, t = flat / k;
    const int64_t r = xr_per_token == 1 ? t : j + k * t;
    return X.row_ptr<const uint8_t>(r % X.ne[1], (r / X.ne[1]) % X.ne[2], r / (X.ne[1] * X.ne[2]));
  };
  auto y_row = [&](int32_t flat) { return dst.row_ptr<float>(flat % k, flat / k); };
  // Rows a work item, from the shapes alone: 64 (qwen3-30b-a3b decode on 16
  // threads, H100 host: 16 rows 26.4-26.8 t/s, 32 28.1, 64 27.3-28.9, 128
  // 28.7); groups of a few tokens each take 16, to leave items for every
  // thread.
  const int64_t tokens_avg = k * T / E;
  const int64_t R = std::min<int64_t>(N, k * T < E || tokens_avg >= kTileMax ? 64 : 16);
  const int64_t chunks = (N + R - 1) / R;
  const size_t xbytes = quantized_x ? act_row_bytes(W.dtype, K) : size_t(K) * sizeof(float);
  if (k * T < E) {
    // Few (slot, token) pairs (decode): an item is a pair's chunk of rows of
    // its expert, so that only the chosen experts' work is counted out (an
    // item per expert would mostly be empty ones, each a claim on the
    // shared counter). Two pairs with the same expert read its rows twice:
    // rare at this size.
    for_each_chunk(c, k * T * chunks, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t item = i0; item < i1; ++item) {
        const int32_t flat = int32_t(item / chunks);
        const int32_t e = ids.row_ptr<const int32_t>(flat / k)[flat % k];
        if (e < 0 || e >= E)
          throw Error("mul_mat_id: expert id " + std::to_string(e) + " outside 0.." + std::to_string(E - 1));
        const int64_t r0 = (item % chunks) * R, r1 = std::min(N, r0 + R);
        const uint8_t* w = wbase + size_t(e) * W.nb[2];
        float* y = y_row(flat);
        if (quantized_x) {
          kern.tile(K, w + r0 * ws, ws, int(r1 - r0), x_row(flat), xbytes, 1, y + r0, size_t(r1 - r0));
        } else {
          float* wrow = c.scratch->floats(size_t(K));
          const auto* xf = reinterpret_cast<const float*>(x_row(flat));
          for (int64_t n = r0; n < r1; ++n) {
            dequantize_row(W.dtype, w + size_t(n) * ws, wrow, K);
            y[n] = dot_f32(wrow, xf, K);
          }
        }
      }
    });
    return;
  }
  for_each_chunk(c, E * chunks, 1, [&](int64_t i0, int64_t i1) {
    if (!have_routes) {
      if (std::string err = check_routes(ids, E); !err.empty()) throw Error(err);
      build_routes(ids, E, &routes);
      have_routes = true;
    }
    for (int64_t item = i0; item < i1; ++item) {
      const int32_t e = int32_t(item / chunks);
      const int64_t n_rows = routes.offset[size_t(e) + 1] - routes.offset[size_t(e)];
      if (n_rows == 0) continue;
      const int64_t r0 = (item % chunks) * R, r1 = std::min(N, r0 + R);
      const int32_t* rows = routes.rows.data() + routes.offset[size_t(e)];
      const uint8_t* w = wbase + size_t(e) * W.nb[2];
      if (quantized_x) {
        const int mr = int(r1 - r0);
        if (n_rows == 1) {  // decode: straight from x into y
          kern.tile(K, w + r0 * ws, ws, mr, x_row(rows[0]), xbytes, 1, y_row(rows[0]) + r0, size_t(mr));
          continue;
        }
        // Up to kTileMax tokens gathered side by side, their dots into a
        // small tile, then out to their rows.
        float* buf = c.scratch->floats(size_t(kTileMax) * (xbytes / sizeof(float) + 1 + size_t(mr)));
        auto* xg = reinterpret_cast<uint8_t*>(buf);
        float* yt = buf + size_t(kTileMax) * (xbytes / sizeof(float) + 1);
        const size_t xstride = (xbytes / sizeof(float) + 1) * sizeof(float);
        for (int64_t s0 = 0; s0 < n_rows; s0 += kTileMax) {
          const int nr = int(std::min<int64_t>(kTileMax, n_rows - s0));
          for (int q = 0; q < nr; ++q) std::memcpy(xg + size_t(q) * xstride, x_row(rows[s0 + q]), xbytes);
          kern.tile(K, w + r0 * ws, ws, mr, xg, xstride, nr, yt, size_t(mr));
          for (int q = 0; q < nr; ++q) std::memcpy(y_row(rows[s0 + q]) + r0, yt + size_t(q) * size_t(mr), size_t(mr) * sizeof(float));
        }
      } else {
        float* wrow = c.scratch->floats(size_t(K));
        for (int64_t n = r0; n < r1; ++n) {
          dequantize_row(W.dtype, w + size_t(n) * ws, wrow, K);
          for (int64_t s = 0; s < n_rows; ++s)
            y_row(rows[s])[n] = dot_f32(wrow, reinterpret_cast<const float*>(x_row(rows[s])), K);
        }
      }
    }
  });
}

void ref_mul_mat_id(const Tensor& dst) {
  const Tensor& W = *dst.src[0];
  const Tensor& X = *dst.src[1];
  const Tensor& ids = *dst.src[2];
  const int64_t K = W.ne[0], N = W.ne[1], E = W.ne[2], k = ids.ne[0], T = ids.ne[1];
  if (X.dtype != DType::F32) throw Error("ref_mul_mat_id: float x only");
  if (std::string e = check_routes(ids, E); !e.empty()) throw Error(e);
  const int64_t xr = X.ne[1];
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids.row_ptr<const int32_t>(t)[j];
      const float* x = X.row_ptr<const float>(xr == 1 ? 0 : j, t);
      float* y = dst.row_ptr<float>(j, t);
      for (int64_t n = 0; n < N; ++n) {
        dequantize_row(W.dtype, static_cast<const uint8_t*>(W.data) + size_t(e) * W.nb[2] + size_t(n) * W.nb[1],
                       row.data(), K);
        double s = 0;
        for (int64_t i = 0; i < K; ++i) s += double(row[size_t(i)]) * double(x[i]);
        y[n] = float(s);
      }
    }
}

}  // namespace weir::cpu
