"""Speculative decoding for weir.Llama, as llama-cpp-python's
llama_cpp.llama_speculative spells it::

    from weir import Llama, LlamaPromptLookupDecoding
    llm = Llama("model.gguf", draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10))

Prompt lookup guesses the next tokens from the text so far (the tokens that
followed the latest earlier occurrence of its last n tokens); the model
checks the guesses of every running request in the same forward step as
its other work and keeps those it would have generated itself, so the
output is the same as without speculation (greedy token for token; sampled
in distribution, and for a seed the same tokens up to rounding). It pays
where the output repeats its input: rewriting, quoting, editing code.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LlamaPromptLookupDecoding"]


def _positive(name: str, value: Any, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if not 1 <= value <= hi:
        raise ValueError(f"{name}: expected 1 to {hi}, got {value}")
    return value


class LlamaPromptLookupDecoding:
    """Prompt lookup (n-gram) guesses, llama-cpp-python's draft_model.

    max_ngram_size: the longest run of last tokens looked up earlier in the
        text (longer first, down to 2; 1 looks single tokens up).
    num_pred_tokens: the most guesses a step checks for a request. weir's
        rule (docs/speculative.md) checks fewer, or none, where the measured
        cost of a longer step is not paid back by the guesses' chances.
    """

    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10) -> None:
        self.max_ngram_size = _positive("max_ngram_size", max_ngram_size, 64)
        self.num_pred_tokens = _positive("num_pred_tokens", num_pred_tokens, 64)

    def __repr__(self) -> str:
        return f"LlamaPromptLookupDecoding(max_ngram_size={self.max_ngram_size}, num_pred_tokens={self.num_pred_tokens})"
