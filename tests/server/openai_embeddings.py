#!/usr/bin/env python3
"""weir serve's /v1/embeddings driven by the official openai package.

Usage: openai_embeddings.py BASE_URL API_KEY [--accept-unknown]
Checks the response's shape, every form of input (a string, strings, token
ids, lists of token ids) giving the same vectors, base64 (the client's
default) against floats, unit length and normalize=false, dimensions,
errors as the client raises them (a bad input, an unknown field naming it,
a wrong dimensions, a wrong API key), and embeddings asked for while chat
answers stream: each answer's text equals its text alone, each vector
equals its vector alone. With --accept-unknown (weir serve
--accept-unknown-fields) an unknown field is taken instead. Prints "ok"
and exits 0, or raises. python/tests/test_embeddings.py runs the same
cases on the Python package.
"""
import base64
import json
import math
import struct
import sys
import threading
import urllib.request

import openai

base, key = sys.argv[1], sys.argv[2]
accept_unknown = "--accept-unknown" in sys.argv[3:]
client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=300)
model = client.models.list().data[0].id
TEXTS = ["Hello world", "The capital of France is Paris."]


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def close(a, b, tol=1e-4):
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) < tol


if accept_unknown:
    r = client.embeddings.create(model=model, input=TEXTS[0], extra_body={"frobnicate": 1})
    assert len(r.data) == 1
    print("ok (an unknown field taken)")
    sys.exit(0)

# The shape, and the client's default encoding (base64, decoded by it).
r = client.embeddings.create(model=model, input=TEXTS)
assert r.object == "list" and r.model == model, r
assert [d.index for d in r.data] == [0, 1] and all(d.object == "embedding" for d in r.data)
assert r.usage.prompt_tokens == r.usage.total_tokens > 4, r.usage
both = [d.embedding for d in r.data]
assert all(len(v) == 640 and abs(norm(v) - 1) < 1e-5 for v in both)

# Floats as JSON numbers equal the base64 floats.
floats = client.embeddings.create(model=model, input=TEXTS, encoding_format="float")
assert all(close(a.embedding, b, 1e-6) for a, b in zip(floats.data, both))
# The raw base64: the float32 bytes, little-endian.
raw = client.embeddings.with_raw_response.create(model=model, input=TEXTS[0], encoding_format="base64")
b64 = json.loads(raw.text)["data"][0]["embedding"]
assert isinstance(b64, str)
assert close(struct.unpack("<640f", base64.b64decode(b64)), both[0], 1e-6)

# Every form of input: alone or side by side, text or token ids.
one = client.embeddings.create(model=model, input=TEXTS[0]).data[0].embedding
assert close(one, both[0])
req = urllib.request.Request(base.rsplit("/v1", 1)[0] + "/tokenize", data=json.dumps(
    {"content": TEXTS[0], "add_special": True}).encode(), headers={"Content-Type": "application/json",
                                                                    "Authorization": "Bearer " + key})
ids = json.loads(urllib.request.urlopen(req).read())["tokens"]
assert close(client.embeddings.create(model=model, input=ids).data[0].embedding, one)
by_ids = client.embeddings.create(model=model, input=[ids, ids[:2]])
assert len(by_ids.data) == 2 and close(by_ids.data[0].embedding, one)
assert by_ids.usage.prompt_tokens == len(ids) + 2

# normalize (weir's extension): the vector before its scaling to unit length.
plain = client.embeddings.create(model=model, input=TEXTS[0], extra_body={"normalize": False}).data[0].embedding
assert abs(norm(plain) - 1) > 1e-3 and close([x / norm(plain) for x in plain], one, 1e-5)

# dimensions: the model's own size only.
assert len(client.embeddings.create(model=model, input=TEXTS[0], dimensions=640).data[0].embedding) == 640


def refused(field, **kwargs):
    try:
        client.embeddings.create(model=model, **kwargs)
    except openai.BadRequestError as e:
        assert e.status_code == 400 and field in str(e), e
        assert e.body.get("param") == field or field in e.body.get("message", ""), e.body
        return
    raise AssertionError(f"{kwargs} was taken")


refused("dimensions", input=TEXTS[0], dimensions=64)
refused("input", input={"text": "x"})
refused("input", input=[1, "a"])
refused("input", input="")
refused("input", input=[])
refused("input", input=[999999999])
refused("encoding_format", input=TEXTS[0], encoding_format="int8")
refused("frobnicate", input=TEXTS[0], extra_body={"frobnicate": 1})

bad = openai.OpenAI(base_url=base, api_key="wrong", max_retries=0)
try:
    bad.embeddings.create(model=model, input=TEXTS[0])
    raise AssertionError("a wrong key was taken")
except openai.AuthenticationError:
    pass

# Embeddings while chat answers stream: nobody's result changes.
questions = [f"Count to {i}." for i in range(4)]
alone = {q: client.chat.completions.create(model=model, messages=[{"role": "user", "content": q}], max_tokens=16,
                                           temperature=0).choices[0].message.content for q in questions}
together, vectors = {}, {}


def ask(q):
    out = []
    for chunk in client.chat.completions.create(model=model, messages=[{"role": "user", "content": q}], max_tokens=16,
                                                temperature=0, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            out.append(chunk.choices[0].delta.content)
    together[q] = "".join(out)


def embed(i):
    vectors[i] = client.embeddings.create(model=model, input=TEXTS + [f"Sentence number {i}."]).data


threads = [threading.Thread(target=ask, args=(q,)) for q in questions]
threads += [threading.Thread(target=embed, args=(i,)) for i in range(6)]
for t in threads:
    t.start()
for t in threads:
    t.join()
differ = [q for q in questions if together.get(q) != alone[q]]
assert len(differ) <= 1, [(q, alone[q], together.get(q)) for q in differ]  # (a near-tie may part, as 16 streams may)
for i in range(6):
    assert close(vectors[i][0].embedding, both[0]) and close(vectors[i][1].embedding, both[1]), i
print("ok", len(questions) - len(differ), "of", len(questions), "chat streams equal alone beside 6 embedding requests")
