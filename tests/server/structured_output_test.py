#!/usr/bin/env python3
"""Structured output through weir serve, checked by jsonschema (the reference
validator) and the openai package (the reference client).

Random JSON schemas (objects of strings, integers, booleans, enums, arrays and
nested objects; some properties required; no others allowed) are sent with
random seeds at temperature 1, so the model's own choices are random too:
every answer must parse as JSON and validate against its schema. On a
synth model (random weights: only the grammar keeps its output in shape),
through /v1/completions' json_schema, and on Gemma 3 270M (when present)
through /v1/chat/completions' response_format. Then json_object, a GBNF
grammar, a grammar that does not compile (400 naming the field), and
logit_bias (a banned token never comes; the greedy answer changes).

  structured_output_test.py WEIR_BIN [GEMMA_GGUF]
"""
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import jsonschema
import openai

WEIR = sys.argv[1]
GEMMA = sys.argv[2] if len(sys.argv) > 2 else ""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, model, *extra):
        self.port = free_port()
        self.proc = subprocess.Popen([WEIR, "serve", "-m", model, "--port", str(self.port), "-np", "4", *extra],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1)
                break
            except Exception:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("weir serve did not start: " + self.proc.stderr.read())
                time.sleep(0.2)
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="none", max_retries=0,
                                    timeout=600)

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def random_schema(rng, depth=0):
    """An object schema whose every instance is short: bounded strings,
    integers and arrays, so any answer ends."""
    props = {}
    for i in range(rng.randint(1, 4)):
        name = rng.choice(["name", "id", "kind", "count", "ok", "tags", "item", "value", "size", "note"]) + str(i)
        kind = rng.choice(["string", "integer", "boolean", "enum", "array", "object" if depth < 1 else "integer"])
        if kind == "string":
            props[name] = {"type": "string", "maxLength": rng.randint(1, 12)}
            if rng.random() < 0.3:
                props[name]["minLength"] = 1
        elif kind == "integer":
            lo = rng.randint(-50, 50)
            props[name] = {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 1000)}
        elif kind == "boolean":
            props[name] = {"type": "boolean"}
        elif kind == "enum":
            props[name] = {"enum": rng.sample(["red", "green", "blue", "cat", "dog", "a b", "x\"y"], rng.randint(1, 4))}
        elif kind == "array":
            item = rng.choice([{"type": "integer", "minimum": 0, "maximum": 99}, {"type": "string", "maxLength": 5},
                               {"type": "boolean"}])
            props[name] = {"type": "array", "items": item, "maxItems": rng.randint(0, 3)}
        else:
            props[name] = random_schema(rng, depth + 1)
    required = [k for k in props if rng.random() < 0.6]
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def check(text, schema, what):
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise AssertionError(f"{what}: not JSON ({e}): {text!r}")
    jsonschema.validate(value, schema)
    return value


def synth_model(dir):
    path = os.path.join(dir, "tiny.gguf")
    subprocess.run([WEIR, "synth", "--arch", "llama", "--preset", "tiny", "--type", "Q8_0", "-o", path], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return path


def schemas_on(client, model, rng, n, chat):
    finished = 0
    for i in range(n):
        schema = random_schema(rng)
        seed = rng.randrange(1 << 30)
        if chat:
            r = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Describe something as JSON."}],
                response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": True}},
                temperature=1.0, seed=seed, max_tokens=400)
            text, reason = r.choices[0].message.content, r.choices[0].finish_reason
        else:
            r = client.completions.create(model=model, prompt="JSON:", extra_body={"json_schema": schema},
                                          temperature=1.0, seed=seed, max_tokens=400)
            text, reason = r.choices[0].text, r.choices[0].finish_reason
        assert reason == "stop", (i, reason, schema, text)
        check(text, schema, f"schema {i} seed {seed}")
        finished += 1
    return finished


def main():
    rng = random.Random(46)
    with tempfile.TemporaryDirectory() as tmp:
        srv = Server(synth_model(tmp))
        try:
            c = srv.client
            model = c.models.list().data[0].id
            n = schemas_on(c, model, rng, 40, chat=False)
            # Any object; a GBNF grammar; one that does not compile.
            for seed in range(5):
                r = c.completions.create(model=model, prompt="x", extra_body={"json_schema": {"type": "object"}},
                                         temperature=1.0, seed=seed, max_tokens=300)
                if r.choices[0].finish_reason == "stop":
                    assert isinstance(json.loads(r.choices[0].text), dict), r.choices[0].text
            for seed in range(5):
                r = c.completions.create(model=model, prompt="x", extra_body={"grammar": 'root ::= ("yes" | "no") " " [0-9]{1,3}'},
                                         temperature=1.0, seed=seed, max_tokens=20)
                t = r.choices[0].text
                assert r.choices[0].finish_reason == "stop" and t.split(" ")[0] in ("yes", "no"), t
                assert 1 <= len(t.split(" ")[1]) <= 3 and t.split(" ")[1].isdigit(), t
            try:
                c.completions.create(model=model, prompt="x", extra_body={"grammar": "root ::= "}, max_tokens=5)
                raise AssertionError("a grammar that does not compile was taken")
            except openai.BadRequestError as e:
                assert e.body["param"] == "grammar", e.body
            # logit_bias: -100 bans the greedy first token: it leaves the
            # greedy answer and every sampled answer's tokens.
            def post(path, body):
                req = urllib.request.Request(f"http://127.0.0.1:{srv.port}{path}", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
                return json.loads(urllib.request.urlopen(req).read())
            for prompt in ["a b c", "x", "hello", "the", "1 2", "z z"]:  # one whose greedy token is whole text
                first = c.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0).choices[0].text
                if first and "\ufffd" not in first:
                    break
            # Every id that reads as that text (the synth vocabulary has 512).
            ids = [i for i in range(512) if post("/detokenize", {"tokens": [i]})["content"] == first]
            assert ids, first
            bias = {str(i): -100 for i in ids}
            other = c.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0, logit_bias=bias)
            assert other.choices[0].text != first, (first, other.choices[0].text)
            for seed in range(4):
                r = c.completions.create(model=model, prompt=prompt, max_tokens=30, temperature=1.5, seed=seed,
                                         logit_bias=bias, logprobs=1)
                assert first not in r.choices[0].logprobs.tokens, (first, r.choices[0].logprobs.tokens)
            print(f"synth: {n} random schemas validated", flush=True)
        finally:
            srv.close()

    if GEMMA and os.path.exists(GEMMA):
        srv = Server(GEMMA)
        try:
            c = srv.client
            model = c.models.list().data[0].id
            n = schemas_on(c, model, rng, 12, chat=True)
            r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "A JSON object about Paris."}],
                                          response_format={"type": "json_object"}, temperature=0, max_tokens=200)
            if r.choices[0].finish_reason == "stop":
                assert isinstance(json.loads(r.choices[0].message.content), dict), r.choices[0].message.content
            print(f"gemma: {n} random schemas validated", flush=True)
        finally:
            srv.close()
    print("ok")


if __name__ == "__main__":
    main()
