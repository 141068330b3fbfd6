#!/usr/bin/env bash
# Fuzz the GGUF reader for SECONDS (default 60) with libFuzzer + ASan/UBSan.
#   scripts/fuzz.sh [SECONDS]
# Builds build-fuzz/ with clang (-DWEIR_FUZZ=ON), seeds a scratch corpus
# (build-fuzz/corpus) from tests/data/gguf-valid and tests/data/gguf-broken,
# runs gguf_reader_fuzz, prints one summary line and exits non-zero on any
# crash, sanitizer report, leak, timeout or out-of-memory. Crashing inputs are
# kept in build-fuzz/artifacts/; reproduce one with
#   build-fuzz/fuzz/gguf_reader_fuzz build-fuzz/artifacts/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-60}"
build=build-fuzz
target=gguf_reader_fuzz

cc="${CC:-clang}"; cxx="${CXX:-clang++}"
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz: $cxx not found (scripts/setup.sh installs clang and libclang-rt-14-dev)" >&2
  exit 2
fi
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

log="$build/fuzz-build.log"
mkdir -p "$build"
if ! { CC="$cc" CXX="$cxx" cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
         -DWEIR_FUZZ=ON -DWEIR_TESTS=OFF "${launcher[@]}" &&
       cmake --build "$build" --target "$target" -j "$(nproc)"; } >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "fuzz: build of $target failed (log: $log)" >&2
  exit 2
fi

corpus="$build/corpus"
artifacts="$build/artifacts"
mkdir -p "$corpus" "$artifacts"
cp -f tests/data/gguf-valid/*.case tests/data/gguf-broken/*.case "$corpus"/
seeds=$(find "$corpus" -type f | wc -l)

run_log="$build/fuzz-run.log"
set +e
"$build/fuzz/$target" "$corpus" \
  -dict=fuzz/gguf.dict \
  -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 -timeout=10 \
  -artifact_prefix="$artifacts/" -print_final_stats=1 >"$run_log" 2>&1
rc=$?
set -e

execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$run_log" | tail -n1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$run_log" | tail -n1)
cov=$(grep -oE 'cov: [0-9]+' "$run_log" | tail -n1 | cut -d' ' -f2)
files=$(find "$corpus" -type f | wc -l)
if [ "$rc" -ne 0 ] || grep -qE '^==[0-9]+==ERROR|runtime error:|deadly signal' "$run_log"; then
  grep -E 'ERROR|runtime error|SUMMARY|Test unit written' "$run_log" | head -n 20 >&2 || true
  echo "fuzz: $target FAILED after ${execs:-?} execs (rc=$rc); inputs in $artifacts/, log $run_log" >&2
  exit 1
fi
echo "fuzz: $target ok: ${secs}s, ${execs:-?} execs (${rate:-?}/s), coverage ${cov:-?} edges, corpus $seeds -> $files inputs, 0 crashes"
