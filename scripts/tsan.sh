#!/usr/bin/env bash
# The thread pool and weir serve's connection gate under ThreadSanitizer:
# builds only their tests in build-tsan/ (-DWEIR_TSAN=ON) and runs them, the
# barrier stress test with 10^6 phases.
#   scripts/tsan.sh [PHASES]
# Exits non-zero on a failed test or any TSAN report.
set -euo pipefail
cd "$(dirname "$0")/.."

phases="${1:-1000000}"
build=build-tsan
target=weir_thread_pool_tsan
gate_target=weir_connection_gate_tsan
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

log="$build/tsan-build.log"
mkdir -p "$build"
if ! { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEIR_TSAN=ON \
         -DWEIR_TESTS=OFF "${launcher[@]}" &&
       cmake --build "$build" --target "$target" "$gate_target" -j "$(nproc)"; } >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "tsan: build of $target $gate_target failed (log: $log)" >&2
  exit 2
fi

# Runs a test binary under TSAN; exits on a failure or any report.
run_one() {
  local t="$1" run_log="$build/tsan-run-$1.log" rc
  set +e
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" "$build/$t" >"$run_log" 2>&1
  rc=$?
  set -e
  if [ "$rc" -ne 0 ] || grep -q 'ThreadSanitizer' "$run_log"; then
    grep -E -A 30 'WARNING: ThreadSanitizer|FAILED|Failure' "$run_log" | head -n 60 >&2 || true
    echo "tsan: $t FAILED (rc=$rc); log $run_log" >&2
    exit 1
  fi
  echo "tsan: $t ok: $(grep -E '^\[  PASSED' "$run_log") $(grep -o 'BarrierStress: .*' "$run_log" || true)"
}

WEIR_POOL_STRESS_PHASES="$phases" run_one "$target"
run_one "$gate_target"
