// rope: x [D, H, T] (any strides; rows contiguous), pos I32 [T], optional
// freq factors F32 [n_rot/2] (src[2]). Pair i of every head of token t is
// rotated by theta_i = freq_scale * pos[t] * base^(-2i/n_rot) / ff[i]; the
// pair is (i, i + n_rot/2) in Neox mode and (2i, 2i + 1) in Normal mode
// (iparams[1]); dims >= n_rot are copied.
// theta is built as llama.cpp's ggml_rope_cache_init does: t = float(pos),
// multiplied by theta_scale = powf(base, -2/n_rot) after each pair (float),
// divided by ff[i], then times freq_scale (the same as starting at
// pos * freq_scale when freq_scale == 1, as for Gemma 3).
#include <cmath>
#include <cstring>
#include <string>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ops_common.h"
#include "core/error.h"

namespace weir::cpu {

void op_rope(const Tensor& dst, const OpContext& c) {
  const Tensor* x = dst.src[0];
  const Tensor* pos = dst.src[1];
  const Tensor* ff = dst.src[2];
  if (!x || !pos) return fail(c, "rope: " + dst.name + ": missing operands");
  if (x->dtype != DType::F32 || x->nb[0] != sizeof(float) || dst.dtype != DType::F32 ||
      dst.nb[0] != sizeof(float))
    return fail(c, "rope: " + dst.name + ": x must be F32 with contiguous rows");
  if (pos->dtype != DType::I32 || pos->ne[0] != x->ne[2])
    return fail(c, "rope: " + dst.name + ": positions " + pos->name + " must be I32 [" +
                       std::to_string(x->ne[2]) + "]");
  for (int i = 0; i < 4; ++i)
    if (dst.ne[i] != x->ne[i]) return fail(c, "rope: " + dst.name + ": shape differs from " + shape_str(*x));
  const int64_t D = x->ne[0], H = x->ne[1], T = x->ne[2];
  const int n_rot = dst.iparams[0];
  const auto mode = RopeMode(dst.iparams[1]);
  if (n_rot <= 0 || n_rot % 2 || n_rot > D)
    return fail(c, "rope: " + dst.name + ": bad n_rot " + std::to_string(n_rot));
  if (mode != RopeMode::Neox && mode != RopeMode::Normal)
    return fail(c, "rope: " + dst.name + ": unknown mode " + std::to_string(dst.iparams[1]));
  const int half = n_rot / 2;
  if (ff && (ff->dtype != DType::F32 || ff->nb[0] != sizeof(float) || ff->ne[0] < half))
    return fail(c, "rope: " + dst.name + ": freq factors " + shape_str(*ff) + " must be F32 [" +
                       std::to_string(half) + "]");
  const float base = dst.fparams[0];
  const float freq_scale = dst.fparams[1];
  const float theta_scale = powf(base, -2.0f / float(n_rot));
  const float* factors = ff ? static_cast<const float*>(ff->data) : nullptr;
  // Where the two halves of pair i live: (i * step, i * step + other).
  const int step = mode == RopeMode::Neox ? 1 : 2;
  const int other = mode == RopeMode::Neox ? half : 1;

  const int64_t rows = H * T * x->ne[3];
  Scratch local;
  Scratch* s = c.scratch ? c.scratch : &local;
  float* cs = s->floats(size_t(n_rot));  // cos at [i], sin at [half + i]
  int64_t cached_t = -1;
  const auto* pp = static_cast<const uint8_t*>(pos->data);

  for_each_row_chunk(c, rows, D, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t h = r % H, t = (r / H) % T, i3 = r / (H * T);
      if (t != cached_t) {
        int32_t p;
        std::memcpy(&p, pp + t * pos->nb[0], sizeof(p));
        float theta = float(p);
        for (int i = 0; i < half; ++i) {
          const float th = freq_scale * (factors ? theta / factors[i] : theta);
          cs[i] = cosf(th);
          cs[half + i] = sinf(th);
          theta *= theta_scale;
        }
        cached_t = t;
      }
      const float* src = x->row_ptr<float>(h, t, i3);
      float* y = dst.row_ptr<float>(h, t, i3);
      for (int i = 0; i < half; ++i) {
        const int a = i * step, b = a + other;
        const float x0 = src[a], x1 = src[b];
        const float ct = cs[i], st = cs[half + i];
        y[a] = x0 * ct - x1 * st;
        y[b] = x0 * st + x1 * ct;
      }
      if (n_rot < D) std::memmove(y + n_rot, src + n_rot, size_t(D - n_rot) * sizeof(float));
    }
  });
}

}  // namespace weir::cpu
