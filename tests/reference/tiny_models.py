#!/usr/bin/env python3
"""Writes tiny random-weight F32 GGUF models for weir's architecture tests,
and the float64 reference logits for a fixed prompt (reference_forward.py,
which reads the written file back with GGUFReader).

    tiny_models.py OUTDIR NAME [NAME ...]
        OUTDIR/NAME.gguf, and for the good models OUTDIR/NAME.json:
        {"ids": [...], "logits": [[...n_vocab...] per position]}, and for the
        quantized ones "logits_rounded" (activations rounded as llama.cpp does)

Names: see MODELS (good) and BROKEN (one defect each). Exit code 77 when
numpy or gguf is missing, so the C++ test can skip with a message.
"""
import json
import math
import os
import sys

try:
    import numpy as np
    import gguf
except ImportError as e:  # pragma: no cover
    print(f"tiny_models.py: {e}", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_forward  # noqa: E402

N_VOCAB = 300
PROMPT_LEN = 20
N_CTX = 64  # the context weir's tests run these models with (phi3 picks its rope factors by it)

# Hyper-parameters per model. head_dim is attention.key_length when set.
MODELS = {
    # Llama 3: GQA 4:2, rope_freqs.weight from the Llama 3 formula, own output matrix.
    "llama3": dict(arch="llama", n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96,
                   rope_base=10000.0, llama3_rope=dict(factor=8.0, low=1.0, high=4.0, orig_ctx=64)),
    # Llama 2 style: head_dim 32 but only 16 dims rotated, linear scaling x4,
    # q/k/v/o biases, output tied to the embeddings, GQA 4:2.
    "llama-partial-linear": dict(arch="llama", n_embd=128, n_layer=3, n_head=4, n_head_kv=2, n_ff=160,
                                 n_rot=16, linear=4.0, bias=True, tied=True),
    # Qwen2: GQA 8:2 (head_dim 16), q/k/v biases, NEOX rope, base 1e6.
    "qwen2": dict(arch="qwen2", n_embd=128, n_layer=2, n_head=8, n_head_kv=2, n_ff=192,
                  rope_base=1e6, bias="qkv"),
    # The same with quantized matrices (and embeddings): weir's quantized
    # paths; the reference dequantizes the same blocks.
    "llama3-q4_0": dict(arch="llama", n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96,
                        rope_base=10000.0, llama3_rope=dict(factor=8.0, low=1.0, high=4.0, orig_ctx=64),
                        quant="Q4_0"),
    "qwen2-q8_0": dict(arch="qwen2", n_embd=128, n_layer=2, n_head=8, n_head_kv=2, n_ff=192,
                       rope_base=1e6, bias="qkv", quant="Q8_0"),
    # Qwen3: head_dim 32 from key_length (n_head * head_dim = 128 != n_embd 64),
    # per-head q/k norms, NEOX rope, tied output.
    "qwen3": dict(arch="qwen3", n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96,
                  key_length=32, rope_base=1e6, qk_norm=True, tied=True),
    # Gemma 3: 6 layers (the 6th global), window 5 < prompt, q/k norms, MQA.
    "gemma3": dict(arch="gemma3", n_embd=64, n_layer=6, n_head=4, n_head_kv=1, n_ff=128,
                   key_length=16, rope_base=1e6, qk_norm=True, window=5, tied=True),
    # Gemma 2: 4 layers (0 and 2 slide over a window of 5 < prompt, 1 and 3
    # see every key), head_dim 32 from key_length (n_head * 32 != n_embd, and
    # n_embd / n_head = 16 is the 27B's scale, not this one's), GQA 4:2, no
    # q/k norms, soft caps small enough that tanh bends: scores and logits 5.
    "gemma2": dict(arch="gemma2", n_embd=64, n_layer=4, n_head=4, n_head_kv=2, n_ff=128,
                   key_length=32, window=5, tied=True, attn_softcap=5.0, final_softcap=5.0),
    # The same at 46 layers, which llama.cpp takes for Gemma 2 27B: q scaled by
    # 1/sqrt(n_embd / n_head) = 1/4, not 1/sqrt(head_dim).
    "gemma2-46-layers": dict(arch="gemma2", n_embd=64, n_layer=46, n_head=4, n_head_kv=2, n_ff=64,
                             key_length=32, window=5, tied=True, attn_softcap=5.0, final_softcap=5.0),
    # Qwen3-MoE (as Qwen3-30B-A3B): qwen3 attention (head_dim 16, GQA 4:2, q/k
    # norms), every layer's FFN a router over 8 experts of width 32
    # (expert_feed_forward_length), 3 used per token, no shared expert, own
    # output matrix. feed_forward_length (96) is written but no tensor has it.
    "qwen3moe": dict(arch="qwen3moe", n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96,
                     key_length=16, rope_base=1e6, qk_norm=True, n_expert=8, n_expert_used=3, n_ff_exp=32),
    # The same with Q8_0 matrices, embeddings and experts (router F32).
    "qwen3moe-q8_0": dict(arch="qwen3moe", n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96,
                          key_length=16, rope_base=1e6, qk_norm=True, n_expert=8, n_expert_used=3, n_ff_exp=32,
                          quant="Q8_0"),
    # Phi-3 (phi3): fused attn_qkv and ffn_up (gate, up rows), GQA 4:2, NEOX
    # rope with LongRoPE factors and attention factor 1.19: original context
    # 128 > N_CTX, so the short factors apply; own output matrix.
    "phi3": dict(arch="phi3", n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96, fused_qkv=True,
                 longrope=dict(orig_ctx=128, attn_factor=1.19)),
    # The same with original context 32 < N_CTX: the long factors apply.
    "phi3-long": dict(arch="phi3", n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96, fused_qkv=True,
                      longrope=dict(orig_ctx=32, attn_factor=1.19)),
    # phi3 with separate attn_q/k/v, tied output, half the head dims rotated,
    # and a sliding window of 5 that is written but not used (as llama.cpp).
    "phi3-split": dict(arch="phi3", n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96, n_rot=8,
                       tied=True, window=5),
    # Qwen3 as an embedding model's file says it: pooling_type 2 (CLS).
    "qwen3-cls": dict(arch="qwen3", n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96,
                      key_length=32, rope_base=1e6, qk_norm=True, tied=True, pooling_type=2),
    # Mixtral, architecture "llama" as llama.cpp writes it: llama attention
    # (adjacent-pair rope, GQA 4:2), every layer's FFN 4 experts of width
    # feed_forward_length (96), 2 used per token.
    "mixtral": dict(arch="llama", n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96,
                    rope_base=1e6, n_expert=4, n_expert_used=2),
}

# Broken variants of llama3: name -> (what is broken, as the test expects it named).
BROKEN = {
    "broken-arch": "general.architecture",
    "broken-key": "llama.block_count",
    "broken-shape": "blk.1.attn_k.weight",
    "broken-dtype": "blk.0.ffn_up.weight",
    "broken-missing": "blk.1.ffn_down.weight",
    "broken-nrot": "llama.rope.dimension_count",
    "broken-freqs": "rope_freqs.weight",
    # In range for their type but wrong: an error or a warning naming the key.
    "broken-eps-nan": "llama.attention.layer_norm_rms_epsilon",
    "broken-eps-zero": "llama.attention.layer_norm_rms_epsilon",
    "broken-ctx-zero": "llama.context_length",
    "broken-bos": "tokenizer.ggml.bos_token_id",
    # Loads, but its weights make every logit NaN (a corrupt file).
    "broken-nan-weights": "output_norm.weight",
    # Every logit 0 (output.weight zero) and EOS id 0: greedy ends at once.
    "flat-logits-eos0": "output.weight",
}


def llama3_rope_factors(head_dim_rot, base, factor, low, high, orig_ctx):
    """Per-pair divisors of the rope angle, from HF transformers' Llama 3 rule
    (rope_type "llama3"), as GGUF converters store them in rope_freqs.weight."""
    inv = base ** (-np.arange(0, head_dim_rot // 2, dtype=np.float64) * 2.0 / head_dim_rot)
    wavelen = 2 * math.pi / inv
    low_wavelen, high_wavelen = orig_ctx / low, orig_ctx / high
    out = []
    for f, w in zip(inv, wavelen):
        if w < high_wavelen:
            new = f
        elif w > low_wavelen:
            new = f / factor
        else:
            smooth = (orig_ctx / w - low) / (high - low)
            new = (1 - smooth) * f / factor + smooth * f
        out.append(f / new)
    return np.array(out, dtype=np.float32)


def add_vocab(w, bos=1, eos=2):
    """A small SentencePiece-style vocabulary: unk, bos, eos, 256 byte tokens, pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    letters = "abcdefghijklmnopqrstuvwxyz"
    i = 0
    while len(tokens) < N_VOCAB:
        piece = "\u2581" + letters[i % 26] + (letters[(i // 26) % 26] if i >= 26 else "")
        tokens.append(piece)
        types.append(1)
        i += 1
    scores = [0.0] * 259 + [-float(k) for k in range(len(tokens) - 259)]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_unk_token_id(0)


def write_model(path, spec, rng, broken=None):
    arch = spec["arch"]
    E, L, Hq, Hkv, F = spec["n_embd"], spec["n_layer"], spec["n_head"], spec["n_head_kv"], spec["n_ff"]
    D = spec.get("key_length", E // Hq)
    n_rot = spec.get("n_rot", D)
    w = gguf.GGUFWriter(path, "bogus" if broken == "broken-arch" else arch)
    p = arch + "."
    w.add_string("general.name", "tiny-" + arch)
    w.add_uint32(p + "context_length", 0 if broken == "broken-ctx-zero" else 256)
    w.add_uint32(p + "embedding_length", E)
    if broken != "broken-key":
        w.add_uint32(p + "block_count", L)
    w.add_uint32(p + "feed_forward_length", F)
    n_expert = spec.get("n_expert", 0)
    F_exp = spec.get("n_ff_exp", F)  # width of one expert (Mixtral: feed_forward_length)
    if n_expert:
        w.add_uint32(p + "expert_count", n_expert)
        w.add_uint32(p + "expert_used_count", spec["n_expert_used"])
        if "n_ff_exp" in spec:
            w.add_uint32(p + "expert_feed_forward_length", F_exp)
    w.add_uint32(p + "attention.head_count", Hq)
    w.add_uint32(p + "attention.head_count_kv", Hkv)
    eps = {"broken-eps-nan": float("nan"), "broken-eps-zero": 0.0}.get(broken, 1e-6)
    w.add_float32(p + "attention.layer_norm_rms_epsilon", eps)
    w.add_float32(p + "rope.freq_base", spec.get("rope_base", 10000.0))
    if "key_length" in spec:
        w.add_uint32(p + "attention.key_length", D)
        w.add_uint32(p + "attention.value_length", D)
    if "n_rot" in spec:
        w.add_uint32(p + "rope.dimension_count", n_rot)
    if broken == "broken-nrot":  # more rotated dims than a head has
        w.add_uint32(p + "rope.dimension_count", D + 2)
    if "linear" in spec:
        w.add_string(p + "rope.scaling.type", "linear")
        w.add_float32(p + "rope.scaling.factor", spec["linear"])
    if "longrope" in spec:
        w.add_uint32(p + "rope.scaling.original_context_length", spec["longrope"]["orig_ctx"])
        w.add_float32(p + "rope.scaling.attn_factor", spec["longrope"]["attn_factor"])
    if "window" in spec:
        w.add_uint32(p + "attention.sliding_window", spec["window"])
    if "pooling_type" in spec:
        w.add_uint32(p + "pooling_type", spec["pooling_type"])
    if "attn_softcap" in spec:
        w.add_float32(p + "attn_logit_softcapping", spec["attn_softcap"])
        w.add_float32(p + "final_logit_softcapping", spec["final_softcap"])
    add_vocab(w, bos=N_VOCAB + 1000 if broken == "broken-bos" else 1, eos=0 if broken == "flat-logits-eos0" else 2)

    def mat(name, n_out, n_in, scale=1.0):
        shape = (n_out, n_in)
        if broken == "broken-shape" and name == BROKEN[broken]:
            shape = (n_out + 1, n_in)
        a = rng.normal(0.0, scale / math.sqrt(n_in), size=shape)
        if broken == "broken-dtype" and name == BROKEN[broken]:
            w.add_tensor(name, a.astype(np.float64))  # F64: not a weight type weir computes with
            return
        if broken == "broken-missing" and name == BROKEN[broken]:
            return
        if broken == "flat-logits-eos0" and name == BROKEN[broken]:
            a = np.zeros(shape)
        add_weight(name, a)

    def add_weight(name, a):
        if "quant" in spec:
            qtype = gguf.GGMLQuantizationType[spec["quant"]]
            w.add_tensor(name, gguf.quants.quantize(a.astype(np.float32), qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, a.astype(np.float32))

    def experts(name, n_out, n_in, scale=1.0):
        """n_expert matrices [n_out, n_in], GGUF [n_in, n_out, n_expert]."""
        add_weight(name, rng.normal(0.0, scale / math.sqrt(n_in), size=(n_expert, n_out, n_in)))

    def vec(name, n, mean, scale):
        a = (mean + rng.normal(0.0, scale, size=n)).astype(np.float32)
        if broken == "broken-nan-weights" and name == BROKEN[broken]:
            a[:] = np.nan
        w.add_tensor(name, a)

    # Smaller embeddings when tied, so that logits stay a few units.
    embd_std = 0.35 if spec.get("tied") else 1.0
    add_weight("token_embd.weight", rng.normal(0.0, embd_std, size=(N_VOCAB, E)))
    if not spec.get("tied"):
        mat("output.weight", N_VOCAB, E, 3.0)
    vec("output_norm.weight", E, 1.0, 0.1)
    if "llama3_rope" in spec:
        r = spec["llama3_rope"]
        ff = llama3_rope_factors(n_rot, spec.get("rope_base", 10000.0), r["factor"], r["low"], r["high"],
                                 r["orig_ctx"])
        w.add_tensor("rope_freqs.weight", ff[:-1] if broken == "broken-freqs" else ff)
    if "longrope" in spec:  # per-pair divisors: long ones grow to 8 over the pairs, short ones stay near 1
        n = n_rot // 2
        w.add_tensor("rope_factors_long.weight", (1.0 + 7.0 * np.arange(n) / (n - 1)).astype(np.float32))
        w.add_tensor("rope_factors_short.weight", (1.0 + 0.2 * rng.random(n)).astype(np.float32))
    bias = spec.get("bias")
    for il in range(L):
        b = f"blk.{il}."
        vec(b + "attn_norm.weight", E, 1.0, 0.1)
        if spec.get("fused_qkv"):  # phi3: the q, k and v rows of one matrix
            add_weight(b + "attn_qkv.weight", np.concatenate([
                rng.normal(0.0, 1.5 / math.sqrt(E), size=(Hq * D, E)),
                rng.normal(0.0, 1.5 / math.sqrt(E), size=(Hkv * D, E)),
                rng.normal(0.0, 1.0 / math.sqrt(E), size=(Hkv * D, E))]))
        else:
            mat(b + "attn_q.weight", Hq * D, E, 1.5)
            mat(b + "attn_k.weight", Hkv * D, E, 1.5)
            mat(b + "attn_v.weight", Hkv * D, E)
        if bias:
            vec(b + "attn_q.bias", Hq * D, 0.0, 0.3)
            vec(b + "attn_k.bias", Hkv * D, 0.0, 0.3)
            vec(b + "attn_v.bias", Hkv * D, 0.0, 0.3)
            if bias is True:
                vec(b + "attn_output.bias", E, 0.0, 0.1)
        if spec.get("qk_norm"):
            vec(b + "attn_q_norm.weight", D, 1.0, 0.1)
            vec(b + "attn_k_norm.weight", D, 1.0, 0.1)
        mat(b + "attn_output.weight", E, Hq * D)
        vec(b + "ffn_norm.weight", E, 1.0, 0.1)
        if n_expert:
            # Router logits with a standard deviation of about 2, so tokens
            # spread over the experts (main() checks the top-k margin). F32.
            w.add_tensor(b + "ffn_gate_inp.weight",
                         rng.normal(0.0, 2.0 / math.sqrt(E), size=(n_expert, E)).astype(np.float32))
            experts(b + "ffn_gate_exps.weight", F_exp, E, 2.0)
            experts(b + "ffn_up_exps.weight", F_exp, E)
            experts(b + "ffn_down_exps.weight", E, F_exp)
        elif arch == "phi3":  # gate_up_proj: the gate rows, then the up rows
            add_weight(b + "ffn_up.weight", np.concatenate([rng.normal(0.0, 2.0 / math.sqrt(E), size=(F, E)),
                                                            rng.normal(0.0, 1.0 / math.sqrt(E), size=(F, E))]))
            mat(b + "ffn_down.weight", E, F)
        else:
            mat(b + "ffn_gate.weight", F, E, 2.0)
            mat(b + "ffn_up.weight", F, E)
            mat(b + "ffn_down.weight", E, F)
        if arch in ("gemma2", "gemma3"):
            vec(b + "post_attention_norm.weight", E, 1.0, 0.1)
            vec(b + "post_ffw_norm.weight", E, 1.0, 0.1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name in sys.argv[2:]:
        if name not in MODELS and name not in BROKEN:
            print(f"tiny_models.py: unknown model {name!r}", file=sys.stderr)
            return 2
        # A fixed seed per name, so a model is the same on every run.
        rng = np.random.default_rng(sum(map(ord, name)) * 7919)
        path = os.path.join(out, name + ".gguf")
        write_model(path, MODELS.get(name, MODELS["llama3"]), rng, None if name in MODELS else name)
        if name in MODELS:
            ids = [1] + [int(t) for t in rng.integers(3, N_VOCAB, size=PROMPT_LEN - 1)]
            runs = [("logits", False)] + ([("logits_rounded", True)] if "quant" in MODELS[name] else [])
            ref = {"ids": ids}
            for key, round_acts in runs:  # rounded: as llama.cpp's rounding of activations sees it
                fwd = reference_forward.Forward(path, round_acts=round_acts, n_ctx=N_CTX)
                ref[key] = fwd.forward(ids).tolist()
                if fwd.router_margin < 1e-3:  # an expert choice float32 could make differently
                    print(f"tiny_models.py: {name}: router top-k margin {fwd.router_margin:.2e}", file=sys.stderr)
                    return 1
            with open(os.path.join(out, name + ".json"), "w") as f:
                json.dump(ref, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
