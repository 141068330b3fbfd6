#!/usr/bin/env python3
"""The importance matrix of one run in float64: reference_forward.py's
forward pass over the given token ids, with the input of every matrix
product whose weight is a layer tensor ("blk.*") summed as squares per
column, and the tokens counted; expert products per expert (each token slot
in the expert it went to), as llama.cpp's imatrix tool sums them.

Usage: imatrix_reference.py MODEL.gguf IDS.json OUT.json
  IDS.json: {"ids": [...]} (tiny_models.py's reference file)
  OUT.json: {weight name: {"sum2": [[...] per matrix], "counts": [...]}}
"""
import json
import sys

import numpy as np

import reference_forward


class Recording(reference_forward.Forward):
    def __init__(self, path):
        super().__init__(path)
        self.sum2 = {}
        self.counts = {}

    def record(self, name, h, mat=0, n_mat=1):
        if not name.startswith("blk."):
            return
        s = self.sum2.setdefault(name, np.zeros((n_mat, h.shape[1])))
        c = self.counts.setdefault(name, np.zeros(n_mat))
        s[mat] += (h * h).sum(axis=0)
        c[mat] += h.shape[0]

    def mm(self, h, name):
        self.record(name, h)
        return super().mm(h, name)

    def moe(self, h, b, act):
        """Forward.moe's computation (no activation rounding), recording the
        expert products' inputs."""
        k = self.n_expert_used
        gate_e, up_e = self.W(b + "ffn_gate_exps.weight"), self.W(b + "ffn_up_exps.weight")
        down_e = self.W(b + "ffn_down_exps.weight")
        n_expert = gate_e.shape[0]
        logits = self.mm(h, b + "ffn_gate_inp.weight")
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        chosen = np.argsort(-p, axis=1, kind="stable")[:, :k]
        weight = np.take_along_axis(p, chosen, axis=1)
        weight /= weight.sum(axis=1, keepdims=True)
        out = np.zeros_like(h)
        for e in range(n_expert):
            rows, slot = np.nonzero(chosen == e)
            if len(rows) == 0:
                continue
            self.record(b + "ffn_gate_exps.weight", h[rows], e, n_expert)
            self.record(b + "ffn_up_exps.weight", h[rows], e, n_expert)
            f = act(h[rows] @ gate_e[e].T) * (h[rows] @ up_e[e].T)
            self.record(b + "ffn_down_exps.weight", f, e, n_expert)
            out[rows] += weight[rows, slot][:, None] * (f @ down_e[e].T)
        return out


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[2]) as f:
        ids = json.load(f)["ids"]
    fwd = Recording(sys.argv[1])
    fwd.forward(ids)
    out = {n: {"sum2": fwd.sum2[n].tolist(), "counts": fwd.counts[n].tolist()} for n in fwd.sum2}
    with open(sys.argv[3], "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
