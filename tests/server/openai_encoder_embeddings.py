#!/usr/bin/env python3
"""weir serve on a BERT encoder (an embeddings-only model), driven by the
official openai package.

Usage: openai_encoder_embeddings.py BASE_URL MODEL.gguf
Checks the response's shape and unit length, the same vectors for an input
alone, beside others, and as token ids, every vector against the float64
numpy forward pass (tests/reference/bert_forward.py: pooled as the file's
<arch>.pooling_type says, normalized here), an input past the context
refused with 400, and chat and completions refused with 400 ("this model
only makes embeddings"). Prints "ok" and exits 0, or raises.
"""
import json
import math
import os
import sys
import urllib.request

import numpy as np
import openai
from gguf import GGUFReader

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import bert_forward  # noqa: E402

base, path = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=300)
model = client.models.list().data[0].id
TEXTS = ["hello world", "the cat sat on the mat, again and again!", "a"]


def close(a, b, tol=1e-4):
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) < tol


def tokenize(text):
    req = urllib.request.Request(base.rsplit("/v1", 1)[0] + "/tokenize",
                                 data=json.dumps({"content": text, "add_special": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req).read())["tokens"]


r = client.embeddings.create(model=model, input=TEXTS, encoding_format="float")
assert r.object == "list" and [d.index for d in r.data] == [0, 1, 2], r
E = len(r.data[0].embedding)
assert all(len(d.embedding) == E and abs(math.sqrt(sum(x * x for x in d.embedding)) - 1) < 1e-5 for d in r.data)
ids = [tokenize(t) for t in TEXTS]
assert all(i[0] == 101 and i[-1] == 102 for i in ids), ids  # [CLS] ... [SEP]
assert r.usage.prompt_tokens == sum(len(i) for i in ids), (r.usage, ids)

# Alone, by token ids: the same vectors.
for k, text in enumerate(TEXTS):
    assert close(client.embeddings.create(model=model, input=text, encoding_format="float").data[0].embedding,
                 r.data[k].embedding), text
assert close(client.embeddings.create(model=model, input=ids[1], encoding_format="float").data[0].embedding,
             r.data[1].embedding)

# Against float64 numpy, pooled as the file says (1 mean, 2 cls).
f = GGUFReader(path).fields
arch = f["general.architecture"].contents()
pooling = f[arch + ".pooling_type"].contents()
fwd = bert_forward.BertForward(path)
for k, i in enumerate(ids):
    h = fwd.hidden(i)
    v = h.mean(axis=0) if pooling == 1 else h[0]
    v = v / np.linalg.norm(v)
    got = np.array(r.data[k].embedding)
    # weir serve's CPU path rounds as llama.cpp's does (gelu by its fp16 table).
    assert float(got @ v) > 0.9999 and np.max(np.abs(got - v)) < 2e-3, (k, float(got @ v), np.max(np.abs(got - v)))


def refused(what, call, words):
    try:
        call()
    except openai.BadRequestError as e:
        assert e.status_code == 400 and words in str(e), e
        return
    raise AssertionError(what + " was taken")


ctx = int(f[arch + ".context_length"].contents())
refused("an input past the context", lambda: client.embeddings.create(model=model, input=[[200] * (ctx + 1)]), "input")
refused("chat", lambda: client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}]),
        "only makes embeddings")
refused("a completion", lambda: client.completions.create(model=model, prompt="hi", max_tokens=4),
        "only makes embeddings")
print("ok:", len(TEXTS), "embeddings of", E, "dims match float64 numpy;", arch, "refuses chat and completions")
