#!/usr/bin/env python3
"""Independent float64 forward pass of a gpt-oss GGUF, written from HF
transformers' GptOss model definition (GptOssAttention, GptOssMLP,
GptOssTopKRouter, the YaRN rotary embedding), not from weir's code; the
`gguf` package reads and dequantizes the weights (reference_forward.py's
Forward does the reading, RMS norms and activation rounding).

What it computes, per layer il (GGUF names, numpy [out, in] matrices):
  h = rms(x) * attn_norm
  q, k, v = Wq h + bq, Wk h + bk, Wv h + bv                 heads of head_dim
  q, k = rope(q), rope(k): rotate_half pairs (i, i + d/2), YaRN frequencies:
         inv_i = base^(-2i/d) ((1 - r_i) / s + r_i), r_i = 1 - clamp((i - lo)
         / (hi - lo), 0, 1), lo = floor(c(beta_fast)), hi = ceil(c(beta_slow)),
         c(beta) = d ln(n0 / (2 pi beta)) / (2 ln base) (HF's
         find_correction_range with truncation, as llama.cpp computes it),
         and cos and sin times 0.1 ln(s) + 1
  scores = q.k / sqrt(head_dim); layers 0, 2, 4... see keys i - j < window,
         the others every earlier key; softmax over the keys and the head's
         sink (attn_sinks.weight[h]), the sink's column dropped
  x += Wo attn + bo
  h = rms(x) * post_attention_norm
  logits = Wr h + br; the k largest (ties: lower id first); weights =
         softmax over those k logits
  expert e: g = min(We_gate h + bg_e, 7), u = clamp(We_up h + bu_e, -7, 7),
         f = We_down ((u + 1) g sigmoid(1.702 g)) + bd_e
  x += sum_j w_j f_{e_j}
logits = output @ (rms(x) * output_norm).

With round_acts it rounds the products' inputs as llama.cpp's CPU does:
Q8_0 blocks before Q8_0 and MXFP4 weights (reference_forward.round_q8_0),
and round_margin is the smallest distance, in quant steps, of an input
scaled by 127 / its block's max from a rounding boundary (k + 1/2). An
implementation in float32 lands up to 1e-4 steps (most within 1e-5)
from these values (its products summed in another order), so an input
nearer a boundary may round to the next quant there, which a tiny random
model carries to the logits (0.9% of a row once, from a margin of 2e-6).

    gpt_oss_forward.py MODEL.gguf OUT.json ID [ID ...]
        writes {"logits": [...], "logits_rounded": [...], "router_margin",
        "round_margin"} (logits of every position)
"""
import json
import math
import sys

import numpy as np

from reference_forward import Forward, round_q8_0

ALPHA, LIMIT = 1.702, 7.0


def tie_margin(h):
    """The smallest distance of h's Q8_0 values (x * 127 / max |x| of its
    32-block, x as float32, in float64) from a rounding boundary k + 1/2."""
    x = np.asarray(h, dtype=np.float32).reshape(-1, 32).astype(np.float64)
    amax = np.abs(x).max(axis=1, keepdims=True)
    v = x * 127 / np.where(amax > 0, amax, 1)
    return float(np.abs(np.abs(v - np.trunc(v)) - 0.5).min())


