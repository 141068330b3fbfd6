#!/usr/bin/env bash
# The first build's CUDA choice (CMakeLists.txt, WEIR_CUDA=AUTO, the
# default): where nvidia-smi shows no GPU, one line says the CUDA backend is
# skipped and how to force it, and nothing CUDA is built; where it reports
# compute capability 8.6 (a stand-in nvidia-smi), the backend is built for
# sm_86 alone; WEIR_CUDA=ON builds it without a GPU.
set -euo pipefail
src=${1:?source folder}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
configure() {  # DIR ARGS...
  local dir=$1
  shift
  cmake -S "$src" -B "$tmp/$dir" -G Ninja -DWEIR_TESTS=OFF -DWEIR_UNITY=OFF "$@" >"$tmp/$dir.out" 2>"$tmp/$dir.err" ||
    fail "configure $dir: $(cat "$tmp/$dir.err")"
}
has_cuda() { grep -q "src/backend/cuda/ops_rows.cu" "$tmp/$1/build.ninja"; }

configure none -DWEIR_NVIDIA_SMI="$tmp/no-nvidia-smi"
[ "$(grep -c "no GPU found" "$tmp/none.err")" = 1 ] || fail "no GPU: expected the one line on stderr, got: $(cat "$tmp/none.err")"
grep -q "WEIR_CUDA=ON" "$tmp/none.err" || fail "no GPU: the line does not say how to force it"
has_cuda none && fail "no GPU: the CUDA backend is built"
echo "no GPU: $(grep "no GPU found" "$tmp/none.err")"

nvcc=/usr/local/cuda/bin/nvcc
command -v nvcc >/dev/null && nvcc=$(command -v nvcc)
if [ ! -x "$nvcc" ]; then
  echo "no nvcc here: the GPU cases are not checked"
  exit 0
fi
printf '#!/bin/sh\nprintf "8.6\\n8.6\\n"\n' >"$tmp/fake-nvidia-smi"
chmod +x "$tmp/fake-nvidia-smi"
configure gpu -DWEIR_NVIDIA_SMI="$tmp/fake-nvidia-smi"
grep -q "no GPU found" "$tmp/gpu.err" && fail "a GPU: still says none"
has_cuda gpu || fail "a GPU: the CUDA backend is not built"
archs=$(grep '^WEIR_CUDA_ARCHS:' "$tmp/gpu/CMakeCache.txt" | cut -d= -f2)
[ "$archs" = 86 ] || fail "a GPU of compute capability 8.6: archs '$archs', expected 86"
echo "a GPU (8.6): the CUDA backend for sm_$archs"

configure forced -DWEIR_NVIDIA_SMI="$tmp/no-nvidia-smi" -DWEIR_CUDA=ON
has_cuda forced || fail "WEIR_CUDA=ON: the CUDA backend is not built"
archs=$(grep '^WEIR_CUDA_ARCHS:' "$tmp/forced/CMakeCache.txt" | cut -d= -f2)
[ "$archs" = 90 ] || fail "WEIR_CUDA=ON without a GPU: archs '$archs', expected 90"
echo "WEIR_CUDA=ON, no GPU: the CUDA backend for sm_$archs"
