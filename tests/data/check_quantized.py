#!/usr/bin/env python3
"""Checks a file written by `weir quantize SRC OUT TYPE` with the `gguf` PyPI
package alone:

- OUT has SRC's metadata (keys in order, values), with general.file_type set
  to the expected id and general.quantization_version = 2;
- OUT has SRC's tensors (names, order, shapes);
- a tensor whose type did not change has SRC's bytes;
- a converted tensor equals gguf's own quantization of gguf's dequantization
  of the source, byte for byte, where gguf can quantize the type (F32, F16,
  BF16, legacy types); otherwise its dequantized values are close to the
  source's (relative RMS error below --max-rel-rms).

Usage:
    python3 tests/data/check_quantized.py SRC OUT FILE_TYPE_ID [--max-rel-rms X]

Prints "ok <exact> <approx> <copied>" and exits 0, or prints what differs and
exits 1.
"""

import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize, quantize


def field_value(f):
    return [bytes(f.parts[i]) for i in f.data] if f.data else []


def main() -> int:
    args = sys.argv[1:]
    max_rel = 0.25
    if "--max-rel-rms" in args:
        i = args.index("--max-rel-rms")
        max_rel = float(args[i + 1])
        del args[i : i + 2]
    src_path, out_path, ft = args[0], args[1], int(args[2])
    src, out = GGUFReader(src_path), GGUFReader(out_path)
    errors = []

    skip = {"general.file_type", "general.quantization_version", "general.alignment"}
    src_keys = [k for k in src.fields if not k.startswith("GGUF.") and k not in skip]
    out_keys = [k for k in out.fields if not k.startswith("GGUF.") and k not in skip]
    if src_keys != out_keys:
        errors.append("metadata keys differ: %r vs %r" % (src_keys, out_keys))
    for k in src_keys:
        if k in out.fields and field_value(src.fields[k]) != field_value(out.fields[k]):
            errors.append("metadata %s differs" % k)
    got_ft = int(out.fields["general.file_type"].parts[-1][0])
    if got_ft != ft:
        errors.append("general.file_type is %d, expected %d" % (got_ft, ft))
    if int(out.fields["general.quantization_version"].parts[-1][0]) != 2:
        errors.append("general.quantization_version is not 2")

    if [t.name for t in src.tensors] != [t.name for t in out.tensors]:
        errors.append("tensor names or order differ")
    exact = approx = copied = 0
    for s, o in zip(src.tensors, out.tensors):
        if list(s.shape) != list(o.shape):
            errors.append("%s: shape %r vs %r" % (s.name, list(s.shape), list(o.shape)))
            continue
        if s.tensor_type == o.tensor_type:
            if s.data.tobytes() != o.data.tobytes():
                errors.append("%s: copied tensor's bytes differ" % s.name)
            copied += 1
            continue
        n = int(s.n_elements)
        if n == 0:
            continue
        f = dequantize(s.data, s.tensor_type).reshape(-1).astype(np.float32)
        try:
            want = quantize(f.reshape(-1, int(s.shape[0])), o.tensor_type)
        except NotImplementedError:
            want = None
        if want is not None:
            if want.tobytes() != o.data.tobytes():
                errors.append("%s: %s -> %s bytes differ from gguf's" % (s.name, s.tensor_type.name, o.tensor_type.name))
            exact += 1
            continue
        g = dequantize(o.data, o.tensor_type).reshape(-1).astype(np.float64)
        rms = float(np.sqrt(np.mean(f.astype(np.float64) ** 2)))
        err = float(np.sqrt(np.mean((g - f) ** 2)))
        if rms > 0 and err / rms > max_rel:
            errors.append("%s: %s relative RMS error %.4f > %.4f" % (s.name, o.tensor_type.name, err / rms, max_rel))
        approx += 1

    if errors:
        print("\n".join(errors[:20]))
        return 1
    print("ok %d %d %d" % (exact, approx, copied))
    return 0


if __name__ == "__main__":
    sys.exit(main())
