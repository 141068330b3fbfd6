#!/usr/bin/env bash
# A/B comparison of two weir builds on a noisy machine: runs `weir bench`
# with the same arguments on each, alternating, ROUNDS times, and prints the
# median t/s of every (build, test, threads) over the rounds. Environment
# variables apply to both; per-build ones go in A_ENV / B_ENV ("K=V K2=V2"),
# per-build bench flags in A_ARGS / B_ARGS (the same binary twice compares
# two settings).
#   scripts/ab-bench.sh ROUNDS BIN_A BIN_B -- BENCH_ARGS...
# e.g. scripts/ab-bench.sh 7 build-base/weir build/weir -- -m M.gguf -p 0 -n 128 -t 2,4 -r 3
set -euo pipefail
[ $# -ge 4 ] && [ "$4" = "--" ] || { sed -n '2,9p' "$0" >&2; exit 2; }
rounds=$1 a=$2 b=$3
shift 4
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((i = 0; i < rounds; i++)); do
  for side in A B; do
    if [ $side = A ]; then bin=$a envs=${A_ENV:-} extra=${A_ARGS:-}; else bin=$b envs=${B_ENV:-} extra=${B_ARGS:-}; fi
    # csv columns end with ...,n_threads,...,avg_ts; take them by header name.
    # shellcheck disable=SC2086
    env $envs "$bin" bench "$@" $extra -o csv 2>/dev/null | python3 -c '
import csv, sys
side = sys.argv[1]
for r in csv.DictReader(sys.stdin):
    test = ("pp%s" % r["n_prompt"]) if r["n_prompt"] != "0" else ("tg%s" % r["n_gen"])
    if r.get("n_depth", "0") not in ("", "0"): test += "@d" + r["n_depth"]
    print(side, test, r["n_threads"], r["avg_ts"])' "$side" >>"$out"
  done
done
python3 - "$out" "$a" "$b" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    side, test, th, ts = line.split()
    rows[(test, int(th), side)].append(float(ts))
names = {"A": sys.argv[2], "B": sys.argv[3]}
print(f"{'test':>8} {'threads':>7} {'A median':>10} {'B median':>10} {'B/A':>6}   (A = {names['A']}, B = {names['B']})")
for (test, th) in sorted({(k[0], k[1]) for k in rows}):
    a, b = rows.get((test, th, "A"), []), rows.get((test, th, "B"), [])
    ma = statistics.median(a) if a else float("nan")
    mb = statistics.median(b) if b else float("nan")
    print(f"{test:>8} {th:>7} {ma:>10.2f} {mb:>10.2f} {mb / ma:>6.3f}   n={len(a)}/{len(b)} A {min(a):.1f}-{max(a):.1f} B {min(b):.1f}-{max(b):.1f}")
PY
