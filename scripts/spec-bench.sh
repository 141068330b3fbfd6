#!/usr/bin/env bash
# Speculative decoding on a real model (issue 48): n-gram lookup against
# plain decoding on texts whose answer repeats the prompt (a paragraph to
# rewrite, a text to quote, a code file to edit: scripts/spec-workloads/),
# greedy, through weir bench (--spec off,ngram --spec-file, median of -r
# repetitions); then free text, sampled (--temp 1.0, or WEIR_SPEC_FREE_TEMP; five seeds, weir run),
# where guesses are seldom kept and the adaptive rule must back off.
#
#   scripts/spec-bench.sh WEIR MODEL [flags for both: -ngl 99, -t 16 ...]
set -euo pipefail
weir=$1 model=$2
shift 2
dir=$(dirname "$0")/spec-workloads
reps=${WEIR_SPEC_REPS:-5}
for w in rewrite quotes code-edit; do
  echo "== $w (greedy, weir bench -p 0 -n 128 --spec off,ngram --spec-file $dir/$w.txt -r $reps $*)"
  "$weir" bench -m "$model" -p 0 -n 128 --spec off,ngram --spec-file "$dir/$w.txt" -r "$reps" "$@" 2>/dev/null |
    grep -E "^\| .*tg" || true
done
echo "== free text (sampled: weir run -f $dir/free.txt -n 256 --temp ${WEIR_SPEC_FREE_TEMP:-1.0} --seed 1..5 $*)"
for spec in off ngram; do
  rates=()
  for seed in 1 2 3 4 5; do
    line=$("$weir" run -m "$model" -f "$dir/free.txt" -n 256 --temp ${WEIR_SPEC_FREE_TEMP:-1.0} --seed "$seed" --spec "$spec" "$@" 2>&1 >/dev/null |
      grep -o 'generation [0-9]* tokens, [0-9.]* t/s' || true)
    rates+=("$(echo "$line" | awk '{print $4}')")
  done
  printf '%s %s\n' "$spec" "${rates[*]}"
done | python3 -c '
import statistics, sys
med = {}
for line in sys.stdin:
    name, *v = line.split()
    v = [float(x) for x in v if x]
    med[name] = statistics.median(v) if v else 0
    print(f"  --spec {name:5s} t/s by seed: {v}  median {med[name]:.1f}")
if med.get("off"):
    print("  ngram / off: %.3f" % (med.get("ngram", 0) / med["off"]))
'
