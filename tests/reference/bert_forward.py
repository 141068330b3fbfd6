#!/usr/bin/env python3
"""Float64 forward pass of a BERT encoder GGUF ("bert": bge, MiniLM;
"nomic-bert": nomic-embed-text), written from Hugging Face's BertModel and
NomicBertModel definitions with the weights the `gguf` package reads and
dequantizes, and llama.cpp's two choices where those differ: token type 0
for every token, and GELU by its tanh form (ggml_gelu; HF BERT's "gelu" is
the erf form).

    x = token_embd[ids] + token_types[0] (+ position_embd[0..T-1]: bert)
    x = LayerNorm(x)                                    (weight, bias)
    per layer:
      q, k, v = x Wq^T + bq, ...   (nomic: x Wqkv^T split in three, no
                                    biases; rotate_half rope on q and k,
                                    base rope.freq_base)
      a = softmax(q k^T / sqrt(d)) v per head, every token seeing every token
      x = LayerNorm(x + a Wo^T + bo)
      f = gelu_tanh(x Wup^T + bup) Wdown^T + bdown
          (nomic: (silu(x Wgate^T) * x Wup^T) Wdown^T)
      x = LayerNorm(x + f)
    hidden = x                                          [T, n_embd]

LayerNorm(x) = (x - mean) / sqrt(var + eps) * w + b, eps from
<arch>.attention.layer_norm_epsilon.
"""
import math

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def layer_norm(x, w, b, eps):
    m = x.mean(axis=-1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class BertForward:
    def __init__(self, path):
        r = GGUFReader(path)
        self.kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.ggml.")}
        self.raw = {t.name: t for t in r.tensors}
        self.t = {}
        self.arch = self.kv["general.architecture"]
        if self.arch not in ("bert", "nomic-bert"):
            raise ValueError(f"{path}: {self.arch} is not a BERT encoder")
        self.nomic = self.arch == "nomic-bert"
        p = self.arch + "."
        self.n_layer = self.kv[p + "block_count"]
        self.n_embd = self.kv[p + "embedding_length"]
        self.n_head = self.kv[p + "attention.head_count"]
        self.eps = self.kv.get(p + "attention.layer_norm_epsilon", 1e-12)
        self.rope_base = self.kv.get(p + "rope.freq_base", 10000.0)

    def W(self, name):
        if name not in self.t:
            t = self.raw[name]
            a = dequantize(t.data, t.tensor_type)
            self.t[name] = np.asarray(a, dtype=np.float64).reshape([int(x) for x in reversed(t.shape)])
        return self.t[name]

    def rope(self, x):
        """HF's rotate_half rotary embedding of x [T, H, D] at positions 0..T-1."""
        T, _, D = x.shape
        inv = self.rope_base ** (-np.arange(0, D, 2, dtype=np.float64) / D)  # [D/2]
        ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]  # [T, D/2]
        cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=-1)[:, None, :]
        sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=-1)[:, None, :]
        half = np.concatenate([-x[..., D // 2:], x[..., : D // 2]], axis=-1)
        return x * cos + half * sin

    def hidden(self, ids):
        T, E, H = len(ids), self.n_embd, self.n_head
        D = E // H
        W = self.W
        x = W("token_embd.weight")[ids]
        if "token_types.weight" in self.raw:
            x = x + W("token_types.weight")[0]
        if not self.nomic:
            x = x + W("position_embd.weight")[:T]
        x = layer_norm(x, W("token_embd_norm.weight"), W("token_embd_norm.bias"), self.eps)
        for il in range(self.n_layer):
            b = f"blk.{il}."
            if self.nomic:
                qkv = x @ W(b + "attn_qkv.weight").T
                q, k, v = qkv[:, :E], qkv[:, E:2 * E], qkv[:, 2 * E:]
                q = self.rope(q.reshape(T, H, D))
                k = self.rope(k.reshape(T, H, D))
            else:
                q = (x @ W(b + "attn_q.weight").T + W(b + "attn_q.bias")).reshape(T, H, D)
                k = (x @ W(b + "attn_k.weight").T + W(b + "attn_k.bias")).reshape(T, H, D)
                v = x @ W(b + "attn_v.weight").T + W(b + "attn_v.bias")
            v = v.reshape(T, H, D)
            s = np.einsum("thd,shd->hts", q, k) / math.sqrt(D)  # [H, T, T]: no mask
            s = s - s.max(axis=-1, keepdims=True)
            p = np.exp(s)
            p = p / p.sum(axis=-1, keepdims=True)
            a = np.einsum("hts,shd->thd", p, v).reshape(T, E)
            a = a @ W(b + "attn_output.weight").T
            if not self.nomic:
                a = a + W(b + "attn_output.bias")
            x = layer_norm(x + a, W(b + "attn_output_norm.weight"), W(b + "attn_output_norm.bias"), self.eps)
            if self.nomic:
                g = x @ W(b + "ffn_gate.weight").T
                f = (g / (1.0 + np.exp(-g))) * (x @ W(b + "ffn_up.weight").T)
                f = f @ W(b + "ffn_down.weight").T
            else:
                f = gelu_tanh(x @ W(b + "ffn_up.weight").T + W(b + "ffn_up.bias"))
                f = f @ W(b + "ffn_down.weight").T + W(b + "ffn_down.bias")
            x = layer_norm(x + f, W(b + "layer_output_norm.weight"), W(b + "layer_output_norm.bias"), self.eps)
        return x
