"""weir.Llama(draft_model=LlamaPromptLookupDecoding(...)) on the real Gemma 3
270M: prompt lookup speculation must give the text the same Llama gives
without it (greedy; and sampled with a seed, since each checked row draws
what plain decoding draws there), while guesses are made and kept (else the
comparison shows nothing); a draft model's path (weir's addition: the
model as its own draft) gives the same text too; other draft models are
refused by type."""

import pytest

import weir
from conftest import THREADS

# A text the answer repeats, so the lookup has something to find.
PROMPT = ("Copy the list twice.\nList: red apple, green pear, yellow banana, purple plum, orange peach, "
          "black cherry, white grape.\nCopy 1: red apple, green pear, yellow banana, purple plum, orange peach, "
          "black cherry, white grape.\nCopy 2: red apple,")


@pytest.fixture(scope="module")
def spec_llm(model_path):
    m = weir.Llama(model_path, n_ctx=2048, n_threads=THREADS, n_parallel=2,
                   draft_model=weir.LlamaPromptLookupDecoding(max_ngram_size=3, num_pred_tokens=8))
    yield m
    m.close()


def test_the_names_llama_cpp_python_has():
    from weir.llama_speculative import LlamaPromptLookupDecoding

    assert LlamaPromptLookupDecoding is weir.LlamaPromptLookupDecoding
    d = LlamaPromptLookupDecoding()
    assert (d.max_ngram_size, d.num_pred_tokens) == (2, 10)  # llama-cpp-python's defaults
    with pytest.raises(ValueError, match="num_pred_tokens"):
        LlamaPromptLookupDecoding(num_pred_tokens=0)
    with pytest.raises(TypeError, match="max_ngram_size"):
        LlamaPromptLookupDecoding(max_ngram_size="2")


def test_greedy_text_is_the_plain_text(llm, spec_llm):
    plain = llm(PROMPT, max_tokens=48, temperature=0)
    before = spec_llm._model.spec_guesses
    out = spec_llm(PROMPT, max_tokens=48, temperature=0)
    drafted, accepted = (a - b for a, b in zip(spec_llm._model.spec_guesses, before))
    assert out["choices"][0]["text"] == plain["choices"][0]["text"]
    assert out["usage"] == plain["usage"]
    assert drafted > 0 and accepted > 0, (drafted, accepted)


def test_sampled_text_with_a_seed_is_the_plain_text(llm, spec_llm):
    for seed in (1, 2):
        plain = llm(PROMPT, max_tokens=40, temperature=0.7, seed=seed)
        out = spec_llm(PROMPT, max_tokens=40, temperature=0.7, seed=seed)
        assert out["choices"][0]["text"] == plain["choices"][0]["text"], seed


def test_chat_and_stream_with_speculation(llm, spec_llm):
    messages = [{"role": "user", "content": PROMPT}]
    plain = llm.create_chat_completion(messages, max_tokens=32, temperature=0)
    chunks = spec_llm.create_chat_completion(messages, max_tokens=32, temperature=0, stream=True)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == plain["choices"][0]["message"]["content"]


def test_other_draft_models_are_refused(model_path):
    class LlamaDraftModel:  # llama-cpp-python's base class of draft models, by name
        pass

    for bad in (LlamaDraftModel(), 3):
        with pytest.raises(TypeError, match="draft_model"):
            weir.Llama(model_path, n_ctx=256, n_threads=THREADS, draft_model=bad)
    with pytest.raises(ValueError, match="draft_model: no file"):
        weir.Llama(model_path, n_ctx=256, n_threads=THREADS, draft_model="no-such-draft.gguf")
    with pytest.raises(ValueError, match="draft_gpu_layers"):
        weir.Llama(model_path, n_ctx=256, n_threads=THREADS, draft_gpu_layers=0)
    for bad in (2**40, -2):
        with pytest.raises(ValueError, match="draft_gpu_layers"):
            weir.Llama(model_path, n_ctx=256, n_threads=THREADS, draft_model=model_path, draft_gpu_layers=bad)


def test_a_draft_models_path_gives_the_plain_text(llm, model_path):
    # The model as its own draft: its guesses are (nearly) always kept.
    spec = weir.Llama(model_path, n_ctx=2048, n_threads=THREADS, n_parallel=2, draft_model=model_path,
                      draft_gpu_layers=0)
    try:
        plain = llm(PROMPT, max_tokens=40, temperature=0)
        out = spec(PROMPT, max_tokens=40, temperature=0)
        assert out["choices"][0]["text"] == plain["choices"][0]["text"]
        assert out["usage"]["completion_tokens"] == plain["usage"]["completion_tokens"]  # (cached_tokens: llm's prefix cache)
        for seed in (2001, 2002):
            plain = llm(PROMPT, max_tokens=32, temperature=0.7, seed=seed)
            out = spec(PROMPT, max_tokens=32, temperature=0.7, seed=seed)
            assert out["choices"][0]["text"] == plain["choices"][0]["text"], seed
        drafted, accepted = spec._model.spec_guesses
        assert drafted > 0 and accepted > 0, (drafted, accepted)
    finally:
        spec.close()
