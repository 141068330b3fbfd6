#!/usr/bin/env python3
"""Load generator for an OpenAI-compatible server (weir serve, llama-server,
vLLM): N clients at once, each one streaming completion of a prompt of
exactly P tokens, G tokens out; reports the whole load's wall time, time to
first token and inter-token latency (P50 / P99), and tokens per second.

    scripts/load-test.py --url http://127.0.0.1:8080 --clients 64 \\
        --prompt-tokens 512 --max-tokens 256 [--shared-prefix 400] [--json out.json]

Prompts are token ids (/v1/completions takes a list of ids), so their length
is exact whatever the tokenizer: ids drawn at random from the ids of some
ordinary text (/tokenize), the first --shared-prefix of them the same for
every client (a shared system prompt). End tokens are ignored (ignore_eos),
so every client gets --max-tokens. Standard library only: it runs on any
machine with Python 3.
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse

TEXT = ("The river rose in the night and by morning the low fields were under water. Farmers moved their animals "
        "to the hill, children carried chairs and bread, and the old bridge held as it had held for a hundred years. "
        "In the town the bakers worked early, the market opened late, and everyone spoke of the weather, the harvest "
        "and the price of grain. Numbers like 12, 347 and 2026 appeared in the notices; so did names, places, dates.")


def post(url, path, body, headers=None, timeout=600):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **(headers or {})})
    return conn, conn.getresponse()


def token_pool(url, headers):
    conn, r = post(url, "/tokenize", {"content": TEXT * 4}, headers)
    ids = json.loads(r.read())["tokens"]
    conn.close()
    pool = sorted(set(ids))
    if len(pool) < 20:
        sys.exit("load-test: /tokenize gave too few distinct tokens")
    return pool


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def client(url, headers, prompt, args, seed, out):
    body = {"prompt": prompt, "max_tokens": args.max_tokens, "temperature": args.temperature, "stream": True,
            "ignore_eos": True, "seed": seed, "stream_options": {"include_usage": True}}
    if args.model:
        body["model"] = args.model
    t0 = time.perf_counter()
    times = []
    usage = None
    try:
        conn, r = post(url, "/v1/completions", body, headers)
        if r.status != 200:
            out.update(error=f"HTTP {r.status}: {r.read()[:200]!r}")
            return
        buf = b""
        while True:
            chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                if not event.startswith(b"data: "):
                    continue
                data = event[6:]
                if data == b"[DONE]":
                    continue
                j = json.loads(data)
                if "error" in j:
                    out.update(error=str(j["error"]))
                    return
                if j.get("usage"):
                    usage = j["usage"]
                if j.get("choices") and j["choices"][0].get("text"):
                    times.append(time.perf_counter())
        conn.close()
    except Exception as e:  # noqa: BLE001 (report, do not stop the others)
        out.update(error=repr(e))
        return
    out.update(start=t0, times=times, end=time.perf_counter(), usage=usage)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--shared-prefix", type=int, default=0, help="prompt tokens every client shares (a system prompt)")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--model", default="")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default="", help="also write the results here")
    args = ap.parse_args()
    if args.shared_prefix > args.prompt_tokens:
        sys.exit("load-test: --shared-prefix is longer than --prompt-tokens")
    headers = {"Authorization": "Bearer " + args.api_key} if args.api_key else {}
    rng = random.Random(args.seed)
    pool = token_pool(args.url, headers)
    shared = [rng.choice(pool) for _ in range(args.shared_prefix)]
    prompts = [shared + [rng.choice(pool) for _ in range(args.prompt_tokens - args.shared_prefix)]
               for _ in range(args.clients)]
    results = [{} for _ in range(args.clients)]
    threads = [threading.Thread(target=client, args=(args.url, headers, prompts[i], args, args.seed + i, results[i]))
               for i in range(args.clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    errors = [r["error"] for r in results if "error" in r]
    ok = [r for r in results if "error" not in r]
    ttft = [r["times"][0] - r["start"] for r in ok if r["times"]]
    itl = [b - a for r in ok for a, b in zip(r["times"], r["times"][1:])]
    generated = sum((r["usage"] or {}).get("completion_tokens", len(r["times"])) for r in ok)
    cached = sum(((r["usage"] or {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0) for r in ok)
    summary = {
        "clients": args.clients, "prompt_tokens": args.prompt_tokens, "max_tokens": args.max_tokens,
        "shared_prefix": args.shared_prefix, "temperature": args.temperature, "errors": len(errors),
        "wall_s": wall, "generated_tokens": generated, "cached_prompt_tokens": cached,
        "tokens_per_s": generated / wall if wall > 0 else 0.0,
        "ttft_p50_s": percentile(ttft, 50), "ttft_p99_s": percentile(ttft, 99),
        "itl_p50_ms": percentile(itl, 50) * 1e3, "itl_p99_ms": percentile(itl, 99) * 1e3,
    }
    print(f"load-test: {args.clients} clients x ({args.prompt_tokens} prompt, shared {args.shared_prefix}; "
          f"{args.max_tokens} out): wall {wall:.2f} s, {summary['tokens_per_s']:.0f} generated tokens/s, "
          f"TTFT P50 {summary['ttft_p50_s']:.3f} s P99 {summary['ttft_p99_s']:.3f} s, "
          f"ITL P50 {summary['itl_p50_ms']:.1f} ms P99 {summary['itl_p99_ms']:.1f} ms, "
          f"cached prompt tokens {cached}, errors {len(errors)}")
    for e in errors[:5]:
        print("load-test: error:", e, file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
