#!/usr/bin/env python3
"""N clients at once against weir serve, each completing a prompt that
repeats a pattern of token ids (so that --spec ngram finds guesses); prints
the aggregate generated tokens a second. Whether the guesses are kept is the
model's business: a random-weight model mostly does not follow the pattern.

    scripts/spec-serve-load.py PORT CLIENTS TEMPERATURE MAX_TOKENS [PERIOD]

docs/speculative.md has the runs it made (plain against --spec ngram).
"""
import http.client, json, random, sys, threading, time

port, n, temp, gen = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
period = int(sys.argv[5]) if len(sys.argv) > 5 else 8
rng = random.Random(5)
prompts = []
for i in range(n):
    pat = [rng.randrange(1000, 100000) for _ in range(period)]
    prompts.append((pat * (128 // period + 1))[:128])
out = [0] * n


def client(i):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", json.dumps({"prompt": prompts[i], "max_tokens": gen, "temperature": temp,
              "ignore_eos": True, "seed": i}), {"Content-Type": "application/json"})
    out[i] = json.loads(c.getresponse().read())["usage"]["completion_tokens"]


t = time.time()
threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
for x in threads:
    x.start()
for x in threads:
    x.join()
dt = time.time() - t
print(f"{n} clients repeating prompts, temp {temp}: {sum(out)} tokens in {dt:.2f} s, {sum(out)/dt:.0f} t/s")
