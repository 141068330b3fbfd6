#!/usr/bin/env python3
"""Independent float64 forward pass of a GGUF decoder (llama, qwen2, qwen3,
gemma2, gemma3, phi3, and the mixture-of-experts qwen3moe and Mixtral, which
GGUF calls llama), written from the published model definitions (Meta's Llama,
HF transformers' Qwen2/Qwen3/Gemma2/Gemma3/Phi3/Qwen3Moe/Mixtral), not from
weir's code.
The `gguf` package reads and dequantizes the weights.

Facts about the GGUF layout it relies on:
- a weight of GGUF shape [in, out] is a numpy [out, in] matrix: y = W @ x;
- llama q/k weights are permuted by the converter so that rope rotates
  adjacent pairs (2i, 2i+1), as Meta's original code does; qwen2/qwen3/gemma3
  keep HF's rotate_half layout: pairs (i, i + n_rot/2);
- Llama 3 rope scaling is stored as rope_freqs.weight: pair i's angle is
  divided by it; linear scaling divides positions by rope.scaling.factor;
- a mixture-of-experts layer (llama.cpp's names) has ffn_gate_inp.weight
  [n_embd, n_expert] (the router) and ffn_{gate,up,down}_exps.weight, GGUF
  [n_embd, n_ff_exp, n_expert] / [n_ff_exp, n_embd, n_expert], numpy
  [n_expert, out, in]; ARCH.expert_used_count experts run per token;
- phi3 (HF Phi3ForCausalLM): qkv_proj is attn_qkv.weight (q, k, v rows; some
  files split it into attn_q/k/v), gate_up_proj is ffn_up.weight (gate rows,
  then up: silu(gate) * up), rotate_half rope; LongRoPE's per-pair divisors
  are rope_factors_short.weight / rope_factors_long.weight, the short ones
  while the context (n_ctx) is within rope.scaling.original_context_length,
  as llama.cpp picks them, and cos and sin are multiplied by
  rope.scaling.attn_factor; attention.sliding_window is not used (llama.cpp
  turns Phi's off).
- gemma2 (HF Gemma2ForCausalLM): gemma3's layout without q/k norms;
  layers 0, 2, 4 ... slide (window attention.sliding_window), the others see
  every key, all with rope.freq_base; scores (q.k) * query_pre_attn_scalar^-0.5
  are soft-capped, cap * tanh(s / cap) with cap ARCH.attn_logit_softcapping,
  before the mask; the logits likewise with ARCH.final_logit_softcapping.
  GGUF does not store query_pre_attn_scalar: HF's configs give head_dim for
  the 2B and 9B and hidden_size / num_heads (144) for the 27B, which
  llama.cpp tells apart by its 46 layers.

With round_acts=True it also models llama.cpp's CPU rounding of activations
before products with Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 weights: x is quantized to
Q8_0 blocks of 32 (scale amax/127 stored as fp16, x * 127/amax rounded half
to even in float32) and the product uses those values (for experts too: the
normed input before the gate and up products, each expert's silu(gate) * up
before its down product; the router's F32 product is not rounded).

    reference_forward.py MODEL.gguf ID [ID ...]
        prints JSON {"top": [[id, logit], ...]} (top 50 of the last token)
"""
import json
import math
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


Q8_0_ACTIVATIONS = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"}


def round_q8_0(h):
    x = np.asarray(h, dtype=np.float32).reshape(-1, 32)
    amax = np.abs(x).max(axis=1, keepdims=True)
    inv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    d = (amax / np.float32(127)).astype(np.float16).astype(np.float64)
    return (np.round(x * inv).astype(np.float64) * d).reshape(np.shape(h))


