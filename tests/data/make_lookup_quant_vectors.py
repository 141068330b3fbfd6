#!/usr/bin/env python3
"""Writes tests/data/quant/*.lvec (iq4_nl, iq4_xs, mxfp4, and the weighted
q2_K ... q6_K, q4_0, q4_1, q5_0, q5_1): inputs and the bytes llama.cpp's
quantizer rules make of them, for tests/core/quantize_lookup_test.

IQ4_NL and IQ4_XS bytes come from tests/reference/iq4_quantize.py (numpy,
float32, llama.cpp's published rules), with and without importance weights;
Q2_K ... Q6_K and Q4_0 ... Q5_1 with importance weights only (weir's
unweighted K-quants are its own search, its unweighted legacy quantizers are
checked against the gguf package by the .vec files) from
tests/reference/k_quantize_weighted.py; MXFP4 bytes
from the `gguf` package's MXFP4.quantize_blocks.

File layout, little-endian:
    u32 type id, u32 number of cases
    per case:
        u32 n_rows, u32 n_per_row, u32 has_weights
        has_weights ? n_per_row float32 importance weights : nothing
        n_rows * n_per_row float32 input rows
        the expected bytes (row_bytes(type, n_per_row) per row)

Usage:
    python3 tests/data/make_lookup_quant_vectors.py          # (re)write
    python3 tests/data/make_lookup_quant_vectors.py --check  # compare only
"""
import argparse
import pathlib
import struct
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "reference"))
import iq4_quantize  # noqa: E402
import k_quantize_weighted  # noqa: E402

from gguf.constants import GGMLQuantizationType as T  # noqa: E402
import gguf.quants  # noqa: E402

SEED = 0x1A4_5EED
WEIGHTED_ONLY = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q4_0", "Q4_1", "Q5_0", "Q5_1")
f32 = np.float32


def inputs(rng, n):
    """(name, rows) with n_per_row a multiple of n (32 or 256)."""
    out = []
    out.append(("normal", rng.normal(0.0, 1.0, (4, 2 * n if n == 256 else 256)).astype(f32)))
    out.append(("normal_small", rng.normal(0.0, 0.02, (3, n * (1 if n == 256 else 3))).astype(f32)))
    out.append(("uniform", rng.uniform(-1.0, 1.0, (5, 256)).astype(f32)))
    out.append(("positive", rng.uniform(0.5, 2.0, (2, 256)).astype(f32)))
    x = rng.normal(0.0, 0.05, (3, 512)).astype(f32)
    idx = rng.integers(0, x.size, 30)
    x.reshape(-1)[idx] = rng.normal(0.0, 8.0, idx.size).astype(f32)
    out.append(("outliers", x))
    out.append(("zeros", np.zeros((2, 256), dtype=f32)))
    x = np.repeat(rng.normal(0.0, 1.0, (2, 8, 1)), 32, axis=2).reshape(2, 256).astype(f32)
    out.append(("constant_blocks", x))
    x = rng.normal(0.0, 1.0, (2, 256)).astype(f32)
    x[0, 32:64] = 0  # one zero sub-block among live ones
    x[1, :224] = 0   # one live sub-block
    out.append(("zero_sub_blocks", x))
    x = np.where(rng.integers(0, 2, (2, 256)) == 1, f32(0.75), f32(-0.25)).astype(f32)
    out.append(("two_values", x))
    x = rng.integers(-8, 9, (2, 256)).astype(f32) * f32(0.5)
    x[:, 0], x[:, 5] = f32(-4.0), f32(4.0)
    out.append(("ties", x))
    out.append(("tiny", (rng.normal(0.0, 1.0, (2, 256)) * 1e-6).astype(f32)))
    out.append(("below_eps", (rng.normal(0.0, 1.0, (1, 256)) * 1e-16).astype(f32)))
    out.append(("huge", (rng.normal(0.0, 1.0, (2, 256)) * 3e3).astype(f32)))
    out.append(("one_row", rng.normal(0.0, 1.0, (1, n)).astype(f32)))
    return out


def weights(rng, n_per_row, kind):
    if kind == 0:
        return rng.uniform(0.0, 4.0, n_per_row).astype(f32)
    if kind == 1:  # sums of squares over a few hundred tokens, some columns dead
        w = (rng.normal(0.0, 1.0, n_per_row) ** 2 * 300).astype(f32)
        w[rng.integers(0, n_per_row, n_per_row // 16)] = 0
        return w
    return np.exp(rng.normal(0.0, 3.0, n_per_row)).astype(f32)  # wide range


def build(name):
    rng = np.random.default_rng(SEED)
    k_type = name in WEIGHTED_ONLY
    n = 256 if name in ("IQ4_XS", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K") else 32
    cases = []
    for i, (_, rows) in enumerate(inputs(rng, n)):
        if not k_type:
            cases.append((rows, None))
        if name != "MXFP4":
            cases.append((rows, weights(rng, rows.shape[1], i % 3)))
    if name == "MXFP4":  # exponents at the ends of the E8M0 range
        cases.append((np.array([[1e38] * 16 + [-3e38] * 16], dtype=f32), None))
        cases.append((np.array([[2.0 ** -120] * 32], dtype=f32), None))
    data = struct.pack("<II", int(T[name]), len(cases))
    for rows, w in cases:
        n_rows, n_per_row = rows.shape
        data += struct.pack("<III", n_rows, n_per_row, 0 if w is None else 1)
        if w is not None:
            data += w.astype("<f4").tobytes()
        data += rows.astype("<f4").tobytes()
        if name == "MXFP4":
            q = gguf.quants.quantize(rows, T[name])
        elif k_type:
            q = k_quantize_weighted.quantize(rows, name, w)
        else:
            q = iq4_quantize.quantize(rows, name, w)
        data += np.ascontiguousarray(q).view(np.uint8).tobytes()
    return data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    bad = 0
    for name in ["IQ4_NL", "IQ4_XS", "MXFP4", *WEIGHTED_ONLY]:
        data = build(name)
        path = HERE / "quant" / f"{name.lower().replace('_k', '_K')}.lvec"
        if args.check:
            ok = path.exists() and path.read_bytes() == data
            bad += not ok
            print(f"{'ok  ' if ok else 'DIFF'} {path}")
        else:
            path.write_bytes(data)
            print(f"wrote {path} ({len(data)} bytes)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
