"""n, best_of, echo, suffix and prompt lists in weir.Llama, as weir serve
takes them (the engine does them; Python only passes them on): on Gemma 3
270M, and suffix on a synth model given fill-in-the-middle tokens by
gguf-py's gguf_new_metadata."""

import subprocess
import sys

import pytest

from conftest import THREADS, WEIR_BIN

PROMPT = "The capital of France is"


def texts(out):
    assert [c["index"] for c in out["choices"]] == list(range(len(out["choices"])))
    return [c["text"] for c in out["choices"]]


def test_n_choices_repeat_with_a_seed(llm):
    args = dict(max_tokens=8, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=5, ignore_eos=True)
    out = llm(PROMPT, n=3, **args)
    three = texts(out)
    assert len(three) == 3 and len(set(three)) > 1, three
    assert texts(llm(PROMPT, n=3, **args)) == three
    assert out["usage"]["completion_tokens"] == 3 * 8
    assert out["usage"]["prompt_tokens"] == llm(PROMPT, **args)["usage"]["prompt_tokens"]
    assert len(set(texts(llm(PROMPT, n=3, max_tokens=8, temperature=0)))) == 1

    chat = llm.create_chat_completion([{"role": "user", "content": "Hi"}], n=2, max_tokens=6, temperature=0)
    assert [c["index"] for c in chat["choices"]] == [0, 1]
    assert chat["choices"][0]["message"]["content"] == chat["choices"][1]["message"]["content"]


def test_streamed_choices(llm):
    args = dict(max_tokens=6, temperature=1.0, seed=9, ignore_eos=True)
    got, finished = ["", ""], [0, 0]
    for chunk in llm(PROMPT, n=2, stream=True, **args):
        c = chunk["choices"][0]
        got[c["index"]] += c["text"]
        finished[c["index"]] += c["finish_reason"] is not None
    assert finished == [1, 1]
    assert got == texts(llm(PROMPT, n=2, **args))


def test_echo_prompt_lists_and_best_of(llm):
    first = list(llm(PROMPT, max_tokens=4, temperature=0, echo=True, stream=True))
    assert first[0]["choices"][0]["text"] == PROMPT  # the prompt comes first
    ids = llm.tokenize(b"Paris is a city", add_bos=False)
    out = llm([PROMPT, "Berlin is"], n=2, max_tokens=3, temperature=0, echo=True)
    assert [t.startswith(PROMPT) for t in texts(out)] == [True, True, False, False]
    assert all(t.startswith("Berlin is") for t in texts(out)[2:])
    out = llm([ids, ids[:2]], max_tokens=3, temperature=0, echo=True)
    assert texts(out)[0].startswith(llm.detokenize(ids).decode())
    assert texts(out)[1].startswith(llm.detokenize(ids[:2]).decode())
    best = llm(PROMPT, n=1, best_of=3, max_tokens=6, seed=2)
    assert len(best["choices"]) == 1 and best["usage"]["completion_tokens"] >= 3
    with pytest.raises(ValueError, match="best_of"):
        llm(PROMPT, best_of=2, stream=True)
    with pytest.raises(ValueError, match="best_of"):
        llm(PROMPT, n=3, best_of=2)
    with pytest.raises(ValueError, match="echo"):
        llm(PROMPT, echo=True, logprobs=1)
    with pytest.raises(ValueError, match="n: expected 1 to 128"):
        llm(PROMPT, n=0)
    with pytest.raises(ValueError, match="suffix"):  # Gemma 3 has no fill-in-the-middle tokens
        llm(PROMPT, suffix=" and that is all.")


@pytest.fixture(scope="module")
def fim_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("fim")
    synth, fim = d / "synth.gguf", d / "fim.gguf"
    subprocess.run([WEIR_BIN, "synth", "--arch", "llama", "--preset", "tiny", "--type", "Q8_0", "-o", str(synth)],
                   check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", str(synth), str(fim), "--force",
                    "--special-token-by-id", "fim_pre", "300", "--special-token-by-id", "fim_suf", "301",
                    "--special-token-by-id", "fim_mid", "302"], check=True, capture_output=True)
    import weir

    m = weir.Llama(str(fim), n_ctx=512, n_threads=THREADS)
    yield m
    m.close()


def test_suffix_fills_in_the_middle(fim_model):
    pre, suf = "def add(a, b):", "    return total"
    out = fim_model(pre, suffix=suf, max_tokens=4, seed=1)
    n_pre = len(fim_model.tokenize(pre.encode(), add_bos=False, special=True))
    n_suf = len(fim_model.tokenize(suf.encode(), add_bos=False, special=True))
    # [BOS] <fim_pre> prefix <fim_suf> suffix <fim_mid>
    assert out["usage"]["prompt_tokens"] == 1 + 1 + n_pre + 1 + n_suf + 1
    assert fim_model(pre, suffix=suf, max_tokens=4, seed=1, echo=True)["choices"][0]["text"].startswith(pre)