class Forward:
    def __init__(self, path, round_acts=False, lazy=False, n_ctx=None):
        """lazy: each weight dequantized when first used, and of the token
        embeddings only the rows of the tokens run (a real model's hidden
        states in seconds, not its whole vocabulary in float64).
        n_ctx: the context the model runs with (phi3's choice of rope factors)."""
        self.round_acts = round_acts
        self.types = {}
        r = GGUFReader(path)
        self.kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.ggml.")}
        self.t = {}
        self.raw = {}
        for t in r.tensors:
            self.types[t.name] = t.tensor_type.name
            self.raw[t.name] = t
            if not lazy:
                self.W(t.name)
        self.arch = self.kv["general.architecture"]
        p = self.arch + "."
        g = lambda k, d=None: self.kv.get(p + k, d)
        self.n_layer = g("block_count")
        self.n_embd = g("embedding_length")
        self.n_head = g("attention.head_count")
        self.n_head_kv = g("attention.head_count_kv", self.n_head)
        self.head_dim = g("attention.key_length", self.n_embd // self.n_head)
        self.n_rot = g("rope.dimension_count", self.head_dim)
        self.eps = g("attention.layer_norm_rms_epsilon", 1e-5)
        self.rope_base = g("rope.freq_base", 10000.0)
        self.pos_scale = 1.0 / g("rope.scaling.factor", 1.0) if g("rope.scaling.type") == "linear" else 1.0
        self.window = g("attention.sliding_window", 0) if self.arch != "phi3" else 0
        self.rope_factors = "rope_freqs.weight"  # per-pair divisors, when the file has them
        self.rope_mscale = 1.0
        if self.arch == "phi3":
            orig = g("rope.scaling.original_context_length", g("context_length"))
            long = n_ctx is not None and n_ctx > orig
            self.rope_factors = "rope_factors_long.weight" if long else "rope_factors_short.weight"
            self.rope_mscale = g("rope.scaling.attn_factor", 1.0)
        self.gemma = self.arch in ("gemma2", "gemma3")
        # Gemma 2: HF's query_pre_attn_scalar and soft caps (0: none).
        self.query_scale = 1.0 / math.sqrt(self.head_dim)
        self.attn_softcap = self.final_softcap = 0.0
        if self.arch == "gemma2":
            if self.n_layer == 46:  # Gemma 2 27B: query_pre_attn_scalar = hidden_size / num_heads
                self.query_scale = 1.0 / math.sqrt(self.n_embd // self.n_head)
            self.attn_softcap = g("attn_logit_softcapping", 50.0)
            self.final_softcap = g("final_logit_softcapping", 30.0)
            self.window = g("attention.sliding_window", 4096)
        self.n_expert = g("expert_count", 0)
        self.n_expert_used = g("expert_used_count", 0)
        # Smallest gap between the k-th and (k+1)-th router logit seen by
        # forward(): when tiny, float32 could choose another expert.
        self.router_margin = math.inf

    def W(self, name):
        if name not in self.t:
            t = self.raw[name]
            a = dequantize(t.data, t.tensor_type)
            self.t[name] = np.asarray(a, dtype=np.float64).reshape([int(x) for x in reversed(t.shape)])
        return self.t[name]

    def has(self, name):
        return name in self.types

    def embd_rows(self, ids):
        """Rows ids of token_embd.weight (only those dequantized when lazy)."""
        if "token_embd.weight" in self.t:
            return self.t["token_embd.weight"][ids]
        t = self.raw["token_embd.weight"]
        return np.asarray(dequantize(t.data[ids], t.tensor_type), dtype=np.float64).reshape(len(ids), -1)

    def rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos, base):
        """x [T, H, D]: rotate the first n_rot dims of every head."""
        n = self.n_rot
        inv = base ** (-np.arange(0, n // 2, dtype=np.float64) * 2.0 / n)
        if self.has(self.rope_factors):
            inv = inv / self.W(self.rope_factors)
        ang = (pos * self.pos_scale)[:, None] * inv[None, :]  # [T, n/2]
        c, s = np.cos(ang)[:, None, :] * self.rope_mscale, np.sin(ang)[:, None, :] * self.rope_mscale
        out = x.copy()
        if self.arch == "llama":  # adjacent pairs
            a, b = x[..., 0:n:2], x[..., 1:n:2]
            out[..., 0:n:2], out[..., 1:n:2] = a * c - b * s, a * s + b * c
        else:  # halves
            a, b = x[..., : n // 2], x[..., n // 2 : n]
            out[..., : n // 2], out[..., n // 2 : n] = a * c - b * s, a * s + b * c
        return out

    def mm(self, h, name):
        """h @ W^T for the weight called name."""
        return self.round_for(h, name) @ self.W(name).T

    def round_for(self, h, name):
        """h as a product with weight `name` sees it (rounded when round_acts)."""
        if self.round_acts and self.types[name] != "F32":
            if self.types[name] not in Q8_0_ACTIVATIONS:
                raise NotImplementedError(f"activation rounding for {self.types[name]} weights")
            h = round_q8_0(h)
        return h

    def moe(self, h, b, act):
        """Sparse MoE block (HF Qwen3MoeSparseMoeBlock with norm_topk_prob, and
        MixtralSparseMoeBlock): softmax over the router logits, the k most
        probable experts (ties: lower id first), their probabilities
        renormalized to sum 1, and the weighted sum of their SwiGLU outputs."""
        k = self.n_expert_used
        router = self.W(b + "ffn_gate_inp.weight")  # [n_expert, n_embd]
        gate_e, up_e = self.W(b + "ffn_gate_exps.weight"), self.W(b + "ffn_up_exps.weight")
        down_e = self.W(b + "ffn_down_exps.weight")  # [n_expert, n_embd, n_ff_exp]
        n_expert = router.shape[0]
        if n_expert != self.n_expert or not 0 < k <= n_expert:
            raise ValueError(f"{b}: router has {n_expert} experts, expert_count {self.n_expert}, used {k}")
        logits = self.mm(h, b + "ffn_gate_inp.weight")  # [T, n_expert]
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        chosen = np.argsort(-p, axis=1, kind="stable")[:, :k]  # stable: equal p keep the lower id first
        if k < n_expert:
            top = np.sort(logits, axis=1)[:, ::-1]
            self.router_margin = min(self.router_margin, float((top[:, k - 1] - top[:, k]).min()))
        weight = np.take_along_axis(p, chosen, axis=1)
        weight /= weight.sum(axis=1, keepdims=True)
        hg = self.round_for(h, b + "ffn_gate_exps.weight")
        hu = self.round_for(h, b + "ffn_up_exps.weight")
        out = np.zeros_like(h)
        for e in range(n_expert):
            rows, slot = np.nonzero(chosen == e)
            if len(rows) == 0:
                continue
            f = act(hg[rows] @ gate_e[e].T) * (hu[rows] @ up_e[e].T)
            f = self.round_for(f, b + "ffn_down_exps.weight") @ down_e[e].T
            out[rows] += weight[rows, slot][:, None] * f
        return out

    def lin(self, h, prefix):
        y = self.mm(h, prefix + ".weight")
        if self.has(prefix + ".bias"):
            y = y + self.W(prefix + ".bias")
        return y

    def attention(self, q, k, v, allowed):
        T, Hq, D = q.shape
        group = Hq // self.n_head_kv
        out = np.zeros((T, Hq, v.shape[-1]))
        for hh in range(Hq):
            s = q[:, hh, :] @ k[:, hh // group, :].T * self.query_scale
            if self.attn_softcap:
                s = np.tanh(s / self.attn_softcap) * self.attn_softcap
            s = np.where(allowed, s, -np.inf)
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            out[:, hh, :] = s @ v[:, hh // group, :]
        return out.reshape(T, -1)

    def forward(self, ids):
        """Logits [T, n_vocab] for every position of ids (causal)."""
        x = self.hidden(ids)
        logits = self.mm(x, "output.weight" if self.has("output.weight") else "token_embd.weight")
        if self.final_softcap:
            logits = np.tanh(logits / self.final_softcap) * self.final_softcap
        return logits

    def hidden(self, ids):
        """Hidden states [T, n_embd] for every position of ids (causal): the
        last layer's output after the output norm, before the LM head."""
        T, D, Hq, Hkv = len(ids), self.head_dim, self.n_head, self.n_head_kv
        pos = np.arange(T, dtype=np.float64)
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]
        causal = j <= i
        x = self.embd_rows(ids)
        if self.gemma:
            x = x * math.sqrt(self.n_embd)
        gelu = lambda u: 0.5 * u * (1 + np.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
        silu = lambda u: u / (1 + np.exp(-u))
        for il in range(self.n_layer):
            b = f"blk.{il}."
            h = self.rms(x, self.W(b + "attn_norm.weight"))
            if self.has(b + "attn_qkv.weight"):  # phi3: q, k, v rows of one matrix
                qkv = self.mm(h, b + "attn_qkv.weight")
                q = qkv[:, : Hq * D].reshape(T, Hq, D)
                k = qkv[:, Hq * D : (Hq + Hkv) * D].reshape(T, Hkv, D)
                v = qkv[:, (Hq + Hkv) * D :].reshape(T, Hkv, -1)
            else:
                q = self.lin(h, b + "attn_q").reshape(T, Hq, D)
                k = self.lin(h, b + "attn_k").reshape(T, Hkv, D)
                v = self.lin(h, b + "attn_v").reshape(T, Hkv, -1)
            if self.has(b + "attn_q_norm.weight"):  # qwen3, gemma3: per-head RMS norm before rope
                q = self.rms(q, self.W(b + "attn_q_norm.weight"))
                k = self.rms(k, self.W(b + "attn_k_norm.weight"))
            allowed, base = causal, self.rope_base
            if self.arch == "gemma3" and self.window > 0 and (il + 1) % 6 != 0:  # local layers
                allowed, base = causal & (i - j < self.window), 10000.0
            if self.arch == "gemma2" and self.window > 0 and il % 2 == 0:  # sliding layers: same rope base
                allowed = causal & (i - j < self.window)
            q, k = self.rope(q, pos, base), self.rope(k, pos, base)
            a = self.lin(self.attention(q, k, v, allowed), b + "attn_output")
            if self.gemma:
                x = x + self.rms(a, self.W(b + "post_attention_norm.weight"))
            else:
                x = x + a
            h = self.rms(x, self.W(b + "ffn_norm.weight"))
            if self.has(b + "ffn_gate_inp.weight"):  # qwen3moe, Mixtral: every layer's FFN is MoE
                x = x + self.moe(h, b, silu)
                continue
            if self.arch == "phi3":  # gate_up_proj: gate rows, then up rows
                gate, up = np.split(self.mm(h, b + "ffn_up.weight"), 2, axis=1)
            else:
                gate, up = self.mm(h, b + "ffn_gate.weight"), self.mm(h, b + "ffn_up.weight")
            f = self.mm((gelu(gate) if self.gemma else silu(gate)) * up, b + "ffn_down.weight")
            x = x + (self.rms(f, self.W(b + "post_ffw_norm.weight")) if self.gemma else f)
        return self.rms(x, self.W("output_norm.weight"))


if __name__ == "__main__":
    m = Forward(sys.argv[1])
    logits = m.forward([int(a) for a in sys.argv[2:]])[-1]
    top = np.argsort(-logits)[:50]
    print(json.dumps({"top": [[int(i), float(logits[i])] for i in top]}))
