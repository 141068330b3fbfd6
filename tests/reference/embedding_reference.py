#!/usr/bin/env python3
"""Float64 reference embeddings of a GGUF decoder: each token sequence run
alone through reference_forward.py's forward pass (hidden states after the
output norm, before the LM head), or a BERT encoder's through
bert_forward.py's (its last layer's output), pooled and normalized here with numpy,
written from the definitions (mean: the average of the rows; cls: the
first row; last: the last row; l2: divided by the Euclidean length), not
from weir's code.

    embedding_reference.py MODEL.gguf OUT.json IDS [IDS ...]
        IDS: comma-separated token ids of one sequence ("1,17,42").
        OUT.json: {"cases": [{"ids": [...], "hidden": [[...] a row],
                   "mean": [...], "cls": [...], "last": [...],
                   "mean_l2": [...], "cls_l2": [...], "last_l2": [...]}]}

The model's weights are dequantized as they are first used (lazy), and of
its token embeddings only the rows of the ids, so a real model (Gemma 3
270M) takes seconds. Exit code 77 when numpy or gguf is missing, so a C++
test can skip with a message.
"""
import json
import os
import sys

try:
    import numpy as np
    import gguf  # noqa: F401
except ImportError as e:  # pragma: no cover
    print(f"embedding_reference.py: {e}", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bert_forward  # noqa: E402
import reference_forward  # noqa: E402


def l2(v):
    n = np.sqrt(np.sum(v * v))
    return v / n if n > 0 else v


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    arch = gguf.GGUFReader(sys.argv[1]).fields["general.architecture"].contents()
    if arch in ("bert", "nomic-bert"):
        fwd = bert_forward.BertForward(sys.argv[1])
    else:
        fwd = reference_forward.Forward(sys.argv[1], lazy=True)
    cases = []
    for arg in sys.argv[3:]:
        ids = [int(x) for x in arg.split(",")]
        h = fwd.hidden(ids)  # [T, n_embd]
        pooled = {"mean": h.mean(axis=0), "cls": h[0], "last": h[-1]}
        case = {"ids": ids, "hidden": h.tolist()}
        for name, v in pooled.items():
            case[name] = v.tolist()
            case[name + "_l2"] = l2(v).tolist()
        cases.append(case)
    with open(sys.argv[2], "w") as f:
        json.dump({"cases": cases}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
