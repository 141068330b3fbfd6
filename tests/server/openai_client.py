#!/usr/bin/env python3
"""weir serve driven by the official openai package (the reference client).

Usage: openai_client.py BASE_URL API_KEY
Checks a chat answer, streaming (the same text as the whole answer), stop
strings, log-probabilities, penalties, the prefix cache (cached prompt
tokens), completions, the model list, errors as the client raises them, and
16 streams at once at temperature 0 each giving the text the request gives
alone. Prints "ok" and exits 0, or raises.
"""
import sys
import threading

import openai

base, key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=300)
model = client.models.list().data[0].id

# A system prompt long enough to be worth sharing (the prefix cache shares 16 tokens or more).
msgs = [{"role": "system", "content": "You are a helpful assistant. Answer every question in one short sentence."},
        {"role": "user", "content": "Name a fruit."}]
whole = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0)
text = whole.choices[0].message.content
assert whole.choices[0].finish_reason in ("length", "stop"), whole
assert whole.usage.completion_tokens <= 12 and whole.usage.prompt_tokens > 0, whole.usage
assert text, "an empty answer"

parts = []
for chunk in client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0, stream=True):
    if chunk.choices and chunk.choices[0].delta.content:
        parts.append(chunk.choices[0].delta.content)
assert "".join(parts) == text, ("streamed", "".join(parts), "whole", text)

if len(text) > 6:
    stop = text[3:6]
    cut = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0, stop=[stop])
    assert cut.choices[0].finish_reason == "stop", cut
    assert cut.choices[0].message.content == text[: text.find(stop)], (cut.choices[0].message.content, text, stop)

# Log-probabilities: a token each, the greedy choice the most likely.
lp = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0, logprobs=True,
                                    top_logprobs=3)
content = lp.choices[0].logprobs.content
assert lp.choices[0].message.content == text, (lp.choices[0].message.content, text)
assert len(content) == lp.usage.completion_tokens, (len(content), lp.usage)
for t in content:
    assert t.logprob <= 0 and len(t.top_logprobs) == 3, t
    assert t.top_logprobs[0].token == t.token and abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6, t
assert bytes(b for t in content for b in t.bytes).decode() == text
# The same question again: its prompt came from the prefix cache.
assert lp.usage.prompt_tokens_details.cached_tokens >= lp.usage.prompt_tokens - 1, lp.usage
# A strong frequency penalty changes a repetitive answer, and repeats less.
def most_repeated(fp):
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say yes ten times."}],
                                       max_tokens=24, temperature=0, frequency_penalty=fp, logprobs=True)
    toks = [t.token for t in r.choices[0].logprobs.content]
    return r.choices[0].message.content, max(toks.count(t) for t in toks)
plain, plain_n = most_repeated(0.0)
penalized, penalized_n = most_repeated(2.0)
assert penalized != plain and penalized_n <= plain_n, (plain, penalized)

comp = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8, temperature=0,
                                 logprobs=2)
assert comp.choices[0].text, comp
assert len(comp.choices[0].logprobs.tokens) == comp.usage.completion_tokens, comp.choices[0].logprobs
assert "".join(comp.choices[0].logprobs.tokens) == comp.choices[0].text or "\ufffd" in "".join(comp.choices[0].logprobs.tokens)

try:
    client.chat.completions.create(model=model, messages=msgs, temperature=5)
    raise AssertionError("temperature 5 was taken")
except openai.BadRequestError as e:
    assert "temperature" in str(e), e

bad = openai.OpenAI(base_url=base, api_key="wrong", max_retries=0)
try:
    bad.models.list()
    raise AssertionError("a wrong key was taken")
except openai.AuthenticationError:
    pass

# 16 streams at once, each its own question: the same text as alone.
questions = [f"Count to {i}." for i in range(16)]
alone = {}
for q in questions:
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": q}], max_tokens=8, temperature=0)
    alone[q] = r.choices[0].message.content
together = {}
def ask(q):
    out = []
    for chunk in client.chat.completions.create(model=model, messages=[{"role": "user", "content": q}], max_tokens=8,
                                                temperature=0, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            out.append(chunk.choices[0].delta.content)
    together[q] = "".join(out)
threads = [threading.Thread(target=ask, args=(q,)) for q in questions]
for t in threads:
    t.start()
for t in threads:
    t.join()
differ = [q for q in questions if together.get(q) != alone[q]]
# Greedy text may part at a near-tie (batched products round differently);
# the texts must agree for nearly all.
assert len(differ) <= 2, [(q, alone[q], together.get(q)) for q in differ]
print("ok", len(questions) - len(differ), "of", len(questions), "streams equal alone")
