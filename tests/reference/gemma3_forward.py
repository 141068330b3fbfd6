#!/usr/bin/env python3
"""Independent float64 forward pass of a Gemma 3 GGUF, written from the
architecture description (not from weir's code), using the `gguf` package to
read and dequantize the weights.

    gemma3_forward.py MODEL.gguf ID [ID ...]   -> prints JSON {"top": [[id, logit], ...]}
"""
import json
import math
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


class Gemma3:
    def __init__(self, path):
        r = GGUFReader(path)
        self.kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.ggml.")}
        self.t = {}
        for t in r.tensors:
            a = dequantize(t.data, t.tensor_type)
            self.t[t.name] = np.asarray(a, dtype=np.float64).reshape([int(x) for x in reversed(t.shape)])
        p = "gemma3."
        self.n_layer = self.kv[p + "block_count"]
        self.n_embd = self.kv[p + "embedding_length"]
        self.n_head = self.kv[p + "attention.head_count"]
        self.n_head_kv = self.kv[p + "attention.head_count_kv"]
        self.head_dim = self.kv.get(p + "attention.key_length", self.n_embd // self.n_head)
        self.eps = self.kv[p + "attention.layer_norm_rms_epsilon"]
        self.rope_base = self.kv.get(p + "rope.freq_base", 10000.0)
        self.window = self.kv.get(p + "attention.sliding_window", 0)

    def rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos, base):  # x [T, H, D], NEOX: pairs (i, i + D/2)
        d = x.shape[-1]
        inv = base ** (-np.arange(0, d // 2, dtype=np.float64) * 2.0 / d)
        ang = pos[:, None] * inv[None, :]  # [T, D/2]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., : d // 2], x[..., d // 2 :]
        return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)

    def forward(self, ids):
        T, D, Hq, Hkv = len(ids), self.head_dim, self.n_head, self.n_head_kv
        pos = np.arange(T, dtype=np.float64)
        x = self.t["token_embd.weight"][ids] * math.sqrt(self.n_embd)
        gelu = lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
        for il in range(self.n_layer):
            b = f"blk.{il}."
            W = lambda n: self.t[b + n + ".weight"]
            swa = self.window > 0 and (il + 1) % 6 != 0
            h = self.rms(x, W("attn_norm"))
            q = (h @ W("attn_q").T).reshape(T, Hq, D)
            k = (h @ W("attn_k").T).reshape(T, Hkv, D)
            v = (h @ W("attn_v").T).reshape(T, Hkv, D)
            q = self.rope(self.rms(q, W("attn_q_norm")), pos, 10000.0 if swa else self.rope_base) / math.sqrt(D)
            k = self.rope(self.rms(k, W("attn_k_norm")), pos, 10000.0 if swa else self.rope_base)
            i, j = np.arange(T)[:, None], np.arange(T)[None, :]
            allowed = (j <= i) & ((i - j < self.window) if swa else True)
            out = np.zeros((T, Hq, D))
            for hh in range(Hq):
                kv = hh // (Hq // Hkv)
                s = q[:, hh, :] @ k[:, kv, :].T
                s = np.where(allowed, s, -np.inf)
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                out[:, hh, :] = s @ v[:, kv, :]
            a = out.reshape(T, Hq * D) @ W("attn_output").T
            x = x + self.rms(a, W("post_attention_norm"))
            h = self.rms(x, W("ffn_norm"))
            f = gelu(h @ W("ffn_gate").T) * (h @ W("ffn_up").T)
            x = x + self.rms(f @ W("ffn_down").T, W("post_ffw_norm"))
        x = self.rms(x[-1], self.t["output_norm.weight"])
        out = self.t.get("output.weight", self.t["token_embd.weight"])
        return out @ x


if __name__ == "__main__":
    m = Gemma3(sys.argv[1])
    logits = m.forward([int(a) for a in sys.argv[2:]])
    top = np.argsort(-logits)[:50]
    print(json.dumps({"top": [[int(i), float(logits[i])] for i in top]}))
