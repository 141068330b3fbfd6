#!/usr/bin/env python3
"""Writes the GGUF reader's test corpus: small valid files and hand-broken ones.

    tests/data/gguf-valid/*.gguf.case    well-formed files (v2 and v3, every metadata
                                    value type, nested arrays, custom alignment,
                                    several tensor dtypes); fuzzing seeds too
    tests/data/gguf-broken/*.gguf.case   each broken in exactly one way
    tests/data/gguf-broken/EXPECTED.txt
                                    one line per broken file: its name, then the
                                    words weir's one-line error must contain
                                    (case-insensitive), read by
                                    tests/core/gguf_reader_test.cpp

Files are built by the tiny writer below (struct.pack, no randomness), so the
output is byte-for-byte deterministic and every file stays under 4 KiB.

Usage:
    python3 tests/data/make_broken_gguf.py          # (re)write the files
    python3 tests/data/make_broken_gguf.py --check  # compare, write nothing
"""

import argparse
import pathlib
import struct
import sys

# Corpus files end in .case, not .gguf: they are test inputs, not models.
CASE = ".case"
HERE = pathlib.Path(__file__).resolve().parent
VALID_DIR = HERE / "gguf-valid"
BROKEN_DIR = HERE / "gguf-broken"

# GGUF metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
              F32: "<f", BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}

# ggml tensor types used here: id -> (block size, bytes per block)
T_F32, T_F16, T_Q4_0, T_Q8_0, T_Q4_K, T_BF16, T_I32 = 0, 1, 2, 8, 12, 30, 26
BLOCK = {T_F32: (1, 4), T_F16: (1, 2), T_Q4_0: (32, 18), T_Q8_0: (32, 34),
         T_Q4_K: (256, 144), T_BF16: (1, 2), T_I32: (1, 4)}


def u32(v): return struct.pack("<I", v)
def u64(v): return struct.pack("<Q", v)
def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return u64(len(b)) + b


def value(t, v):
    """Encodes a value of type t. Arrays: v = (elem_type, [elements])."""
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, items = v
        return u32(et) + u64(len(items)) + b"".join(value(et, x) for x in items)
    return struct.pack(SCALAR_FMT[t], v)


def kv(key, t, v):
    return gstr(key) + u32(t) + value(t, v)


def tensor_bytes(ne, ttype):
    n = 1
    for d in ne:
        n *= d
    bs, ts = BLOCK[ttype]
    return n // bs * ts


