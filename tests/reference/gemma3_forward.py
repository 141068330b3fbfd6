#!/usr/bin/env python3
"""Float64 forward of a Gemma 3 GGUF: now reference_forward.py, which serves
every architecture (it reproduces this script's earlier output on
gemma-3-270m to 1e-13). Kept so tests/data/gemma3-f64-logits.jsonl can be
remade with the same command.

    gemma3_forward.py MODEL.gguf ID [ID ...]   -> prints JSON {"top": [[id, logit], ...]}
"""
import os
import runpy
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
runpy.run_module("reference_forward", run_name="__main__")
