#!/usr/bin/env bash
# Fuzz for SECONDS each (default 60) with libFuzzer + ASan/UBSan:
#   gguf_reader_fuzz     the GGUF reader (seeds: tests/data/gguf-valid, -broken)
#   server_request_fuzz  weir serve's request bodies and chat templates
#                        (seeds: tests/data/fuzz-server)
#   scripts/fuzz.sh [SECONDS] [TARGET]
# Builds build-fuzz/ with clang (-DWEIR_FUZZ=ON), seeds a scratch corpus a
# target (build-fuzz/corpus-TARGET), runs it, prints one summary line a
# target and exits non-zero on any crash, sanitizer report, leak, timeout or
# out-of-memory. Crashing inputs are kept in build-fuzz/artifacts/;
# reproduce one with
#   build-fuzz/fuzz/TARGET build-fuzz/artifacts/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-60}"
build=build-fuzz
targets=(gguf_reader_fuzz server_request_fuzz)
[ -n "${2:-}" ] && targets=("$2")

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
       cmake --build "$build" --target "${targets[@]}" -j "$(nproc)"; } >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "fuzz: build of ${targets[*]} failed (log: $log)" >&2
  exit 2
fi

fuzz_one() {
target="$1"
case "$target" in
  gguf_reader_fuzz) seed_dirs=(tests/data/gguf-valid tests/data/gguf-broken); dict=fuzz/gguf.dict; max_len=65536 ;;
  server_request_fuzz) seed_dirs=(tests/data/fuzz-server); dict=fuzz/server.dict; max_len=65536 ;;
  *) echo "fuzz: unknown target $target" >&2; exit 2 ;;
esac

corpus="$build/corpus-$target"
artifacts="$build/artifacts"
mkdir -p "$corpus" "$artifacts"
for d in "${seed_dirs[@]}"; do cp -f "$d"/*.case "$corpus"/; done
seeds=$(find "$corpus" -type f | wc -l)

run_log="$build/fuzz-run-$target.log"
set +e
"$build/fuzz/$target" "$corpus" \
  -dict="$dict" \
  -max_total_time="$secs" -rss_limit_mb=2048 -max_len="$max_len" -timeout=10 \
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
}

for t in "${targets[@]}"; do fuzz_one "$t"; done