class GptOssForward(Forward):
    def __init__(self, path, round_acts=False):
        super().__init__(path, round_acts=round_acts)
        self.round_margin = math.inf
        p = self.arch + "."
        g = lambda k, d=None: self.kv.get(p + k, d)
        self.window = g("attention.sliding_window", 0)
        d = self.head_dim
        inv = self.rope_base ** (-np.arange(0, d // 2, dtype=np.float64) * 2.0 / d)
        self.attention_scaling = 1.0
        if g("rope.scaling.type") == "yarn":
            s = g("rope.scaling.factor")
            n0 = g("rope.scaling.original_context_length")
            beta_fast, beta_slow = g("rope.scaling.yarn_beta_fast", 32.0), g("rope.scaling.yarn_beta_slow", 1.0)
            corr = lambda beta: d * math.log(n0 / (beta * 2 * math.pi)) / (2 * math.log(self.rope_base))
            lo, hi = max(math.floor(corr(beta_fast)), 0), min(math.ceil(corr(beta_slow)), d - 1)
            if lo == hi:
                hi += 0.001
            ramp = np.clip((np.arange(d // 2, dtype=np.float64) - lo) / (hi - lo), 0, 1)
            extrapolation = 1 - ramp  # HF's inv_freq_extrapolation_factor
            inv = (inv / s) * (1 - extrapolation) + inv * extrapolation
            self.attention_scaling = 0.1 * math.log(s) + 1.0
        self.inv_freq = inv

    def round_for(self, h, name):
        if self.round_acts and self.types[name] != "F32":
            self.round_margin = min(self.round_margin, tie_margin(h))
        if self.round_acts and self.types[name] == "MXFP4":
            return round_q8_0(h)
        return super().round_for(h, name)

    def rope_yarn(self, x, pos):
        d = self.head_dim
        ang = pos[:, None] * self.inv_freq[None, :]
        c = np.cos(ang)[:, None, :] * self.attention_scaling
        s = np.sin(ang)[:, None, :] * self.attention_scaling
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)

    def attention_sinks(self, q, k, v, allowed, sinks):
        T, Hq, D = q.shape
        group = Hq // self.n_head_kv
        out = np.zeros((T, Hq, v.shape[-1]))
        for hh in range(Hq):
            s = q[:, hh, :] @ k[:, hh // group, :].T / math.sqrt(D)
            s = np.where(allowed, s, -np.inf)
            full = np.concatenate([s, np.full((T, 1), sinks[hh])], axis=1)
            full = np.exp(full - full.max(axis=1, keepdims=True))
            full /= full.sum(axis=1, keepdims=True)
            out[:, hh, :] = full[:, :-1] @ v[:, hh // group, :]
        return out.reshape(T, -1)

    def experts(self, h, b):
        k = self.n_expert_used
        logits = self.mm(h, b + "ffn_gate_inp.weight") + self.W(b + "ffn_gate_inp.bias")  # [T, E]
        n_expert = logits.shape[1]
        chosen = np.argsort(-logits, axis=1, kind="stable")[:, :k]
        if k < n_expert:
            top = np.sort(logits, axis=1)[:, ::-1]
            self.router_margin = min(self.router_margin, float((top[:, k - 1] - top[:, k]).min()))
        top_logits = np.take_along_axis(logits, chosen, axis=1)
        weight = np.exp(top_logits - top_logits.max(axis=1, keepdims=True))
        weight /= weight.sum(axis=1, keepdims=True)
        gate_e, up_e = self.W(b + "ffn_gate_exps.weight"), self.W(b + "ffn_up_exps.weight")
        down_e = self.W(b + "ffn_down_exps.weight")
        gate_b, up_b = self.W(b + "ffn_gate_exps.bias"), self.W(b + "ffn_up_exps.bias")
        down_b = self.W(b + "ffn_down_exps.bias")
        hg = self.round_for(h, b + "ffn_gate_exps.weight")
        hu = self.round_for(h, b + "ffn_up_exps.weight")
        out = np.zeros_like(h)
        for e in range(n_expert):
            rows, slot = np.nonzero(chosen == e)
            if len(rows) == 0:
                continue
            gate = np.minimum(hg[rows] @ gate_e[e].T + gate_b[e], LIMIT)
            up = np.clip(hu[rows] @ up_e[e].T + up_b[e], -LIMIT, LIMIT)
            f = (up + 1) * gate / (1 + np.exp(-ALPHA * gate))
            f = self.round_for(f, b + "ffn_down_exps.weight") @ down_e[e].T + down_b[e]
            out[rows] += weight[rows, slot][:, None] * f
        return out

    def hidden(self, ids):
        T, D, Hq, Hkv = len(ids), self.head_dim, self.n_head, self.n_head_kv
        pos = np.arange(T, dtype=np.float64)
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]
        causal = j <= i
        x = self.embd_rows(ids)
        for il in range(self.n_layer):
            b = f"blk.{il}."
            h = self.rms(x, self.W(b + "attn_norm.weight"))
            q = self.lin(h, b + "attn_q").reshape(T, Hq, D)
            k = self.lin(h, b + "attn_k").reshape(T, Hkv, D)
            v = self.lin(h, b + "attn_v").reshape(T, Hkv, -1)
            q, k = self.rope_yarn(q, pos), self.rope_yarn(k, pos)
            allowed = causal & (i - j < self.window) if self.window > 0 and il % 2 == 0 else causal
            a = self.attention_sinks(q, k, v, allowed, self.W(b + "attn_sinks.weight"))
            x = x + self.lin(a, b + "attn_output")
            x = x + self.experts(self.rms(x, self.W(b + "post_attention_norm.weight")), b)
        return self.rms(x, self.W("output_norm.weight"))

    def forward(self, ids):
        x = self.hidden(ids)
        return self.mm(x, "output.weight" if self.has("output.weight") else "token_embd.weight")


def main():
    path, out, ids = sys.argv[1], sys.argv[2], [int(a) for a in sys.argv[3:]]
    res = {}
    for key, rounded in (("logits", False), ("logits_rounded", True)):
        fwd = GptOssForward(path, round_acts=rounded)
        res[key] = fwd.forward(ids).tolist()
        res["router_margin"] = fwd.router_margin
    res["round_margin"] = fwd.round_margin
    with open(out, "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main()
