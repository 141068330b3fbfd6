#!/usr/bin/env python3
"""Dumps a GGUF file as seen by the `gguf` PyPI package's reader (gguf.GGUFReader),
in a line format that tests/core/gguf_reader_test.cpp rebuilds from weir's
reader and compares line by line:

    version <n>
    alignment <n>
    data_offset <n>                       absolute offset of the data section
    kv_count <n>
    tensor_count <n>
    kv <key> <types> <value>              one per key, in file order
    tensor <name> <type id> <ne0,ne1,..> <offset> <nbytes> <crc32>
                                          offset: from the data section start;
                                          crc32 of the first min(nbytes, 4096)
                                          data bytes, 8 hex digits

Fields are separated by one tab. <types> is the reader's type list joined by
',' (e.g. ARRAY,STRING); the reader records the element types of an array's
first element only, so an empty array is just ARRAY. <value>:
    integers, bools (0/1)    decimal
    floats                   '%.17g'
    strings                  bytes, with '\\', tab, newline and every byte
                             outside 0x20..0x7e written as \\xNN
    arrays                   count=<top-level count> n=<leaves> crc=<crc32>
                             over the flattened leaves, each written as
                             "<len>:<bytes>" (strings) or "<value>;" (numbers)

Usage:
    python3 tests/data/gguf_dump.py FILE.gguf [> dump.txt]

tests/data/gguf-dump/gemma-3-270m-q4_k_m.txt was written this way from the
real model (the gguf reader takes ~20 s on it, too slow to run in every test).
"""

import sys
import zlib

from gguf import GGUFReader, GGUFValueType


def esc(b: bytes) -> str:
    out = []
    for c in b:
        if 0x20 <= c < 0x7F and c != 0x5C:
            out.append(chr(c))
        else:
            out.append("\\x%02x" % c)
    return "".join(out)


def scalar_text(t: GGUFValueType, x) -> str:
    if t in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
        return "%.17g" % float(x)
    if t == GGUFValueType.BOOL:
        return "1" if bool(x) else "0"
    return str(int(x))


def kv_value(field) -> str:
    types = field.types
    if types[0] == GGUFValueType.STRING:
        return esc(field.parts[-1].tobytes())
    if types[0] != GGUFValueType.ARRAY:
        return scalar_text(types[0], field.parts[-1][0])
    top_count = int(field.parts[4][0])  # parts: key len, key, type, elem type, count, ...
    leaf_type = types[-1]
    crc = 0
    for idx in field.data:
        part = field.parts[idx]
        if leaf_type == GGUFValueType.STRING:
            b = part.tobytes()
            crc = zlib.crc32(b"%d:" % len(b) + b, crc)
        else:
            crc = zlib.crc32(scalar_text(leaf_type, part[0]).encode() + b";", crc)
    return "count=%d n=%d crc=%08x" % (top_count, len(field.data), crc)


def dump(path: str) -> str:
    r = GGUFReader(path)
    lines = []
    fields = [(k, f) for k, f in r.fields.items() if not k.startswith("GGUF.")]
    lines.append("version\t%d" % int(r.fields["GGUF.version"].parts[0][0]))
    lines.append("alignment\t%d" % int(r.alignment))
    lines.append("data_offset\t%d" % int(r.data_offset))
    lines.append("kv_count\t%d" % len(fields))
    lines.append("tensor_count\t%d" % len(r.tensors))
    for key, f in fields:
        key_bytes = f.parts[1].tobytes()
        lines.append("kv\t%s\t%s\t%s" % (esc(key_bytes), ",".join(t.name for t in f.types), kv_value(f)))
    for t in r.tensors:
        rel = int(t.data_offset) - int(r.data_offset)
        n = int(t.n_bytes)
        head = r.data[int(t.data_offset):int(t.data_offset) + min(n, 4096)].tobytes()
        lines.append("tensor\t%s\t%d\t%s\t%d\t%d\t%08x" % (
            esc(t.name.encode()), int(t.tensor_type), ",".join(str(int(d)) for d in t.shape),
            rel, n, zlib.crc32(head)))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.stdout.write(dump(sys.argv[1]))
