#!/usr/bin/env python3
"""Writes the dequantization test vectors tests/data/dequant/<type>.vec.

Each file is, little-endian:
    u32 type id (GGUF / ggml numbering)
    u32 n_elements
    raw tensor bytes (n_elements / block_size blocks of type_size bytes)
    n_elements float32: the expected dequantized values

The expected values come from the `gguf` PyPI package's numpy dequantizer
(gguf.quants.dequantize), which tests/core/dequantize_test.cpp must match bit
for bit. The package has no Q8_K dequantizer, so Q8_K's expected values come
from the small independent numpy implementation in dequantize_q8_K() below
(block = float32 d, int8 qs[256], int16 bsums[16]; value = d * q in float32).

Inputs are deterministic (fixed seed): the quant payloads are random bytes;
the fp16 scales/mins are finite values of moderate magnitude with random sign,
and the first blocks of every type use the corner cases +0, -0 and fp16
subnormals. F16 / BF16 / F32 inputs are random finite bit patterns (zeros and
subnormals included).

Usage:
    python3 tests/data/make_dequant_vectors.py          # (re)write the files
    python3 tests/data/make_dequant_vectors.py --check  # compare, write nothing
"""

import argparse
import importlib.metadata
import pathlib
import struct
import sys

import numpy as np

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T
import gguf.quants

SEED = 0x5EED_DE0A
N_BLOCKS = 16    # per block-quantized type
N_PLAIN = 512    # elements for F32 / F16 / BF16

TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
         "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
         "IQ4_NL", "IQ4_XS", "MXFP4"]  # new types go last: the rng stream of the others stays

# Byte offsets of the fp16 fields of each block format (see
# src/core/quant/block_formats.h); every other byte is quant payload.
FP16_FIELDS = {
    "Q4_0": [0],          # d
    "Q4_1": [0, 2],       # d, m
    "Q5_0": [0],          # d
    "Q5_1": [0, 2],       # d, m
    "Q8_0": [0],          # d
    "Q2_K": [80, 82],     # d, dmin
    "Q3_K": [108],        # d
    "Q4_K": [0, 2],       # d, dmin
    "Q5_K": [0, 2],       # d, dmin
    "Q6_K": [208],        # d
    "IQ4_NL": [0],        # d
    "IQ4_XS": [0],        # d
}

# MXFP4's E8M0 scale byte (offset 0): random, but the first blocks take the
# corners 0 and 1 (float32 subnormal halves), 2, 127 and 254, 255 (whose
# larger values overflow to infinity).
E8M0_SPECIAL = [0, 1, 2, 127, 254, 255]

# fp16 corner cases used for the first blocks: +0, -0, smallest and a
# mid-range subnormal of each sign, the largest subnormal.
FP16_SPECIAL = [0x0000, 0x8000, 0x0001, 0x8001, 0x0155, 0x83FF]


def moderate_fp16(rng, n):
    """n random finite fp16 bit patterns, |x| in about [2^-12, 2^4], random sign."""
    mag = np.exp2(rng.uniform(-12.0, 4.0, n)).astype(np.float32)
    sign = np.where(rng.integers(0, 2, n) == 1, -1.0, 1.0).astype(np.float32)
    return (mag * sign).astype(np.float16).view(np.uint16)


def fp16_scales(rng, n, field_index):
    """Scales for n blocks; the specials are rotated per field so d and the
    min of one block do not always hit the same corner case together."""
    v = moderate_fp16(rng, n)
    k = len(FP16_SPECIAL)
    for i in range(k):
        v[i] = FP16_SPECIAL[(i + 2 * field_index) % k]
    return v


def quant_blocks(rng, name):
    block_size, type_size = GGML_QUANT_SIZES[T[name]]
    raw = rng.integers(0, 256, (N_BLOCKS, type_size), dtype=np.uint8)
    if name == "Q8_K":
        d = np.exp2(rng.uniform(-12.0, 4.0, N_BLOCKS)).astype(np.float32)
        d *= np.where(rng.integers(0, 2, N_BLOCKS) == 1, -1, 1).astype(np.float32)
        d[0], d[1] = np.float32(0.0), np.float32(-0.0)
        d[2] = np.uint32(0x00000123).view(np.float32)  # float32 subnormal
        raw[:, 0:4] = d.astype("<f4").reshape(N_BLOCKS, 1).view(np.uint8)
        qs = raw[:, 4:260].view(np.int8)
        bsums = qs.reshape(N_BLOCKS, 16, 16).astype(np.int16).sum(axis=-1, dtype=np.int16)
        raw[:, 260:292] = bsums.astype("<i2").view(np.uint8)
    elif name == "MXFP4":
        raw[:len(E8M0_SPECIAL), 0] = E8M0_SPECIAL
    else:
        for fi, off in enumerate(FP16_FIELDS[name]):
            s = fp16_scales(rng, N_BLOCKS, fi).astype("<u2")
            raw[:, off:off + 2] = s.reshape(N_BLOCKS, 1).view(np.uint8)
    return raw.reshape(-1), N_BLOCKS * block_size


def plain_values(rng, name):
    if name == "F32":
        bits = rng.integers(0, 2**32, N_PLAIN, dtype=np.uint32)
        bits[(bits & 0x7F800000) == 0x7F800000] &= 0xBFFFFFFF  # no inf/nan
        bits[:4] = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF]
        return bits.astype("<u4").view(np.uint8), N_PLAIN
    bits = rng.integers(0, 2**16, N_PLAIN, dtype=np.uint16)
    exp_mask = 0x7C00 if name == "F16" else 0x7F80
    bits[(bits & exp_mask) == exp_mask] &= np.uint16(~(exp_mask & ~(exp_mask >> 1)) & 0xFFFF)
    bits[:4] = [0x0000, 0x8000, 0x0001, 0x8001 if name == "F16" else 0x807F]
    assert not np.any((bits & exp_mask) == exp_mask)
    return bits.astype("<u2").view(np.uint8), N_PLAIN


def dequantize_q8_K(raw):
    """Independent Q8_K reference (the gguf package has none): d * q."""
    blocks = raw.reshape(-1, 292)
    d = blocks[:, 0:4].copy().view("<f4").astype(np.float32)   # (n, 1)
    qs = blocks[:, 4:260].view(np.int8).astype(np.float32)     # (n, 256)
    return (d * qs).reshape(-1)


def expected(raw, name):
    if name == "Q8_K":
        out = dequantize_q8_K(raw)
    else:
        with np.errstate(over="ignore"):  # MXFP4 with e = 254, 255: inf, as intended
            out = gguf.quants.dequantize(raw, T[name])
    out = np.asarray(out)
    assert out.dtype == np.float32, (name, out.dtype)
    return out.reshape(-1)


def build(name, rng):
    raw, n = plain_values(rng, name) if name in ("F32", "F16", "BF16") else quant_blocks(rng, name)
    out = expected(raw, name)
    assert out.size == n, (name, out.size, n)
    return struct.pack("<II", int(T[name]), n) + raw.tobytes() + out.astype("<f4").tobytes()


def file_stem(name):
    """ggml's spelling of the type name, as weir's dtype_name() gives it: q4_K."""
    return name.lower().replace("_k", "_K")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the files on disk, write nothing")
    ap.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parent / "dequant"))
    args = ap.parse_args()

    out_dir = pathlib.Path(args.out)
    rng = np.random.default_rng(SEED)
    bad = 0
    total = 0
    for name in TYPES:
        data = build(name, rng)
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
