#!/usr/bin/env python3
"""Writes the quantization test vectors tests/data/quant/<type>.vec.

Each file is, little-endian:
    u32 type id (GGUF / ggml numbering)
    u32 number of cases
    per case:
        u32 n_rows, u32 n_per_row
        n_rows * n_per_row float32: the input rows
        the expected quantized bytes (row_bytes(type, n_per_row) per row)

The expected bytes come from the `gguf` PyPI package's quantizer
(gguf.quants.quantize; for F16 its numpy float16 cast), which
src/core/quant/quantize_rows must match bit for bit
(tests/core/quantize_test.cpp).

Inputs are deterministic (fixed seed), one case per kind of data: normal,
uniform, heavy outliers, all zeros, constant and two-valued blocks, exact
ties (the first of equal magnitudes, values on rounding midpoints), tiny and
huge magnitudes, and odd row counts.

Usage:
    python3 tests/data/make_quant_vectors.py          # (re)write the files
    python3 tests/data/make_quant_vectors.py --check  # compare, write nothing
"""

import argparse
import importlib.metadata
import pathlib
import struct
import sys

import numpy as np

from gguf.constants import GGMLQuantizationType as T
import gguf.quants

SEED = 0x0A17_5EED
TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]


def cases(rng):
    """(name, rows) pairs; rows is float32 of shape (n_rows, n_per_row)."""
    f32 = np.float32
    out = []
    out.append(("normal", rng.normal(0.0, 1.0, (5, 256)).astype(f32)))
    out.append(("normal_small", rng.normal(0.0, 0.02, (3, 96)).astype(f32)))
    out.append(("uniform", rng.uniform(-1.0, 1.0, (7, 64)).astype(f32)))
    out.append(("uniform_positive", rng.uniform(0.5, 2.0, (2, 128)).astype(f32)))
    x = rng.normal(0.0, 0.05, (4, 256)).astype(f32)
    idx = rng.integers(0, x.size, 40)
    x.reshape(-1)[idx] = rng.normal(0.0, 8.0, idx.size).astype(f32)  # outliers
    out.append(("outliers", x))
    out.append(("zeros", np.zeros((3, 64), dtype=f32)))
    x = np.repeat(rng.normal(0.0, 1.0, (2, 4, 1)), 32, axis=2).reshape(2, 128).astype(f32)
    out.append(("constant_blocks", x))
    x = np.where(rng.integers(0, 2, (2, 64)) == 1, f32(0.75), f32(-0.25)).astype(f32)
    out.append(("two_values", x))
    # Equal magnitudes of both signs (which one sets the scale) and small
    # integers / halves that land exactly on rounding midpoints.
    x = rng.integers(-8, 9, (3, 96)).astype(f32) * f32(0.5)
    x[:, 0], x[:, 5] = f32(-4.0), f32(4.0)
    x[1, 0], x[1, 5] = f32(4.0), f32(-4.0)
    out.append(("ties", x))
    out.append(("tiny", (rng.normal(0.0, 1.0, (2, 64)) * 1e-6).astype(f32)))
    out.append(("huge", (rng.normal(0.0, 1.0, (2, 64)) * 3e3).astype(f32)))
    out.append(("one_row", rng.normal(0.0, 1.0, (1, 32)).astype(f32)))
    return out


def expected(rows, name):
    if name == "F16":
        q = rows.astype(np.float16)
    else:
        q = gguf.quants.quantize(rows, T[name])
    return np.ascontiguousarray(q).view(np.uint8).reshape(-1)


def build(name, rng_seed):
    rng = np.random.default_rng(rng_seed)
    cs = cases(rng)
    data = struct.pack("<II", int(T[name]), len(cs))
    for _, rows in cs:
        n_rows, n_per_row = rows.shape
        data += struct.pack("<II", n_rows, n_per_row)
        data += rows.astype("<f4").tobytes()
        data += expected(rows, name).tobytes()
    return data


def file_stem(name):
    return name.lower().replace("_k", "_K")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the files on disk, write nothing")
    ap.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parent / "quant"))
    args = ap.parse_args()

    out_dir = pathlib.Path(args.out)
    bad = 0
    total = 0
    for name in TYPES:
        data = build(name, SEED)  # same inputs for every type
        total += len(data)
        path = out_dir / f"{file_stem(name)}.vec"
        if args.check:
            ok = path.exists() and path.read_bytes() == data
            bad += not ok
            print(f"{'ok  ' if ok else 'DIFF'} {path}")
        else:
            out_dir.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            print(f"wrote {path} ({len(data)} bytes)")
    print(f"total {total} bytes (gguf {importlib.metadata.version('gguf')}, numpy {np.__version__})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
