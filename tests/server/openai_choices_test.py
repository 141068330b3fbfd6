#!/usr/bin/env python3
"""n, best_of, echo, suffix and prompt lists through weir serve, driven by
the openai package (the reference client).

On a synth llama (random weights: any text is as likely as another, so
choices drawn at temperature 1 differ) given fill-in-the-middle tokens by
gguf-py's gguf_new_metadata (llama.cpp's own tool), and on the same model
without them:
  * n=4 with a seed: four choices, indices 0..3, all different; the same
    request again gives the same four; at temperature 0 all equal;
  * usage: completion tokens summed over the choices, the prompt counted
    once; the prompt computed once for all choices (/metrics: the other
    choices compute one token each, the prefix cache gives the rest);
  * a stream of n=3: each chunk names its choice, each choice one finish
    chunk, their texts those of the same request whole, the usage last;
  * prompt lists (texts, token id lists) with echo: choice p*n+i begins
    with prompt p (as /detokenize gives token ids);
  * best_of=4, n=2: the two of the four candidates (the same four as n=4
    with that seed) whose mean token log-probability is highest, ranked
    here from the candidates' own logprobs;
  * suffix: the prompt is [BOS] <fim_pre> prompt <fim_suf> suffix <fim_mid>
    (usage.prompt_tokens against /tokenize); a model without the tokens
    answers 400 naming suffix;
  * 400s naming the field: best_of with stream, best_of < n, echo with
    logprobs, n over 128.
On Gemma 3 270M (when present) through /v1/chat/completions: n=3 with a seed
repeats, at temperature 0 all equal, a streamed n=2 with a role chunk and a
finish chunk a choice.

  openai_choices_test.py WEIR_BIN [GEMMA_GGUF]
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import openai

WEIR = sys.argv[1]
GEMMA = sys.argv[2] if len(sys.argv) > 2 else ""
FIM = {"fim_pre": 300, "fim_suf": 301, "fim_mid": 302}  # filler pieces of the synth vocabulary


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, model, *extra):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([WEIR, "serve", "-m", model, "--port", str(self.port), "-np", "4", "-t", "2",
                                      "-c", "4096", *extra],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(self.base + "/health", timeout=1)
                break
            except Exception:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("weir serve did not start: " + self.proc.stderr.read())
                time.sleep(0.2)
        self.client = openai.OpenAI(base_url=self.base + "/v1", api_key="none", max_retries=0, timeout=600)

    def post(self, path, body):
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    def metric(self, name):
        with urllib.request.urlopen(self.base + "/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        raise KeyError(name)

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def refused(call, param):
    try:
        call()
    except openai.BadRequestError as e:
        got = e.body.get("param") if isinstance(e.body, dict) else None
        assert got == param, f"400 naming {got!r}, not {param!r}: {e}"
        return
    raise AssertionError(f"taken; expected a 400 naming {param}")


def texts(resp):
    assert [c.index for c in resp.choices] == list(range(len(resp.choices))), [c.index for c in resp.choices]
    return [c.text for c in resp.choices]


def synth_checks(s, plain):
    c = s.client
    prompt = "Once upon a time there was a little girl who lived in a village near the forest with her mother"
    args = dict(model="m", prompt=prompt, max_tokens=8, temperature=1.0, seed=7, extra_body={"ignore_eos": True})

    # n with a seed: different choices, repeated exactly; the prompt computed once.
    computed = s.metric("weir_prompt_tokens_total")
    first = c.completions.create(n=4, **args)
    after = s.metric("weir_prompt_tokens_total")
    four = texts(first)
    assert len(four) == 4 and len(set(four)) == 4, four
    assert texts(c.completions.create(n=4, **args)) == four
    assert first.usage.completion_tokens == 4 * 8, first.usage
    one = c.completions.create(n=1, **args)
    assert texts(one) == four[:1]  # choice 0 samples as a request of one choice
    assert first.usage.prompt_tokens == one.usage.prompt_tokens  # counted once
    assert after - computed == first.usage.prompt_tokens + 3, (after - computed, first.usage)
    greedy = texts(c.completions.create(n=3, **{**args, "temperature": 0.0, "seed": None}))
    assert len(set(greedy)) == 1, greedy

    # A stream: chunks by choice, a finish each, the whole request's texts, usage last.
    chunks = list(c.completions.create(n=3, stream=True, stream_options={"include_usage": True}, **args))
    got, finished = ["", "", ""], [0, 0, 0]
    for ch in chunks[:-1]:
        assert len(ch.choices) == 1
        got[ch.choices[0].index] += ch.choices[0].text
        finished[ch.choices[0].index] += ch.choices[0].finish_reason is not None
    assert finished == [1, 1, 1], finished
    assert got == texts(c.completions.create(n=3, **args)), got
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3 * 8, chunks[-1]

    # Prompt lists, prompt-major, with echo.
    ids = s.post("/tokenize", {"content": "a list of token ids"})["tokens"]
    shown = s.post("/detokenize", {"tokens": ids})["content"]
    for prompts, heads in ((["first prompt", "the second one"], ["first prompt", "the second one"]),
                           ([ids, ids[:2]], [shown, s.post("/detokenize", {"tokens": ids[:2]})["content"]])):
        r = c.completions.create(model="m", prompt=prompts, n=2, max_tokens=3, echo=True, seed=3)
        out = texts(r)
        assert len(out) == 4, out
        for i, t in enumerate(out):
            assert t.startswith(heads[i // 2]) and len(t) > len(heads[i // 2]), (i, t)
    both = c.completions.create(model="m", prompt=["first prompt", "the second one"], max_tokens=3, seed=3)
    alone = [c.completions.create(model="m", prompt=p, max_tokens=3, seed=3) for p in ("first prompt", "the second one")]
    assert both.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone), both.usage

    # best_of: the n candidates of the highest mean log-probability per token.
    cand = c.completions.create(n=4, logprobs=0, **args)
    mean = [sum(ch.logprobs.token_logprobs) / len(ch.logprobs.token_logprobs) for ch in cand.choices]
    ranked = sorted(range(4), key=lambda i: -mean[i])
    best = c.completions.create(n=2, best_of=4, **args)
    assert texts(best) == [cand.choices[i].text for i in ranked[:2]], (texts(best), mean)
    assert best.usage.completion_tokens == 4 * 8  # every candidate's tokens
    assert len(texts(c.completions.create(best_of=3, **args))) == 1

    # suffix: fill in the middle.
    pre, suf = "def add(a, b):", "    return total"
    r = c.completions.create(model="m", prompt=pre, suffix=suf, max_tokens=4, seed=1)
    n_pre = len(s.post("/tokenize", {"content": pre})["tokens"])
    n_suf = len(s.post("/tokenize", {"content": suf})["tokens"])
    n_bos = len(s.post("/tokenize", {"content": "", "add_special": True})["tokens"])
    assert r.usage.prompt_tokens == n_bos + n_pre + n_suf + 3, (r.usage, n_bos, n_pre, n_suf)
    refused(lambda: plain.client.completions.create(model="m", prompt=pre, suffix=suf, max_tokens=4), "suffix")

    # Refusals, as OpenAI's API answers them.
    refused(lambda: c.completions.create(model="m", prompt="x", best_of=2, stream=True), "best_of")
    refused(lambda: c.completions.create(model="m", prompt="x", n=3, best_of=2), "best_of")
    refused(lambda: c.completions.create(model="m", prompt="x", echo=True, logprobs=1), "echo")
    refused(lambda: c.completions.create(model="m", prompt="x", n=129), "n")
    print("synth: n, stream, prompt lists, echo, best_of, suffix ok")


def gemma_checks(s):
    c = s.client
    msgs = [{"role": "user", "content": "Name a colour."}]
    args = dict(model="m", messages=msgs, max_tokens=12, temperature=1.0, seed=11)
    r = c.chat.completions.create(n=3, **args)
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    three = [ch.message.content for ch in r.choices]
    assert [ch.message.content for ch in c.chat.completions.create(n=3, **args).choices] == three
    assert r.usage.prompt_tokens == c.chat.completions.create(n=1, **args).usage.prompt_tokens
    cold = [ch.message.content for ch in c.chat.completions.create(n=2, **{**args, "temperature": 0.0}).choices]
    assert cold[0] == cold[1], cold
    roles, finishes, got = [0, 0], [0, 0], ["", ""]
    for ch in c.chat.completions.create(n=2, stream=True, **args):
        for choice in ch.choices:
            roles[choice.index] += choice.delta.role == "assistant"
            finishes[choice.index] += choice.finish_reason is not None
            got[choice.index] += choice.delta.content or ""
    assert roles == [1, 1] and finishes == [1, 1], (roles, finishes)
    assert got == three[:2], (got, three)
    refused(lambda: c.completions.create(model="m", prompt="x", suffix="y"), "suffix")
    print(f"gemma: chat n=3 {three!r} ok")


def main():
    with tempfile.TemporaryDirectory() as d:
        synth, fim = os.path.join(d, "synth.gguf"), os.path.join(d, "fim.gguf")
        subprocess.run([WEIR, "synth", "--arch", "llama", "--preset", "tiny", "--type", "Q8_0", "-o", synth],
                       check=True, capture_output=True)
        cmd = [sys.executable, "-m", "gguf.scripts.gguf_new_metadata", synth, fim, "--force"]
        for k, v in FIM.items():
            cmd += ["--special-token-by-id", k, str(v)]
        subprocess.run(cmd, check=True, capture_output=True)
        s, plain = Server(fim), Server(synth)
        try:
            synth_checks(s, plain)
        finally:
            s.close()
            plain.close()
    if GEMMA and os.path.isfile(GEMMA):
        s = Server(GEMMA)
        try:
            gemma_checks(s)
        finally:
            s.close()
    else:
        print(f"no Gemma 3 at {GEMMA!r}: its checks skipped")
    print("ok")


if __name__ == "__main__":
    main()
