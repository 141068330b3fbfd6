"""weir.Llama on the real Gemma 3 270M, against independent references: the
weir command's greedy text and tokens, Python's jinja2 rendering the GGUF's
chat template, and the process's own memory and signals."""

import collections
import json
import os
import random
import signal
import struct
import subprocess
import threading
import time

import pytest

import weir
from conftest import MODEL, THREADS, WEIR_BIN

PROMPT = "The capital of France is"


def weir_run(model_path, prompt, n):
    """The weir command's greedy text (its stdout is the generated text alone)."""
    r = subprocess.run([WEIR_BIN, "run", "-m", model_path, "-p", prompt, "-n", str(n), "--temp", "0", "-t",
                        str(THREADS), "-c", "2048"], capture_output=True, check=True, timeout=300)
    return r.stdout.decode("utf-8")


def test_greedy_text_equals_weir_run(llm, model_path):
    expected = weir_run(model_path, PROMPT, 24)
    out = llm(PROMPT, max_tokens=24, temperature=0)
    assert out["object"] == "text_completion"
    assert out["choices"][0]["text"] == expected
    assert out["usage"]["completion_tokens"] == 24 or out["choices"][0]["finish_reason"] == "stop"
    assert out["usage"]["prompt_tokens"] == len(llm.tokenize(PROMPT))
    assert out["model"] == model_path


def test_an_8_bit_cache_generates_as_weir_run_does(model_path):
    r = subprocess.run([WEIR_BIN, "run", "-m", model_path, "-p", PROMPT, "-n", "24", "--temp", "0", "-t",
                        str(THREADS), "-c", "512", "-ctk", "q8_0"], capture_output=True, check=True, timeout=300)
    m = weir.Llama(model_path, n_ctx=512, n_threads=THREADS, type_k=8, type_v=8)
    try:
        assert m(PROMPT, max_tokens=24, temperature=0)["choices"][0]["text"] == r.stdout.decode("utf-8")
    finally:
        m.close()
    with pytest.raises(ValueError):
        weir.Llama(model_path, type_k=8, type_v=1)
    with pytest.raises(ValueError):
        weir.Llama(model_path, type_k=2)