class Gguf:
    """A GGUF file under construction; build() lays out the data section."""

    def __init__(self, version=3, alignment=None):
        self.version = version
        self.alignment = alignment
        self.kvs = []       # encoded kv records
        self.tensors = []   # (name, ne, type, offset or None, data bytes or None)
        if alignment is not None:
            self.kv("general.alignment", U32, alignment)

    def kv(self, key, t, v):
        self.kvs.append(kv(key, t, v))
        return self

    def raw_kv(self, record):
        self.kvs.append(record)
        return self

    def tensor(self, name, ne, ttype, offset=None, data=None):
        self.tensors.append((name, list(ne), ttype, offset, data))
        return self

    def build(self, tensor_count=None, kv_count=None, pad_byte=0):
        align = self.alignment or 32
        # data layout: tensors in order, each at the next aligned offset
        offsets, blobs, pos = [], [], 0
        for i, (name, ne, ttype, off, data) in enumerate(self.tensors):
            size = tensor_bytes(ne, ttype) if data is None else len(data)
            if data is None:
                data = bytes((i * 31 + j * 7 + 1) & 0xFF for j in range(size))
            if off is None:
                off = pos
            offsets.append(off)
            blobs.append((off, data))
            pos = max(pos, (off + len(data) + align - 1) // align * align)
        head = b"GGUF" + u32(self.version)
        head += u64(len(self.tensors) if tensor_count is None else tensor_count)
        head += u64(len(self.kvs) if kv_count is None else kv_count)
        head += b"".join(self.kvs)
        for (name, ne, ttype, _, _), off in zip(self.tensors, offsets):
            head += gstr(name) + u32(len(ne)) + b"".join(u64(d) for d in ne)
            head += u32(ttype) + u64(off)
        self.head_len = len(head)  # header, metadata and tensor table, unpadded
        head += bytes([pad_byte]) * ((-len(head)) % align)
        if not self.tensors:
            return head
        end = max([off + len(d) for off, d in blobs if d] or [0])
        data = bytearray(end)
        for off, d in blobs:
            if d:
                data[off:off + len(d)] = d
        return head + bytes(data)


def every_type_kvs(g):
    """One key per metadata value type, plus arrays of each and nested arrays."""
    g.kv("general.architecture", STR, "llama")
    g.kv("general.name", STR, "weir test \u00e9\u00e8 \U0001F600")
    g.kv("test.u8", U8, 200).kv("test.i8", I8, -100)
    g.kv("test.u16", U16, 60000).kv("test.i16", I16, -30000)
    g.kv("test.u32", U32, 4000000000).kv("test.i32", I32, -2000000000)
    g.kv("test.f32", F32, 0.15625).kv("test.bool_true", BOOL, 1).kv("test.bool_false", BOOL, 0)
    g.kv("test.u64", U64, (1 << 64) - 1).kv("test.i64", I64, -(1 << 63))
    g.kv("test.f64", F64, -1.0e300).kv("test.empty_str", STR, "")
    g.kv("test.arr_u8", ARR, (U8, [0, 1, 255]))
    g.kv("test.arr_i8", ARR, (I8, [-128, 0, 127]))
    g.kv("test.arr_u16", ARR, (U16, [1, 65535]))
    g.kv("test.arr_i16", ARR, (I16, [-32768, 32767]))
    g.kv("test.arr_u32", ARR, (U32, [7, 4294967295]))
    g.kv("test.arr_i32", ARR, (I32, [-5, 0, 5, 2147483647]))
    g.kv("test.arr_f32", ARR, (F32, [0.5, -2.25, 1e-8]))
    g.kv("test.arr_bool", ARR, (BOOL, [1, 0, 1]))
    g.kv("test.arr_u64", ARR, (U64, [0, (1 << 64) - 1]))
    g.kv("test.arr_i64", ARR, (I64, [-(1 << 63), (1 << 63) - 1]))
    g.kv("test.arr_f64", ARR, (F64, [3.141592653589793, -0.0]))
    g.kv("test.arr_str", ARR, (STR, ["a", "", "tab\there", "\u2581token"]))
    g.kv("test.arr_empty", ARR, (I32, []))
    g.kv("test.arr_nested", ARR, (ARR, [(I32, [1, 2]), (I32, []), (I32, [3])]))
    g.kv("test.arr_nested_str", ARR, (ARR, [(STR, ["x", "yz"]), (STR, ["w"])]))
    g.kv("test.arr_nested3", ARR, (ARR, [(ARR, [(U8, [9]), (U8, [8, 7])])]))
    return g


def valid_files():
    files = {}
    files["empty_v3.gguf"] = Gguf(3).build()
    files["kv_only_v2.gguf"] = (Gguf(2).kv("general.architecture", STR, "llama")
                                .kv("llama.block_count", U32, 2).build())
    g = every_type_kvs(Gguf(3))
    g.tensor("token_embd.weight", [64, 4], T_Q8_0)
    g.tensor("blk.0.attn_norm.weight", [64], T_F32)
    g.tensor("blk.0.ffn_up.weight", [256, 2], T_Q4_K)
    g.tensor("blk.0.attn_q.weight", [32, 3], T_F16)
    g.tensor("empty.weight", [0, 4], T_F32)
    files["all_types_v3.gguf"] = g.build()
    g = every_type_kvs(Gguf(2, alignment=64))
    g.tensor("a", [32, 2], T_Q4_0).tensor("b", [5], T_BF16).tensor("c", [3, 1, 1, 2], T_I32)
    files["all_types_align64_v2.gguf"] = g.build()
    g = Gguf(3, alignment=1).kv("general.architecture", STR, "tiny")
    g.tensor("x", [3], T_F32).tensor("y", [1], T_F16).tensor("z", [2, 2], T_F16)
    files["align1_v3.gguf"] = g.build()
    return files


def base(version=3):
    """A small valid file that the broken cases start from."""
    g = Gguf(version).kv("general.architecture", STR, "llama").kv("llama.block_count", U32, 1)
    return g.tensor("w", [32, 2], T_Q8_0)


def broken_files():
    """name -> (bytes, words the error must contain)."""
    cases = {}

    def add(name, data, words):
        cases[name] = (data, words)

    g = base()
    good = g.build()
    head_len = g.head_len
    w_info = good.index(gstr("w") + u32(2))  # the tensor table's only record
    add("empty.gguf", b"", "truncated offset 0")
    add("short_magic.gguf", b"GG", "truncated magic")
    add("bad_magic.gguf", b"GGML" + good[4:], "bad magic offset 0")
    add("bad_magic_zero.gguf", bytes(len(good)), "magic offset 0")
    add("version1.gguf", base(1).build(), "unsupported version 1 offset 4")
    add("version4.gguf", base(4).build(), "unsupported version 4")
    add("version0.gguf", base(0).build(), "unsupported version 0")
    be = bytearray(good)
    be[4:8] = struct.pack(">I", 3)
    add("big_endian.gguf", bytes(be), "version big-endian")
    add("truncated_version.gguf", good[:6], "truncated version offset 4")
    add("truncated_counts.gguf", good[:20], "truncated kv_count offset 16")
    one = Gguf().kv("general.architecture", STR, "llama").build()
    add("truncated_in_key.gguf", one[:24 + 8 + 10], "kv #0 string length 20 offset 24 past end truncated")
    add("truncated_in_tensor_info.gguf", good[:w_info + 9 + 4 + 8 + 4], "truncated ne[1] tensor 'w'")
    add("truncated_data.gguf", good[:-10], "tensor 'w' past end truncated")
    add("no_data_section.gguf", good[:head_len], "data section past end truncated")
    add("kv_count_huge.gguf", base().build(kv_count=1 << 60), "kv_count 1152921504606846976 past end")
    add("kv_count_max.gguf", base().build(kv_count=(1 << 64) - 1), "kv_count past end")
    add("tensor_count_huge.gguf", base().build(tensor_count=1 << 60), "tensor_count past end offset 8")
    add("tensor_count_extra.gguf", g.build(tensor_count=2)[:head_len], "tensor_count 2 past end offset 8")
    add("tensor_name_cut.gguf", g.build(tensor_count=2)[:head_len] + u64(5) + b"ab",
        "tensor #1 string length 5 past end truncated")
    k = Gguf().kv("general.architecture", STR, "llama").kv("llama.block_count", U32, 1)
    k.build()
    add("kv_count_extra.gguf", k.build(kv_count=3)[:k.head_len], "truncated kv #2 offset")
    add("key_len_huge.gguf",
        Gguf().raw_kv(u64(1 << 62) + b"general.architecture").build(),
        "key string length 4611686018427387904 offset 24 past end")
    add("str_value_len_huge.gguf",
        Gguf().raw_kv(gstr("general.name") + u32(STR) + u64(0xFFFFFFFFFFFFFFF0) + b"abc").build(),
        "'general.name' string length past end")
    add("array_count_huge.gguf",
        Gguf().raw_kv(gstr("tokenizer.ggml.tokens") + u32(ARR) + u32(STR) + u64(1 << 61)).build(),
        "'tokenizer.ggml.tokens' array count 2305843009213693952 past end")
    add("array_u32_count_past_end.gguf",
        Gguf().raw_kv(gstr("a.scores") + u32(ARR) + u32(U32) + u64(100) + u32(1) * 3).build(),
        "'a.scores' array count 100 past end")
    add("array_elem_str_past_end.gguf",
        Gguf().raw_kv(gstr("a.tok") + u32(ARR) + u32(STR) + u64(3) + gstr("x") + u64(100) + b"yy").build(),
        "'a.tok' string length 100 past end")
    add("unknown_value_type.gguf",
        Gguf().kv("general.architecture", STR, "llama").raw_kv(gstr("x.bad") + u32(13) + u32(0)).build(),
        "'x.bad' unknown value type 13 offset")
    add("unknown_value_type_huge.gguf",
        Gguf().raw_kv(gstr("x.bad") + u32(0xFFFFFFFF) + u64(0)).build(),
        "unknown value type 4294967295")
    add("unknown_array_elem_type.gguf",
        Gguf().raw_kv(gstr("x.arr") + u32(ARR) + u32(42) + u64(1) + u64(0)).build(),
        "'x.arr' unknown array element value type 42")
    nest = u32(ARR) + u64(1)
    add("nested_too_deep.gguf",
        Gguf().raw_kv(gstr("x.deep") + u32(ARR) + nest * 8 + u32(U8) + u64(1) + b"\x01").build(),
        "'x.deep' nested deeper than 8")
    # depth 8 is allowed: that file lives in gguf-valid
    add("duplicate_key.gguf",
        base().kv("llama.block_count", U32, 2).build(), "duplicate key 'llama.block_count' offset")
    add("duplicate_tensor.gguf",
        base().tensor("w", [32], T_F32).build(), "duplicate tensor 'w' offset")
    add("alignment_zero.gguf", base().kv("general.alignment", U32, 0).build(),
        "alignment 'general.alignment' 0 power of two")
    add("alignment_not_pow2.gguf", base().kv("general.alignment", U32, 48).build(),
        "alignment 48 power of two")
    add("alignment_wrong_type.gguf", base().kv("general.alignment", U64, 32).build(),
        "alignment 'general.alignment' uint64 uint32")
    add("alignment_string.gguf", base().kv("general.alignment", STR, "32").build(),
        "alignment string")
    add("n_dims_5.gguf", base().tensor("t5", [32, 1, 1, 1, 1], T_F32).build(),
        "tensor 't5' n_dims 5 > 4 offset")
    add("n_dims_huge.gguf",
        b"GGUF" + u32(3) + u64(1) + u64(0) + gstr("big") + u32(0x7FFFFFFF) + bytes(40),
        "tensor 'big' n_dims 2147483647")
    add("ne_negative.gguf", base().tensor("neg", [32, (1 << 64) - 2], T_F32, data=b"").build(),
        "tensor 'neg' negative ne[1] -2 offset")
    add("ne_overflow.gguf",
        base().tensor("huge", [1 << 32, 1 << 32], T_F32, data=b"").build(),
        "tensor 'huge' overflows int64")
    add("ne_bytes_overflow.gguf",
        base().tensor("huge", [1 << 62], T_F32, data=b"").build(),
        "tensor 'huge' overflows")
    add("ne0_not_block_multiple.gguf", base().tensor("q", [33, 2], T_Q8_0).build(),
        "tensor 'q' ne[0] 33 multiple q8_0 block size 32")
    add("ne0_not_k_block_multiple.gguf", base().tensor("k", [128], T_Q4_K).build(),
        "tensor 'k' q4_K block size 256")
    add("unknown_dtype.gguf", _with_raw_type(base(), "u", 99), "tensor 'u' unknown dtype id 99 offset")
    add("retired_dtype.gguf", _with_raw_type(base(), "r", 4), "tensor 'r' dtype id 4")
    add("misaligned_offset.gguf", base().tensor("m", [8], T_F32, offset=96 + 4).build(),
        "tensor 'm' offset 100 aligned 32")
    add("misaligned_offset_align64.gguf",
        Gguf(3, alignment=64).tensor("a", [32], T_F32).tensor("b", [8], T_F32, offset=160).build(),
        "tensor 'b' offset 160 aligned 64")
    add("tensor_past_end.gguf",
        base().tensor("far", [8], T_F32, offset=1 << 20, data=b"").build(),
        "tensor 'far' past end")
    add("tensor_offset_huge.gguf",
        base().tensor("far", [8], T_F32, offset=(1 << 64) - 32, data=b"").build(),
        "tensor 'far' past end")
    add("overlap.gguf",
        base().tensor("o", [16], T_F32, offset=64, data=bytes(64)).build(),
        "tensor 'o' overlaps tensor 'w'")
    add("overlap_same_offset.gguf",
        Gguf().tensor("p", [8], T_F32, offset=0).tensor("q", [8], T_F32, offset=0).build(),
        "tensor 'q' overlaps tensor 'p'")
    add("tensor_name_len_huge.gguf",
        b"GGUF" + u32(3) + u64(1) + u64(0) + u64(1 << 40) + b"name" + bytes(32),
        "tensor #0 string length 1099511627776 past end")
    return cases


def _with_raw_type(g, name, raw_type):
    """A tensor whose type id the writer does not know (size taken as f32)."""
    g.tensor(name, [4], T_F32, data=bytes(16))
    data = bytearray(g.build())
    rec = gstr(name) + u32(1) + u64(4) + u32(T_F32)
    i = data.index(rec)
    data[i + len(rec) - 4:i + len(rec)] = u32(raw_type)
    return bytes(data)


def deep_valid():
    nest = u32(ARR) + u64(1)
    # key with 8 levels of arrays: the deepest that weir accepts
    rec = gstr("x.deep8") + u32(ARR) + nest * 7 + u32(U8) + u64(2) + b"\x01\x02"
    return Gguf().kv("general.architecture", STR, "deep").raw_kv(rec).build()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the files on disk, write nothing")
    args = ap.parse_args()

    outputs = {}
    valid = valid_files()
    valid["deep8_v3.gguf"] = deep_valid()
    for name, data in valid.items():
        outputs[VALID_DIR / (name + CASE)] = data
    lines = ["# <file> <words weir's error message must contain, case-insensitive>",
             "# written by tests/data/make_broken_gguf.py; every file also needs its own name in the message"]
    for name, (data, words) in sorted(broken_files().items()):
        outputs[BROKEN_DIR / (name + CASE)] = data
        lines.append(f"{name}{CASE} {words}")
    outputs[BROKEN_DIR / "EXPECTED.txt"] = ("\n".join(lines) + "\n").encode()

    for path, data in outputs.items():
        if path.suffix == CASE and len(data) >= 4096:
            sys.exit(f"{path.name}: {len(data)} bytes, corpus files must stay under 4 KiB")

    bad = []
    for path, data in sorted(outputs.items()):
        if args.check:
            if not path.exists() or path.read_bytes() != data:
                bad.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    # files on disk that the script does not make
    for d in (VALID_DIR, BROKEN_DIR):
        if d.exists():
            for p in d.iterdir():
                if p not in outputs:
                    bad.append(p) if args.check else p.unlink()
    if args.check:
        if bad:
            sys.exit("out of date: " + ", ".join(str(p.relative_to(HERE)) for p in bad))
        print(f"ok: {len(outputs)} files up to date")
    else:
        print(f"wrote {len(valid)} valid and {len(outputs) - len(valid) - 1} broken files")


if __name__ == "__main__":
    main()
