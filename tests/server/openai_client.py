#!/usr/bin/env python3
"""weir serve driven by the official openai package (the reference client).

Usage: openai_client.py BASE_URL API_KEY
Checks a chat answer, streaming (the same text as the whole answer), stop
strings, completions, the model list, errors as the client raises them, and
16 streams at once at temperature 0 each giving the text the request gives
alone. Prints "ok" and exits 0, or raises.
"""
import sys
import threading

import openai

base, key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=300)
model = client.models.list().data[0].id

msgs = [{"role": "user", "content": "Name a fruit."}]
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

comp = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8, temperature=0)
assert comp.choices[0].text, comp

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
