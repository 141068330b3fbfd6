#!/usr/bin/env python3
"""Logits of every prompt position of a model whose matrices are IQ4_NL,
IQ4_XS or MXFP4, from reference_forward.py's float64 forward pass (the `gguf`
package dequantizes the weights), unrounded and with llama.cpp's rounding of
activations before the products: Q8_0 blocks for IQ4_NL and MXFP4 weights,
Q8_K super-blocks for IQ4_XS (llama.cpp's vec_dot types for them).

Usage: lookup_types_forward.py MODEL.gguf OUT.json ID...
Writes {"logits": [[...]...], "logits_rounded": [[...]...]}.
"""

import json
import sys

import numpy as np

from reference_forward import Forward, round_q8_0

Q8_0_ACTS = {"IQ4_NL", "MXFP4"}
Q8_K_ACTS = {"IQ4_XS"}


def round_q8_K(h):
    """llama.cpp's quantize_row_q8_K, as values: per 256, the element of the
    largest magnitude max, scale -127 / max (float32), q = round half to
    even, at most 127, value q / scale."""
    x = np.asarray(h, dtype=np.float32).reshape(-1, 256)
    idx = np.argmax(np.abs(x), axis=1)  # the first of equal magnitudes, as llama.cpp's strict >
    mx = x[np.arange(x.shape[0]), idx][:, None]
    safe = np.where(mx != 0, mx, np.float32(1))
    iscale = (np.float32(-127) / safe).astype(np.float32)
    d = (np.float32(1) / iscale).astype(np.float32)
    q = np.minimum(np.round((iscale * x).astype(np.float32)), 127)
    out = np.where(mx != 0, q.astype(np.float64) * d.astype(np.float64), 0.0)
    return out.reshape(np.shape(h))


class LookupForward(Forward):
    def round_for(self, h, name):
        t = self.types[name]
        if self.round_acts and t in Q8_0_ACTS:
            return round_q8_0(h)
        if self.round_acts and t in Q8_K_ACTS:
            return round_q8_K(h)
        return super().round_for(h, name)


def main():
    path, out, ids = sys.argv[1], sys.argv[2], [int(a) for a in sys.argv[3:]]
    res = {}
    for key, rounded in (("logits", False), ("logits_rounded", True)):
        res[key] = LookupForward(path, round_acts=rounded).forward(ids).tolist()
    with open(out, "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main()