def test_stream_yields_the_same_text(llm):
    whole = llm(PROMPT, max_tokens=32, temperature=0)["choices"][0]["text"]
    chunks = list(llm(PROMPT, max_tokens=32, temperature=0, stream=True))
    assert len(chunks) > 2  # text came in pieces, not at the end
    assert all(c["object"] == "text_completion" for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole
    assert chunks[-1]["choices"][0]["finish_reason"] in ("length", "stop")
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_echo_and_stop(llm):
    whole = llm(PROMPT, max_tokens=24, temperature=0)["choices"][0]["text"]
    assert llm(PROMPT, max_tokens=24, temperature=0, echo=True)["choices"][0]["text"] == PROMPT + whole
    word = whole.split()[1] if len(whole.split()) > 1 else whole.strip()
    cut = llm(PROMPT, max_tokens=24, temperature=0, stop=[word])
    assert cut["choices"][0]["text"] == whole[: whole.index(word)]
    assert cut["choices"][0]["finish_reason"] == "stop"


def test_tokens_equal_weir_tokenize(llm, model_path):
    text = "Hello, world! Ça va? <start_of_turn>user 12345"
    r = subprocess.run([WEIR_BIN, "tokenize", "-m", model_path, "-p", text, "--ids"], capture_output=True, check=True)
    assert llm.tokenize(text.encode(), add_bos=True, special=True) == json.loads(r.stdout)
    ids = llm.tokenize(text.encode(), add_bos=False, special=False)
    assert llm.detokenize(ids) == text.encode()
    assert llm.tokenize(text) == llm.tokenize(text.encode())  # str as well as bytes
    assert llm.n_vocab() == 262144
    assert llm.token_bos() == 2 and llm.token_eos() == 1


MESSAGES = [{"role": "system", "content": "Answer in one word."},
            {"role": "user", "content": "What is the capital of France?"}]


def check_chat(llm, messages, rendered):
    """create_chat_completion(messages) computes the rendered prompt: the
    same prompt length and the same distribution of its first token as a
    completion of the rendered text's ids (log-probabilities, so that a
    near-tie of this small model cannot flip the check); streamed, the same
    text as whole."""
    ids = llm.tokenize(rendered.encode(), add_bos=False, special=True)
    ref = llm(ids, max_tokens=1, temperature=0, logprobs=5)
    ref_top = ref["choices"][0]["logprobs"]["top_logprobs"][0]
    out = llm.create_chat_completion(messages, max_tokens=1, temperature=0, logprobs=True, top_logprobs=5)
    assert out["object"] == "chat.completion"
    assert out["choices"][0]["message"]["role"] == "assistant"
    assert out["usage"]["prompt_tokens"] == len(ids)
    top = {t["token"]: t["logprob"] for t in out["choices"][0]["logprobs"]["content"][0]["top_logprobs"]}
    assert set(top) == set(ref_top)
    for tok, lp in top.items():
        assert lp == pytest.approx(ref_top[tok], abs=1e-3)
    whole = llm.create_chat_completion(messages, max_tokens=16, temperature=0)["choices"][0]["message"]["content"]
    chunks = list(llm.create_chat_completion(messages, max_tokens=16, temperature=0, stream=True))
    assert chunks[0]["choices"][0]["delta"].get("role") == "assistant"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == whole


def test_chat_completion_in_gemma_3s_format(llm):
    # The default file has no template of its own: weir's built-in Gemma one,
    # which must give Gemma 3's published turn format (the system prompt
    # goes before the first user turn).
    rendered = ("<bos><start_of_turn>user\nAnswer in one word.\n\nWhat is the capital of France?<end_of_turn>\n"
                "<start_of_turn>model\n")
    check_chat(llm, MESSAGES, rendered)


def test_chat_completion_with_a_given_template(model_path):
    import jinja2

    template = ("{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] | trim }}<end_of_turn>\n"
                "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
    rendered = jinja2.Environment().from_string(template).render(messages=MESSAGES, add_generation_prompt=True)
    with weir.Llama(model_path, n_ctx=1024, n_threads=THREADS, chat_template=template) as m:
        check_chat(m, MESSAGES, rendered)


def test_seeded_sampling_repeats(model_path):
    a = weir.Llama(model_path, n_ctx=512, n_threads=THREADS, seed=7)
    b = weir.Llama(model_path, n_ctx=512, n_threads=THREADS, seed=7)
    ta = [a(PROMPT, max_tokens=12, temperature=1.0)["choices"][0]["text"] for _ in range(2)]
    tb = [b(PROMPT, max_tokens=12, temperature=1.0)["choices"][0]["text"] for _ in range(2)]
    assert ta == tb
    s1 = a(PROMPT, max_tokens=12, temperature=1.0, seed=3)["choices"][0]["text"]
    s2 = b(PROMPT, max_tokens=12, temperature=1.0, seed=3)["choices"][0]["text"]
    assert s1 == s2
    a.close()
    b.close()


def test_logprobs(llm):
    out = llm(PROMPT, max_tokens=4, temperature=0, logprobs=3)
    lp = out["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == 4 and len(lp["token_logprobs"]) == 4
    assert all(v <= 0 for v in lp["token_logprobs"])
    # Greedy: the chosen token is the most likely of the alternatives.
    for chosen, top in zip(lp["token_logprobs"], lp["top_logprobs"]):
        assert len(top) == 3
        assert chosen == pytest.approx(max(top.values()), abs=1e-5)


def test_threads_share_the_engine(llm):
    prompts = [PROMPT, "One, two, three,", "def fibonacci(n):"]
    alone = [llm(p, max_tokens=16, temperature=0)["choices"][0]["text"] for p in prompts]
    together = [None] * len(prompts)

    def run(i):
        together[i] = llm(prompts[i], max_tokens=16, temperature=0)["choices"][0]["text"]

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert together == alone


def test_errors_are_exceptions(llm, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        weir.Llama(str(tmp_path / "missing.gguf"))
    with pytest.raises(ValueError, match="directory"):
        weir.Llama(str(tmp_path))
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(weir.WeirError):
        weir.Llama(str(junk))
    assert issubclass(weir.WeirError, RuntimeError)
    with pytest.raises(ValueError, match="temperature"):
        llm(PROMPT, temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        llm(PROMPT, top_p=7)
    with pytest.raises(ValueError, match="repeat_penalty"):
        llm(PROMPT, repeat_penalty=1.3)
    with pytest.raises(ValueError, match="messages"):
        llm.create_chat_completion([{"content": "no role"}])
    with pytest.raises(ValueError, match="prompt"):
        llm([10**9])  # an id outside the vocabulary
    with pytest.raises(ValueError):
        llm.detokenize([-5])
    with pytest.raises(TypeError):
        llm.tokenize(12345)
    with pytest.raises(TypeError):
        llm(PROMPT, stop=[object()])
    with pytest.raises(ValueError, match="n_ctx"):
        weir.Llama(MODEL, n_ctx=3)
    with pytest.raises(ValueError, match="n_threads"):
        weir.Llama(MODEL, n_threads=0)
    with pytest.raises(ValueError, match=r"over the limit of 2047 \(the context holds 2048"):
        llm("word " * 3000)
    assert llm(PROMPT, max_tokens=2, temperature=0)["usage"]["completion_tokens"] == 2  # still works


def write_gguf_with_arch(path, arch):
    """A GGUF with only general.architecture (struct, not the code under test)."""
    key = b"general.architecture"
    val = arch.encode()
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    data += struct.pack("<Q", len(key)) + key + struct.pack("<I", 8) + struct.pack("<Q", len(val)) + val
    path.write_bytes(data)


def test_unsupported_model_is_an_exception(tmp_path):
    p = tmp_path / "mamba.gguf"
    write_gguf_with_arch(p, "mamba")
    with pytest.raises(weir.WeirError, match="mamba"):
        weir.Llama(str(p))


def assert_both_slots_free(llm):
    """The stopped generation was stopped, not left running: two requests at
    once (the engine runs two side by side) are both answered at once; one
    would otherwise wait for the stopped one's 1,500 tokens (20 s or more)."""
    t0 = time.monotonic()
    done = []
    ts = [threading.Thread(target=lambda: done.append(llm(PROMPT, max_tokens=4, temperature=0))) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert [d["usage"]["completion_tokens"] for d in done] == [4, 4]
    assert time.monotonic() - t0 < 5.0


def test_ctrl_c_stops_a_generation(llm):
    main = threading.main_thread()
    assert threading.current_thread() is main
    sent = []

    def interrupt():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.5, interrupt)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        llm(PROMPT, max_tokens=1500, temperature=0, ignore_eos=True)
    caught = time.monotonic()
    timer.join()
    assert caught - sent[0] < 1.0
    assert_both_slots_free(llm)

    # The same while streaming.
    timer = threading.Timer(0.5, interrupt)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        for _ in llm(PROMPT, max_tokens=1500, temperature=0, ignore_eos=True, stream=True):
            pass
    timer.join()
    assert_both_slots_free(llm)


def test_close_stops_an_abandoned_stream(model_path):
    m = weir.Llama(model_path, n_ctx=2048, n_threads=THREADS)
    stream = m(PROMPT, max_tokens=1500, temperature=0, ignore_eos=True, stream=True)
    next(stream)  # started; then nobody reads on
    t0 = time.monotonic()
    m.close()
    assert time.monotonic() - t0 < 2.0  # not the 1,500 tokens' 20 s or more
    with pytest.raises(ValueError, match="closed"):
        m(PROMPT)
    # The stream outlives its engine: it ends with ValueError (the model was
    # closed under it), and dropping it touches nothing freed (this crashed
    # the heap before answers were detached).
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="closed"):
        list(stream)
    del stream
    import gc

    gc.collect()
    assert time.monotonic() - t0 < 2.0


def test_gil_is_released_while_the_engine_runs(llm):
    # A long tokenization and a generation in a second thread; the main
    # thread's loop must keep running meanwhile (with the GIL held by a C++
    # call it would stall for the whole call: seconds).
    text = ("The quick brown fox jumps over the lazy dog. " * 40000).encode()
    done = threading.Event()

    def work():
        t0 = time.monotonic()
        llm.tokenize(text)
        work.tokenize_s = time.monotonic() - t0
        llm(PROMPT, max_tokens=24, temperature=0)
        done.set()

    t = threading.Thread(target=work)
    gaps, last = [], time.monotonic()  # before the start: a stall from the first moment counts
    t.start()
    while not done.is_set():
        time.sleep(0.002)
        now = time.monotonic()
        gaps.append(now - last)
        last = now
    t.join()
    assert work.tokenize_s > 0.3, "the tokenization should take long enough to notice a held GIL"
    assert max(gaps) < 0.2, f"the main thread stalled {max(gaps):.2f} s"


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_memory_does_not_grow_over_100_generations(llm):
    for _ in range(10):  # warm: graphs of the shapes used, allocator pools
        llm(PROMPT, max_tokens=8, temperature=0.7)
        list(llm("Once upon a time", max_tokens=8, temperature=0.7, stream=True))
    before = rss_kib()
    for i in range(100):
        if i % 2:
            llm(PROMPT, max_tokens=8, temperature=0.7)
        else:
            list(llm("Once upon a time", max_tokens=8, temperature=0.7, stream=True))
    grown = rss_kib() - before
    assert grown < 4096, f"RSS grew {grown} KiB over 100 generations"


def test_stubs_ship_with_the_module():
    pkg = os.path.dirname(weir.__file__)
    stub = os.path.join(pkg, "_weir.pyi")
    assert os.path.isfile(stub)
    text = open(stub).read()
    assert "class Model" in text and "def tokenize" in text
    assert os.path.isfile(os.path.join(pkg, "py.typed"))


def test_close_is_safe_while_other_threads_call(model_path):
    """close() while 4 threads generate (whole and streamed), tokenize and
    detokenize: each of them ends normally or with ValueError, nothing
    crashes (close() during GenerationEngine::submit crashed 5 of 5 runs)."""
    rng = random.Random(5)
    outcomes = collections.Counter()
    for run in range(100):
        m = weir.Llama(model_path, n_ctx=256, n_threads=THREADS, n_parallel=4)
        failures = []

        def work(i):
            try:
                for _ in range(3):
                    if i % 2:
                        m(PROMPT, max_tokens=6, temperature=0)
                    else:
                        for _ in m(PROMPT, max_tokens=6, temperature=0, stream=True):
                            pass
                    m.tokenize(b"hello world")
                    m.detokenize([2, 3])
                outcomes["finished"] += 1
            except ValueError as e:
                assert "closed" in str(e), e
                outcomes["ValueError"] += 1
            except BaseException as e:  # anything else is a failure
                failures.append(repr(e))

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0, 0.08))
        m.close()
        for t in threads:
            t.join()
        assert not failures, (run, failures)
        with pytest.raises(ValueError, match="closed"):
            m.tokenize(b"after")
    assert outcomes["ValueError"] > 0, outcomes  # close() did land while threads ran


def test_integers_too_large_for_c_name_the_argument(llm, model_path):
    with pytest.raises(ValueError, match="n_ctx"):
        weir.Llama(model_path, n_ctx=2**70)
    with pytest.raises(ValueError, match="n_batch"):
        weir.Llama(model_path, n_batch=2**63)
    with pytest.raises(ValueError, match="n_threads"):
        weir.Llama(model_path, n_threads=2**40)
    with pytest.raises(ValueError, match="tokens"):
        llm.detokenize([2**70])
    with pytest.raises(ValueError, match="tokens"):
        llm.detokenize([2**32 + 9259])
    with pytest.raises(ValueError, match="prompt"):
        llm([2**63])
    with pytest.raises(ValueError, match="max_tokens"):
        llm(PROMPT, max_tokens=2**70)
    with pytest.raises(ValueError, match="seed"):
        llm(PROMPT, seed=2**70)
    with pytest.raises(ValueError, match="logprobs"):
        llm(PROMPT, logprobs=2**40)


def test_top_logprobs_needs_logprobs(llm):
    msgs = [{"role": "user", "content": "Hi"}]
    with pytest.raises(ValueError, match="top_logprobs"):
        llm.create_chat_completion(msgs, top_logprobs=3, max_tokens=2)
    out = llm.create_chat_completion(msgs, logprobs=True, top_logprobs=3, max_tokens=2, temperature=0)
    assert len(out["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 3


def test_runtime_arguments_of_llama_cpp_python(model_path):
    """The runtime fields under llama-cpp-python's names: honoured (the same
    greedy text with the file read into memory, a smaller step, op offload
    off) or refused with ValueError naming them."""
    want = weir_run(model_path, PROMPT, 8)
    with weir.Llama(model_path, n_ctx=512, n_threads=THREADS, n_threads_batch=THREADS, use_mmap=False,
                    n_batch=256, n_ubatch=64, numa=False, flash_attn=True, split_mode=None, main_gpu=0,
                    op_offload=False, tensor_split=None) as m:
        assert m(PROMPT, max_tokens=8, temperature=0)["choices"][0]["text"] == want
    for kwargs, name in ((dict(flash_attn=False), "flash_attn"), (dict(n_threads=2, n_threads_batch=1), "n_threads_batch"),
                         (dict(split_mode=7), "split_mode"), (dict(numa=3), "numa"), (dict(n_ubatch=0), "n_ubatch"),
                         (dict(tensor_split=[-1.0]), "tensor_split"), (dict(main_gpu=-1), "main_gpu")):
        with pytest.raises(ValueError, match=name):
            weir.Llama(model_path, **kwargs)
