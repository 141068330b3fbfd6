#!/usr/bin/env bash
# The CUDA backend on a GPU host that has only the CUDA toolkit and no
# network: configure, build, run the GPU tests, compare GPU and CPU on
# random-weight models of real shapes, run compute-sanitizer, and print the
# benchmark table.
#
#   scripts/gpu-check.sh --pack           on a machine with the dependencies
#                                         (scripts/setup.sh): copies what a bare
#                                         host lacks into .gpu-carry/ (git-ignored;
#                                         PCRE2's header and static library,
#                                         GoogleTest's sources, the Qwen2 vocab)
#   scripts/gpu-check.sh --pack-bins      on that machine too: builds weir and the GPU
#                                         tests for sm_90 (Hopper) into build-gpu-pack/
#                                         and copies them (and PCRE2's shared library)
#                                         into .gpu-carry-bin/ (git-ignored), so that a
#                                         call carrying it spends no device time on the
#                                         build (a clean build there takes minutes)
#   scripts/gpu-check.sh [STAGE...]       on the GPU host, with .gpu-carry/ beside
#                                         the sources. Stages, in order, default all:
#     build     cmake + build into build-gpu/ (WEIR_CUDA_ARCHS, default: this GPU's);
#               with .gpu-carry-bin/ there, its binaries instead (WEIR_GPU_BUILD=1
#               builds anyway)
#     test      the GPU tests (tests/cuda: every op vs the CPU, tiny models)
#     models    writes the benchmark models with weir synth into $WEIR_GPU_MODELS
#               (default /tmp/weir-gpu-models; kept if there)
#     compare   GPU vs CPU logits and greedy tokens on those models
#     sanitize  compute-sanitizer memcheck on a short generation
#     ppl       weir perplexity on the GPU and on the CPU, the first model
#               (a random model's perplexity means nothing; the two must agree)
#     bench     weir bench -ngl 99 on the models (median of 5: -r 5)
#     partial   one model across the CPU and the GPU: the partial-offload tests,
#               the models split at -ngl WEIR_GPU_SPLIT_NGL (16) against the CPU,
#               weir bench -ngl 16,0 with every core (not run by default)
#     load      model loads: the host's ceilings (scripts/load-ceilings.py: page
#               cache read on 1 and all threads, O_DIRECT, pinned H2D), then
#               weir run -ngl 99 -n 1 on each selected model, warm (3 times)
#               and cold (the file dropped from the page cache), buffered and
#               --direct-io: its load line and the time to the first token
#               (not run by default)
#     multi     several GPUs (the 2- and 4-GPU kinds): topology, the all-reduce
#               latency table (NVLink kernel vs NCCL), the tensor-parallel tests,
#               TP vs one GPU on the selected models (KL, greedy), then weir bench
#               -ngl 99 on one GPU, --tp 2 (and 4), -sm layer (not run by default)
#     moe       mixtures of experts (WEIR_GPU_BENCH_MODELS=qwen3-30b-a3b-q4km): the
#               expert ops vs the CPU, greedy tokens GPU vs CPU, weir bench -ngl 99,
#               -ngl 99 --cpu-moe -nopo and -ngl 0 with every core (WEIR_GPU_MOE_FLAGS: those
#               flag sets, ';'-separated) (not run by default)
#     mpi       the same as processes: mpirun -np 2 weir run --tp 2 (text against
#               two threads' run) and weir bench --tp 2, with the host's mpirun and a
#               weir linked against MPI (WEIR_PACK_MPI=1 --pack-bins) (not run by default)
#     cpu       the CPU alone (CUDA_VISIBLE_DEVICES=), every core (WEIR_CPU_THREADS): its
#               kernels (AVX-512 VNNI, AMX, repacked types), the CPU backend tests, the
#               repack microbench, weir bench -ngl 0 -p 512 -n 128 on the models
#               (WEIR_GPU_CPU_AB: ';'-separated environments to run it with too, e.g.
#               "WEIR_CPU_AMX=0;WEIR_CPU_REPACK=0 WEIR_CPU_AMX=0"), a per-node profile of
#               the first or WEIR_GPU_PROFILE_MODEL (WEIR_CPU_PROFILE=1) (not run by default)
#     depth     tg128 at depth 0 and WEIR_GPU_DEPTH (4096) on the selected models, and
#               the ratio (issue 28: within 10%), for each KV cache type in
#               WEIR_GPU_DEPTH_KV (default "f16 q8_0") (not run by default)
#     serve     weir serve under load (scripts/load-test.py) on WEIR_GPU_SERVE_MODEL
#               (default qwen2.5-7b-q4km): weir bench's pp512 and -np N decode
#               rates (N = WEIR_GPU_SERVE_CLIENTS, default 64), then N streaming
#               clients, 512-token prompts, 256 tokens out, temperature 0.7:
#               unshared prompts, a shared 400-token prefix, and the shared
#               prefix with the prefix cache off; 3 rounds each; the load's
#               wall time against what the bench rates predict; WEIR_GPU_SERVE_FLAGS:
#               more serve flags (e.g. "-ub 1024 -b 1024"), WEIR_GPU_SERVE_ROUNDS: which
#               (default "plain shared shared-nocache"; "spec": plain's load with
#               --spec ngram); each round's steps logged
#               (--log-steps) and summed up (not run by default)
#     spec      speculative decoding (issue 48): the speculative tests on the GPU
#               (Speculative*, Truncate*, every backend), then on WEIR_GPU_SPEC_TARGET
#               (default llama-8b-q4km) weir bench -ngl 99 tg128 --spec off,draft with
#               WEIR_GPU_SPEC_DRAFT (default llama-1b-q4_0: a synth 1B of the same
#               vocabulary) as -md, and --verify-curve 16; the draft's own tg128; and,
#               when the realmodel stage has joined the real model, scripts/spec-bench.sh
#               on it, -ngl 99 and the CPU alone (every core) (not run by default)
#     grammar   constrained decoding's cost: weir bench tg128 x64 under no grammar,
#               any JSON object and a JSON schema (tests/data/bench-person-schema.json)
#               on the GPU and, CUDA_VISIBLE_DEVICES=, the CPU (tg16 x64, every core),
#               on the selected models; the allow_tokens op's tests (not run by default)
#     profile   kernel time per kind of node (WEIR_CUDA_PROFILE=1) for tg and pp
#               on each model (not run by default)
#     counters  Nsight Compute (ncu) over one decoded token of each selected
#               model: the decode kernels' durations, DRAM and L1 throughput,
#               registers, spills, occupancy and top stall, one row a kernel
#               and launch shape (scripts/ncu-table.py); the full reports in
#               the logs (not run by default)
#     base      builds the sources before a change into /tmp/weir-base (in the
#               background, beside the build stage): this tree with the patch
#               WEIR_GPU_BASE_PATCH (default ab.patch: `git diff BASE > ab.patch`
#               before the call) taken back out (not run by default)
#     ab        interleaved rounds (WEIR_GPU_AB_ROUNDS, default 3; median of 5
#               each): A is the base build when there is one, or the binary
#               WEIR_GPU_AB_BASE_BIN (carried, xz or not), else this build; B is
#               this build with the environment in WEIR_GPU_AB_ENV (e.g.
#               "WEIR_CUDA_PDL=0"); WEIR_GPU_AB_ARGS: the bench flags of both
#               (default "-p 0 -n 128"; e.g. "-p 512 -n 128 -d 4096");
#               WEIR_GPU_AB_SAME=1 also checks that A and B plan the same launches
#               (WEIR_CUDA_PLAN_DUMP) and write the same greedy text;
#               scripts/ab-bench.sh prints the medians (not run by default)
#     kvread    what reading a layer's K and V costs apart from attention
#               (scripts/kv-read-probe.cu, built with this host's nvcc: from
#               DRAM, from L2, prefetched on a second stream while weights are
#               read), timed in CUDA graphs (not run by default)
#     realmodel the real model, carried in parts (below): keeps this call's parts in
#               /tmp/weir-real-model; once all are there, joins and checks them and
#               runs the CudaModel.RealGemma3* tests (GPU vs CPU, vs llama.cpp's
#               reference logits and tokens, vs the float64 forward pass) and
#               CudaModel.RepeatsBitForBit
# Environment: WEIR_GPU_BENCH_MODELS (space-separated names from the list
# below) narrows the models (default: all but the big ones: 70B and the
# mixtures of experts, taken only when named); OUT, when set, receives the logs.
#
# The real model (253 MB) does not fit one call's 64 MiB of carried files:
#   scripts/gpu-check.sh --pack-model [FILE]   splits FILE (default: the one
#       scripts/fetch-model.sh fetched) into .gpu-carry-model/part.NN of 48 MiB
#       and a manifest; then one call a part, back to back so that the machine
#       stays warm, each carrying .gpu-carry-model/manifest and its part (the
#       first also .gpu-carry), each running the realmodel stage.
set -euo pipefail
cd "$(dirname "$0")/.."
carry=.gpu-carry

model_carry=.gpu-carry-model
if [ "${1:-}" = "--pack-model" ]; then
  src=${2:-${WEIR_MODELS:-$HOME/.cache/weir}/gemma-3-270m-q4_k_m.gguf}
  [ -f "$src" ] || { echo "no $src (scripts/fetch-model.sh fetches it)"; exit 1; }
  rm -rf "$model_carry" && mkdir -p "$model_carry"
  # WEIR_MODEL_PARTS=N: N equal parts instead (5 of the 253 MB file: 48.3 MiB
  # each, which with the ~6 MB working tree stays under a call's 64 MiB).
  if [ -n "${WEIR_MODEL_PARTS:-}" ]; then
    split -n "$WEIR_MODEL_PARTS" -d -a 2 "$src" "$model_carry/part."
  else
    split -b 48M -d -a 2 "$src" "$model_carry/part."
  fi
  n=$(find "$model_carry" -name 'part.*' | wc -l)
  printf '%s %s %s\n' "$(basename "$src")" "$n" "$(sha256sum "$src" | cut -d' ' -f1)" >"$model_carry/manifest"
  cat "$model_carry/manifest"
  ls "$model_carry"
  exit 0
fi

bin_carry=.gpu-carry-bin
if [ "${1:-}" = "--pack-bins" ]; then
  # Without MPI unless WEIR_PACK_MPI=1 (the GPU hosts have OpenMPI 4.1.6's
  # mpirun and libmpi.so.40, which a binary linked against Debian's 4.1
  # runs with: `mpirun --allow-run-as-root -np 2 -x LD_LIBRARY_PATH
  # build-gpu/weir bench --tp 2 -ngl 99 ...`).
  mpi=ON; [ "${WEIR_PACK_MPI:-0}" = 1 ] && mpi=OFF
  cmake -S . -B build-gpu-pack -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEIR_CUDA=ON -DWEIR_CUDA_ARCHS=90 -DWEIR_NO_MPI=$mpi >/dev/null
  # WEIR_PACK_TARGETS: what to carry (the carry holds 64 MiB: about three).
  targets=${WEIR_PACK_TARGETS:-weir weir_cuda_tests weir_backends_tests}
  # shellcheck disable=SC2086
  cmake --build build-gpu-pack -j "$(nproc)" --target $targets
  rm -rf "$bin_carry" && mkdir -p "$bin_carry"
  for t in $targets; do
    for d in build-gpu-pack build-gpu-pack/tests build-gpu-pack/microbench; do
      [ -x "$d/$t" ] && cp "$d/$t" "$bin_carry/" && break
    done
  done
  strip "$bin_carry"/weir*  # the carry holds 64 MiB in all
  xz -T0 -6 "$bin_carry"/weir*  # and the three binaries take ~70 MB stripped, ~20 MB in xz
  # Shared libraries a bare host may lack (PCRE2; cpp-httplib and its
  # Brotli for weir serve), beside the binaries.
  for lib in $(ldd build-gpu-pack/weir | awk '/(pcre2|httplib|brotli)/ {print $3}'); do cp "$lib" "$bin_carry/"; done
  git rev-parse HEAD >"$bin_carry/commit"
  git diff --stat HEAD >>"$bin_carry/commit"
  du -sh "$bin_carry"
  exit 0
fi

if [ "${1:-}" = "--pack" ]; then
  mkdir -p "$carry/include" "$carry/lib"
  cp /usr/include/pcre2.h "$carry/include/"
  cp /usr/lib/x86_64-linux-gnu/libpcre2-8.a "$carry/lib/"
  rm -rf "$carry/googletest"
  cp -r /usr/src/googletest "$carry/googletest"
  vocab=../shared/ref/qwen2-vocab-deepseek-r1.gguf
  [ -f "$vocab" ] && cp "$vocab" "$carry/"
  [ -f ../shared/ref/ppl-text.txt ] && cp ../shared/ref/ppl-text.txt "$carry/"
  mkdir -p "$carry/ref" && cp ../shared/ref/gemma3-*.jsonl "$carry/ref/"  # llama.cpp's reference logits
  # XGrammar's static library and headers (scripts/install-xgrammar.sh), for the build stage.
  xg="${WEIR_XGRAMMAR_DIR:-$HOME/.cache/weir/deps/xgrammar-0.2.8}"
  rm -rf "$carry/xgrammar" && mkdir -p "$carry/xgrammar" && cp -r "$xg/include" "$xg/lib" "$carry/xgrammar/"
  # The gguf package (pure Python) for the tiny models the tests write, and
  # PyYAML, which gguf imports (its pure-Python part: the C extension is
  # built for this host's Python).
  rm -rf "$carry/python" && mkdir -p "$carry/python"
  cp -r "$(python3 -c 'import gguf, os; print(os.path.dirname(gguf.__file__))')" "$carry/python/"
  cp -r "$(python3 -c 'import yaml, os; print(os.path.dirname(yaml.__file__))')" "$carry/python/"
  find "$carry/python/yaml" -name '*.so' -delete
  du -sh "$carry"
  exit 0
fi

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(build test models compare sanitize bench)
has() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
log_dir=${OUT:-/tmp/weir-gpu-logs}
mkdir -p "$log_dir"
build=build-gpu
models=${WEIR_GPU_MODELS:-/tmp/weir-gpu-models}
export PATH=/usr/local/cuda/bin:$PATH
# The gguf package where the host lacks it (carried by --pack).
if [ -d "$carry/python/gguf" ] && ! python3 -c 'import gguf' 2>/dev/null; then
  export PYTHONPATH=$PWD/$carry/python${PYTHONPATH:+:$PYTHONPATH}
fi
# llama.cpp's reference data: beside the checkout where there is one, else carried.
[ -d ../shared/ref ] || export WEIR_REF_DIR=$PWD/$carry/ref

step() { printf '\n=== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }
failed=()  # stages that failed; the others still run, the exit status says
run_logged() {  # NAME LOG CMD...: runs CMD, its output to LOG and the end of it to the terminal
  local name=$1 log=$2
  shift 2
  if "$@" >"$log" 2>&1; then tail -"${TAIL:-25}" "$log"; else tail -"${TAIL:-60}" "$log"; failed+=("$name"); fi
}

base_dir=/tmp/weir-base
base_pid=
if has base; then
  patch_file=$(realpath "${WEIR_GPU_BASE_PATCH:-ab.patch}")
  [ -f "$patch_file" ] || { echo "base: no $patch_file (git diff BASE > $patch_file)"; exit 1; }
  rm -rf "$base_dir" && mkdir -p "$base_dir"
  tar --exclude="./build*" --exclude=./.git -cf - . | tar -xf - -C "$base_dir"
  (cd "$base_dir" && patch -s -R -p1 <"$patch_file") ||
    { echo "base: $patch_file does not come back out of this tree"; exit 1; }
  (
    cd "$base_dir"
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEIR_CUDA=ON -DWEIR_CUDA_ARCHS="${WEIR_CUDA_ARCHS:-90}" \
      -DWEIR_DEPS_DIR="$base_dir/$carry" && cmake --build build -j "$(nproc)" --target weir
  ) >"$log_dir/base-build.log" 2>&1 &
  base_pid=$!
fi

if has build && [ -e "$bin_carry/weir" -o -e "$bin_carry/weir.xz" ] && [ "${WEIR_GPU_BUILD:-0}" != 1 ]; then
  step "build (carried binaries)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  head -1 "$bin_carry/commit" 2>/dev/null || true
  mkdir -p "$build/tests" "$build/microbench"
  # Each carried binary (xz-compressed by --pack-bins, or as it is) to its place.
  put() {
    local src="$1" dst="$2"
    if [ "${src%.xz}" != "$src" ]; then xz -dc "$src" >"$dst"; else cp "$src" "$dst"; fi
    chmod +x "$dst"
  }
  for f in "$bin_carry"/weir "$bin_carry"/weir.xz; do [ -f "$f" ] && put "$f" "$build/weir"; done
  for t in "$bin_carry"/weir_*tests "$bin_carry"/weir_*tests.xz; do [ -f "$t" ] && put "$t" "$build/tests/$(basename "${t%.xz}")"; done
  for t in "$bin_carry"/weir_microbench* ; do [ -f "$t" ] && put "$t" "$build/microbench/$(basename "${t%.xz}")"; done
  # Libraries the host lacks (carried beside the binaries).
  if ldd "$build/weir" | grep -q "not found"; then export LD_LIBRARY_PATH=$PWD/$bin_carry${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; fi
  "$build/weir" --help >/dev/null || { echo "carried weir does not start here"; exit 1; }
  # The tests' compiled-in paths are the packing machine's: these instead.
  export WEIR_TEST_TMP=/tmp/weir-tests WEIR_TEST_DATA=$PWD/tests/data WEIR_REF_SCRIPTS=$PWD/tests/reference \
    WEIR_BIN=$PWD/$build/weir WEIR_PYTHON=python3
  export WEIR_REF_DIR=${WEIR_REF_DIR:-$PWD/$carry/ref}
elif has build; then
  step build
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  archs=${WEIR_CUDA_ARCHS:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)}
  [ -n "$archs" ] || archs="80;90"
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DWEIR_CUDA=ON -DWEIR_CUDA_ARCHS="$archs" \
    -DWEIR_DEPS_DIR="$PWD/$carry" >"$log_dir/configure.log" 2>&1 || { tail -30 "$log_dir/configure.log"; exit 1; }
  cmake --build "$build" -j "$(nproc)" --target weir weir_cuda_tests weir_backends_tests >"$log_dir/build.log" 2>&1 ||
    { grep -E -A5 'error|Error' "$log_dir/build.log" | head -60; exit 1; }
  echo "built with archs $archs"
fi

if [ -n "$base_pid" ]; then
  step "base build"
  if wait "$base_pid"; then echo "base built: $base_dir/build/weir"; else tail -30 "$log_dir/base-build.log"; failed+=(base); fi
fi

if has test; then
  step "GPU tests"
  # A kernel that never ends (a barrier phase that never completes) fails
  # the stage rather than the whole call.
  TAIL=40 run_logged test "$log_dir/cuda-tests.log" timeout "${WEIR_GPU_TEST_TIMEOUT:-900}" \
    "$build/tests/weir_cuda_tests" --gtest_brief=1
  # The suite every backend runs (ops against float64, tiny models against
  # the numpy forward pass): its CUDA cases.
  if [ -x "$build/tests/weir_backends_tests" ]; then
    TAIL=10 run_logged test "$log_dir/backends-tests.log" timeout 300 \
      "$build/tests/weir_backends_tests" --gtest_brief=1 --gtest_filter='*cuda*'
  fi

  # (The decode products' other kernels, staged everywhere and never, are
  # run by the tests themselves: CudaOptions::staged per backend instance.)
fi

# name:preset:arch:type[:vocab]
all_models=(
  "gemma3-270m-q4km:gemma3-270m:gemma3:Q4_K_M"
  "llama-1b-q4_0:llama-3.2-1b:llama:Q4_0"
  "llama-8b-q4km:llama-3.1-8b:llama:Q4_K_M"
  "llama-8b-q4_0:llama-3.1-8b:llama:Q4_0"
  "llama-8b-q8_0:llama-3.1-8b:llama:Q8_0"
  "llama-8b-f16:llama-3.1-8b:llama:F16"
  "llama-1b-f16:llama-3.2-1b:llama:F16"
  "qwen2.5-7b-q4km:qwen2.5-7b:qwen2:Q4_K_M:$carry/qwen2-vocab-deepseek-r1.gguf"
  "llama-70b-q4km:llama-3.1-70b:llama:Q4_K_M"
  "qwen3-30b-a3b-q4km:qwen3-30b-a3b:qwen3moe:Q4_K_M"
  "mixtral-8x7b-q4km:mixtral-8x7b:llama:Q4_K_M"
  "llama-8b-iq4xs:llama-3.1-8b:llama:IQ4_XS"
  "phi3-mini-q4km:phi-3-mini:phi3:Q4_K_M"
  "gemma2-9b-q4km:gemma-2-9b:gemma2:Q4_K_M"
  "gpt-oss-20b-mxfp4:gpt-oss-20b:gpt-oss:MXFP4_MOE"
)
want=${WEIR_GPU_BENCH_MODELS:-}
selected=()
for m in "${all_models[@]}"; do
  name=${m%%:*}
  # The big ones (70B, the mixtures of experts: 18-40 GB each; together
  # more than the hosts' disk) only when named.
  # The issue-47 models (IQ4_XS, phi3, gemma2, gpt-oss) likewise.
  case $name in llama-70b-* | qwen3-30b-* | mixtral-* | *-iq4xs | phi3-* | gemma2-* | gpt-oss-*) big=1 ;; *) big=0 ;; esac
  if { [ -z "$want" ] && [ $big = 0 ]; } || [[ " $want " == *" $name "* ]]; then selected+=("$m"); fi
done
path_of() { echo "$models/$1.gguf"; }

if has models; then
  step "models (weir synth)"
  mkdir -p "$models"
  for m in "${selected[@]}"; do
    IFS=: read -r name preset arch type vocab <<<"$m"
    p=$(path_of "$name")
    [ -f "$p" ] && continue
    args=(synth --arch "$arch" --preset "$preset" --type "$type" -o "$p")
    [ -n "${vocab:-}" ] && [ -f "$vocab" ] && args+=(--vocab "$vocab")
    "$build/weir" "${args[@]}" 2>&1 | tail -1
  done
fi

if has compare; then
  step "GPU vs CPU on the models"
  list=()
  for m in "${selected[@]}"; do
    name=${m%%:*}
    case $name in *-f16|*-q8_0|*-q4_0) [[ $name == llama-8b* ]] && continue ;; esac  # one 8B is enough
    list+=("$(path_of "$name")")
  done
  WEIR_GPU_COMPARE_MODELS=$(IFS=:; echo "${list[*]}")
  export WEIR_GPU_COMPARE_MODELS
  run_logged compare "$log_dir/compare.log" "$build/tests/weir_cuda_tests" --gtest_filter='CudaModel.ListedModels'

fi

if has partial; then
  # One model across the CPU and the GPU (the scheduler): the tiny models of
  # every architecture and the listed models split at -ngl 16 against the
  # CPU, then weir bench at -ngl 16 (and 0) with all the host's cores.
  step "partial offload (CPU + GPU)"
  TAIL=20 run_logged partial "$log_dir/partial-tests.log" "$build/tests/weir_cuda_tests" \
    --gtest_filter='CudaModel.Partial*'
  list=()
  for m in "${selected[@]}"; do list+=("$(path_of "${m%%:*}")"); done
  WEIR_GPU_COMPARE_MODELS=$(IFS=:; echo "${list[*]}") WEIR_GPU_COMPARE_SPLIT=${WEIR_GPU_SPLIT_NGL:-16} \
    TAIL=20 run_logged partial "$log_dir/partial-compare.log" "$build/tests/weir_cuda_tests" \
    --gtest_filter='CudaModel.ListedModels'
  args=()
  for m in "${selected[@]}"; do args+=(-m "$(path_of "${m%%:*}")"); done
  TAIL=20 run_logged partial "$log_dir/partial-bench.log" "$build/weir" bench "${args[@]}" \
    -ngl "${WEIR_GPU_SPLIT_NGL:-16},0" -t "$(nproc)" -p 512 -n 128 -r "${WEIR_GPU_BENCH_REPS:-3}"
fi

if has load; then
  step "model loads"
  for m in "${selected[@]}"; do
    p=$(path_of "${m%%:*}")
    [ -f "$p" ] || continue
    python3 scripts/load-ceilings.py "$p" --threads "1,$(nproc)" 2>&1 | sed "s|^|${m%%:*}: |"
    first_token() {  # ARGS...: the load line and the whole run's wall time
      local t0 t1
      t0=$(date +%s.%N)
      "$build/weir" run -m "$p" -p hi -n 1 --temp 0 -ngl 99 -v "$@" 2>&1 >/dev/null | grep -E "weir: (loaded|load )" |
        sed 's/ | prompt.*//' | tr '\n' ' '
      t1=$(date +%s.%N)
      awk -v a="$t0" -v b="$t1" 'BEGIN { printf "| process %.2f s\n", b - a }'
    }
    for i in 1 2 3; do printf '%s warm: ' "${m%%:*}"; first_token; done
    for dio in "" --direct-io; do
      python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)" "$p"
      printf '%s cold %s: ' "${m%%:*}" "${dio:-buffered}"; first_token $dio
    done
    printf '%s warm --direct-io: ' "${m%%:*}"; first_token --direct-io
  done
fi

if has multi; then
  step "several GPUs"
  export NCCL_NVLS_ENABLE=0  # never NVLink multicast on these shared hosts
  n_gpus=$(nvidia-smi -L | wc -l)
  # NCCL: the toolkit's, or a Python package's (torch brings one).
  if [ -z "${WEIR_NCCL:-}" ] && ! ldconfig -p | grep -q libnccl.so.2; then
    nccl=$(find /usr/local /usr/lib /opt "$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)" \
      -name libnccl.so.2 2>/dev/null | head -1)
    if [ -n "$nccl" ]; then
      export WEIR_NCCL=$nccl
      export LD_LIBRARY_PATH=$(dirname "$nccl")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fi
  fi
  echo "NCCL: ${WEIR_NCCL:-$(ldconfig -p | awk '/libnccl.so.2/ {print $NF; exit}')}"
  nvidia-smi topo -m 2>&1 | head -12
  for n in 2 4; do
    [ "$n" -le "$n_gpus" ] || continue
    if [ -x "$build/microbench/weir_microbench_cuda" ]; then
      WEIR_BENCH_GPUS=$n TAIL=20 run_logged multi "$log_dir/allreduce-$n.log" \
        timeout 150 "$build/microbench/weir_microbench_cuda" --gtest_filter='AllReduceBench.*'
    fi
  done
  TAIL=15 run_logged multi "$log_dir/tp-tests.log" timeout 200 "$build/tests/weir_cuda_tests" --gtest_brief=1 \
    --gtest_filter='*GpuComm*:*CudaTensorParallel*:CudaLoader*'
  list=()
  for m in "${selected[@]}"; do
    case ${m%%:*} in *70b*) continue ;; esac  # the CPU reference would take too long
    list+=("$(path_of "${m%%:*}")")
  done
  if [ ${#list[@]} -gt 0 ]; then
    for n in 2 4; do
      [ "$n" -le "$n_gpus" ] || continue
      WEIR_GPU_COMPARE_MODELS=$(IFS=:; echo "${list[*]}") WEIR_GPU_COMPARE_TP=$n \
        TAIL=12 run_logged multi "$log_dir/tp-compare-$n.log" timeout 200 "$build/tests/weir_cuda_tests" --gtest_filter='CudaModel.ListedModels'
    done
  fi
  for m in "${selected[@]}"; do
    p=$(path_of "${m%%:*}")
    [ -f "$p" ] || continue
    runs=("--tp 1" "--tp 2" "-sm layer")
    [ "$n_gpus" -ge 4 ] && runs+=("--tp 4")
    for r in "${runs[@]}"; do
      # shellcheck disable=SC2086
      TAIL=8 run_logged multi "$log_dir/multi-bench.log" timeout 200 "$build/weir" bench -m "$p" -ngl 99 $r \
        -p 512 -n 128 -r "${WEIR_GPU_BENCH_REPS:-3}"
      echo "  ($r)"
    done
  done
fi

if has mpi; then
  # The same tensor parallel as processes, one a GPU, launched by mpirun:
  # needs the host's mpirun and a weir linked against MPI
  # (WEIR_PACK_MPI=1 scripts/gpu-check.sh --pack-bins, or an MPI found here).
  step "several processes under mpirun"
  export NCCL_NVLS_ENABLE=0
  n_gpus=$(nvidia-smi -L | wc -l)
  if ! command -v mpirun >/dev/null; then
    echo "no mpirun on this host: not run"
  elif ! ldd "$build/weir" | grep -q libmpi; then
    echo "$build/weir is not linked against MPI: not run"
  elif [ "$n_gpus" -lt 2 ]; then
    echo "one GPU: not run"
  else
    mpirun --version 2>&1 | head -1
    mpi=(timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE)
    for m in "${selected[@]}"; do
      p=$(path_of "${m%%:*}")
      [ -f "$p" ] || continue
      gen=(run -m "$p" -ngl 99 --tp 2 -p "The quick brown fox" -n 32 --temp 0)
      "$build/weir" "${gen[@]}" >"$log_dir/mpi-threads.txt" 2>"$log_dir/mpi-threads.err"
      "${mpi[@]}" "$build/weir" "${gen[@]}" >"$log_dir/mpi-run.txt" 2>"$log_dir/mpi-run.err" || failed+=(mpi)
      tail -3 "$log_dir/mpi-run.err"
      # mpirun ends its forwarded output with a newline: the text, not the bytes.
      if [ "$(cat "$log_dir/mpi-run.txt")" = "$(cat "$log_dir/mpi-threads.txt")" ]; then
        echo "  mpirun -np 2 run --tp 2: the same text as two threads of one process"
      else
        echo "  mpirun -np 2 run --tp 2: text DIFFERS from two threads of one process"; failed+=(mpi)
      fi
      TAIL=8 run_logged mpi "$log_dir/mpi-bench.log" "${mpi[@]}" "$build/weir" bench -m "$p" -ngl 99 --tp 2 \
        -p 512 -n 128 -r "${WEIR_GPU_BENCH_REPS:-3}"
      TAIL=8 run_logged mpi "$log_dir/mpi-bench.log" timeout 200 "$build/weir" bench -m "$p" -ngl 99 --tp 2 \
        -p 512 -n 128 -r "${WEIR_GPU_BENCH_REPS:-3}"
      echo "  (the same as threads of one process)"
    done
  fi
fi

if has moe; then
  # Mixtures of experts: the GPU's expert ops against the CPU, the models'
  # greedy tokens GPU vs CPU, then weir bench all on the GPU, with the
  # experts on the CPU (--cpu-moe, every core) and all on the CPU.
  step "mixture of experts"
  TAIL=6 run_logged moe "$log_dir/moe-ops.log" "$build/tests/weir_cuda_tests" \
    --gtest_filter='CudaOps.MixtureOfExperts*:CudaOps.Expert*'
  for m in "${selected[@]}"; do
    p=$(path_of "${m%%:*}")
    [ -f "$p" ] || continue
    "$build/weir" inspect "$p" | tail -2
    WEIR_GPU_COMPARE_MODELS=$p TAIL=8 run_logged moe "$log_dir/moe-compare.log" timeout 300 \
      "$build/tests/weir_cuda_tests" --gtest_filter='CudaModel.ListedModels'
    IFS=';' read -r -a moe_flags <<< "${WEIR_GPU_MOE_FLAGS:--ngl 99;-ngl 99 --cpu-moe -nopo;-ngl 0}"
    for flags in "${moe_flags[@]}"; do
      # shellcheck disable=SC2086
      TAIL=8 run_logged moe "$log_dir/moe-bench.log" timeout 400 "$build/weir" bench -m "$p" $flags -t "$(nproc)" \
        -p 512 -n 128 -r "${WEIR_GPU_BENCH_REPS:-3}"
      echo "  ($flags)"
    done
  done
fi

if has ppl; then
  step "perplexity, GPU vs CPU"
  text=$carry/ppl-text.txt
  first=$(path_of "${selected[0]%%:*}")
  if [ -f "$text" ] && [ -f "$first" ]; then
    for ngl in 99 0; do
      "$build/weir" perplexity -m "$first" -f "$text" -c 256 --chunks 8 -ngl $ngl 2>"$log_dir/ppl-$ngl.err" |
        tail -1 | sed "s/^/-ngl $ngl: /"
    done
  else
    echo "no $text or model: skipped"
  fi
fi

if has sanitize; then
  step "compute-sanitizer memcheck"
  small=$(path_of gemma3-270m-q4km)
  [ -f "$small" ] || small=$(ls /tmp/weir-tests/gpu-tiny-*.gguf 2>/dev/null | head -1)
  if command -v compute-sanitizer >/dev/null && [ -n "$small" ]; then
    TAIL=6 run_logged sanitize "$log_dir/memcheck.log" compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$build/weir" run -m "$small" -ngl 99 -n 8 --temp 0 \
      -p "A prompt of a few dozen tokens takes the tile kernel for small batches, so the check covers it as well."
  else
    echo "compute-sanitizer or a model missing: skipped"
  fi
  tiny_f16=/tmp/weir-tests/gpu-tiny-llama-F16.gguf  # the float kernel's ends (fold, row jobs, GLU); made by the tests
  if command -v compute-sanitizer >/dev/null && [ -f "$tiny_f16" ]; then
    TAIL=6 run_logged sanitize "$log_dir/memcheck-f16.log" compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$build/weir" run -m "$tiny_f16" -ngl 99 -n 8 --temp 0 -p "A few words for the float kernels."
  fi
  # The 8-bit KV cache: its blocks written by the q/k/v launch (in clusters
  # of 4 blocks on a small model, 16 warps a block on gemma3's) and read by
  # the attention kernels.
  tiny_q4km=/tmp/weir-tests/sanitize-tiny-llama-Q4_K_M.gguf
  mkdir -p /tmp/weir-tests
  [ -f "$tiny_q4km" ] || "$build/weir" synth --arch llama --preset tiny --type Q4_K_M -o "$tiny_q4km" >/dev/null 2>&1 || true
  for m in "$tiny_q4km" "$small"; do
    if command -v compute-sanitizer >/dev/null && [ -f "$m" ]; then
      TAIL=6 run_logged sanitize "$log_dir/memcheck-q8-cache-$(basename "$m" .gguf).log" compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$build/weir" run -m "$m" -ngl 99 -n 8 --temp 0 -ctk q8_0 -p "A few words for the 8-bit cache."
    fi
  done
  # The tile kernels on every shape their tests take; the rope launch's jobs
  # (q/k norms, qwen2's biases) and the products' row jobs.
  if command -v compute-sanitizer >/dev/null; then
    TAIL=6 run_logged sanitize "$log_dir/memcheck-tile.log" compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$build/tests/weir_cuda_tests" --gtest_brief=1 \
      --gtest_filter='*MmaTile*:*OneLaunch*:*RopeLaunch*:*Glu*:*Folded*:*CacheThemselves*:CudaAttention.Decode*'
  fi
  # Decode attention's plans (shared memory of the splits, the strided
  # tiles' bits, clusters) and the folds split over clusters (their partial
  # sums read across blocks).
  if command -v compute-sanitizer >/dev/null; then
    TAIL=6 run_logged sanitize "$log_dir/racecheck-attention.log" compute-sanitizer --tool racecheck --error-exitcode 9 \
      "$build/tests/weir_cuda_tests" --gtest_brief=1 --gtest_filter='CudaAttention.Decode*:CudaOps.NormFolded*'
  fi
fi

if has bench; then
  step "weir bench -ngl 99"
  args=()
  for m in "${selected[@]}"; do args+=(-m "$(path_of "${m%%:*}")"); done
  TAIL=40 run_logged bench "$log_dir/bench.log" "$build/weir" bench "${args[@]}" -ngl 99 -p 512 -n 128 -r 5
fi

if has cpu; then
  # The CPU alone (the GPU hidden: CUDA_VISIBLE_DEVICES=), every core: the
  # host's CPU, which kernels run (AVX-512 VNNI, AMX, repacked types), the CPU
  # tests (AMX's among them, which skip where there is none) and repack
  # microbench, then weir bench -ngl 0 on the selected models, as they are
  # and in each environment of WEIR_GPU_CPU_AB (';'-separated), and a
  # per-node profile of the first model (WEIR_CPU_PROFILE=1).
  step "CPU only (CUDA_VISIBLE_DEVICES=)"
  threads=${WEIR_CPU_THREADS:-$(nproc)}
  lscpu | grep -E "^(Model name|CPU\(s\)|Thread\(s\) per core|NUMA node\(s\)|L2 cache|L3 cache)" || true
  echo "flags: $(grep -o -w -E 'avx512_vnni|avx512_bf16|amx_tile|amx_int8|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  # What this process may use: its CPU set and any cgroup quota.
  echo "nproc $(nproc), $(grep Cpus_allowed_list /proc/self/status | tr '\t' ' '), cgroup cpu.max: $(cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo n/a)"
  CUDA_VISIBLE_DEVICES= "$build/weir" --version | head -2
  if [ -x "$build/tests/weir_backend_tests" ]; then
    TAIL=15 run_logged cpu "$log_dir/cpu-tests.log" env CUDA_VISIBLE_DEVICES= \
      "$build/tests/weir_backend_tests" --gtest_brief=1
  fi
  if [ -x "$build/microbench/weir_microbench" ]; then
    TAIL=30 run_logged cpu "$log_dir/cpu-microbench.log" "$build/microbench/weir_microbench" \
      --gtest_filter='CpuRepack*'
  fi
  for m in "${selected[@]}"; do
    p=$(path_of "${m%%:*}")
    [ -f "$p" ] || { echo "cpu: no $p (the models stage writes it)"; continue; }
    IFS=';' read -r -a variants <<<"default;${WEIR_GPU_CPU_AB:-}"
    for v in "${variants[@]}"; do
      [ -n "$v" ] || continue
      echo "--- ${m%%:*}, $v"
      envs=(CUDA_VISIBLE_DEVICES=)
      if [ "$v" != default ]; then read -r -a more <<<"$v"; envs+=("${more[@]}"); fi
      TAIL=12 run_logged cpu "$log_dir/cpu-bench-${m%%:*}-${v// /_}.log" env "${envs[@]}" \
        "$build/weir" bench -m "$p" -ngl 0 -t "$threads" -p "${WEIR_GPU_CPU_PP:-512}" -n 128 -r "${WEIR_GPU_BENCH_REPS:-3}"
    done
  done
  # The paths agree: perplexity (128-token chunks: prefill products) and 32
  # greedy tokens after a long prompt, as they are, without AMX, and plain
  # (neither AMX nor repacked weights), on the first model.
  p=$(path_of "${selected[0]%%:*}")
  text=$carry/ppl-text.txt
  [ -f ../shared/ref/ppl-text.txt ] && text=../shared/ref/ppl-text.txt
  if [ -f "$p" ] && [ -f "$text" ]; then
    head -c 3000 "$text" >/tmp/weir-cpu-prompt.txt
    for v in "" "WEIR_CPU_AMX=0" "WEIR_CPU_AMX=0 WEIR_CPU_REPACK=0"; do
      # shellcheck disable=SC2086
      ppl=$(env CUDA_VISIBLE_DEVICES= $v "$build/weir" perplexity -m "$p" -f "$text" -c 128 --chunks 8 -t "$threads" 2>&1 |
        grep -o "PPL = [0-9.]*" | tail -1)
      # shellcheck disable=SC2086
      toks=$(env CUDA_VISIBLE_DEVICES= $v "$build/weir" run -m "$p" -f /tmp/weir-cpu-prompt.txt -n 32 --temp 0 --ignore-eos \
        -t "$threads" 2>/dev/null | tail -c 200 | md5sum | cut -c1-8)
      echo "paths ${selected[0]%%:*} [${v:-default}]: $ppl, 32 greedy tokens' text md5 $toks"
    done
  fi
  prof=${WEIR_GPU_PROFILE_MODEL:-${selected[0]%%:*}}
  p=$(path_of "$prof")
  if [ -f "$p" ]; then
    echo "--- profile: $prof"
    CUDA_VISIBLE_DEVICES= WEIR_CPU_PROFILE=1 "$build/weir" bench -m "$p" -ngl 0 -t "$threads" -p 512 -n 32 -r 1 \
      >"$log_dir/cpu-profile.log" 2>&1 || failed+=(cpu)
    grep -A22 "CPU profile" "$log_dir/cpu-profile.log" || tail -20 "$log_dir/cpu-profile.log"
  fi
fi

if has depth; then
  # Decode deep in the context (issue 28: tg at 4,096 tokens within 10% of
  # tg at 0): tg128 at depth 0 and WEIR_GPU_DEPTH, and their ratio.
  step "weir bench -ngl 99, tg128 at depth 0 and ${WEIR_GPU_DEPTH:-4096}"
  for m in "${selected[@]}"; do
    for kv in ${WEIR_GPU_DEPTH_KV:-f16 q8_0}; do
      "$build/weir" bench -m "$(path_of "${m%%:*}")" -ngl 99 -p 0 -n 128 -d "0,${WEIR_GPU_DEPTH:-4096}" -r 5 \
        -ctk "$kv" -ctv "$kv" -o csv 2>/dev/null |
        python3 -c '
import csv, sys
rows = list(csv.DictReader(sys.stdin))
ts = {int(r["n_depth"]): float(r["avg_ts"]) for r in rows}
d = max(ts)
print("depth: %-40s %-5s tg128 %9.2f  at depth %d %9.2f  ratio %.3f" % (sys.argv[1], sys.argv[2], ts[0], d, ts[d], ts[d] / ts[0]))' "${m%%:*}" "$kv" |
        tee -a "$log_dir/depth.log" || failed+=(depth)
    done
  done
fi

if has serve; then
  step "serve: weir serve under load"
  sm=${WEIR_GPU_SERVE_MODEL:-qwen2.5-7b-q4km}
  sf="$models/$sm.gguf"
  nc=${WEIR_GPU_SERVE_CLIENTS:-64}
  np=${WEIR_GPU_SERVE_PROMPT:-512}; ng=${WEIR_GPU_SERVE_GEN:-256}; sp=$((np * 25 / 32))  # shared: 400 of 512
  ngl=${WEIR_GPU_SERVE_NGL:-99}
  slog="$log_dir/serve-bench.log"
  if [ ! -f "$sf" ]; then
    echo "serve: no $sf (run the models stage with WEIR_GPU_BENCH_MODELS=$sm)"; failed+=(serve)
  else
    read -r -a extra <<<"${WEIR_GPU_SERVE_FLAGS:-}"
    "$build/weir" bench -m "$sf" -ngl "$ngl" -p "$np" -n 0 -r 3 >"$slog" 2>&1
    "$build/weir" bench -m "$sf" -ngl "$ngl" -p "$np" -n 0 -np "$nc" -r 3 "${extra[@]}" >>"$slog" 2>&1
    "$build/weir" bench -m "$sf" -ngl "$ngl" -p 0 -n "$ng" -np "$nc" -r 3 >>"$slog" 2>&1
    grep -E "^\|.*(pp$np|tg$ng)" "$slog"
    rate() { grep -E "^\|.*$1 " "$slog" | awk -F'|' '{print $(NF-1)}' | awk '{print $1}' | head -1; }
    pp=$(rate "pp$np"); tg=$(rate "tg$ng x$nc")
    python3 -c "p, t = $pp, $tg; print(f'serve: bench predicts {$nc * $np / p + $nc * $ng / t:.2f} s for the load ({$nc} x $np / {p:.0f} + {$nc} x $ng / {t:.0f})')"
    port=18188
    serve_rounds() {  # NAME SERVE-FLAGS -- LOAD-FLAGS
      local name=$1; shift
      local sflags=() lflags=()
      while [ "$1" != -- ]; do sflags+=("$1"); shift; done; shift
      lflags=("$@")
      "$build/weir" serve -m "$sf" -ngl "$ngl" -np "$nc" -c $((nc * (np + ng + 32))) --port $port "${sflags[@]}" \
        "${extra[@]}" --log-steps "$log_dir/serve-$name-steps.csv" >"$log_dir/serve-$name.log" 2>&1 &
      local pid=$!
      python3 -c "
import time, urllib.request
for _ in range(600):
    try:
        urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=1); break
    except Exception: time.sleep(0.2)" || true
      # A short warm-up round (the step graphs of the shapes a load makes), then 3 rounds.
      python3 scripts/load-test.py --url http://127.0.0.1:$port --clients "$nc" --prompt-tokens "$np" --max-tokens 8 \
        --seed 99 >/dev/null 2>&1 || true
      for r in 1 2 3; do
        echo -n "serve $name round $r: "
        python3 scripts/load-test.py --url http://127.0.0.1:$port --clients "$nc" --prompt-tokens "$np" \
          --max-tokens "$ng" --temperature 0.7 --seed $((r * 10)) --json "$log_dir/serve-$name-$r.json" "${lflags[@]}" 2>&1 | tail -1 || true
      done
      python3 -c "import urllib.request; print(''.join(l for l in urllib.request.urlopen('http://127.0.0.1:$port/metrics').read().decode().splitlines(True) if not l.startswith('#')))" \
        >"$log_dir/serve-$name-metrics.txt" 2>&1 || true
      kill -TERM $pid; wait $pid || true
      # The steps: how many, how long, what they held (all rounds, the warm-up's too).
      python3 - "$log_dir/serve-$name-steps.csv" <<'PY' || true
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
if rows:
    sec = [float(r["seconds"]) for r in rows]
    mixed = [float(r["seconds"]) for r in rows if int(r["prompt"]) > 0 and int(r["decode"]) > 0]
    dec = [float(r["seconds"]) for r in rows if int(r["prompt"]) == 0]
    print(f"  steps {len(rows)}: median {statistics.median(sec)*1e3:.1f} ms, max {max(sec)*1e3:.1f} ms; "
          f"with prompt and decode {len(mixed)} (median {statistics.median(mixed)*1e3 if mixed else 0:.1f} ms); "
          f"decode only {len(dec)} (median {statistics.median(dec)*1e3 if dec else 0:.1f} ms)")
PY
      grep -E "^weir_(graphs_built|graph_build_seconds)" "$log_dir/serve-$name-metrics.txt" | tr '\n' ' '; echo
    }
    for round in ${WEIR_GPU_SERVE_ROUNDS:-plain shared shared-nocache}; do
      case $round in
        plain) serve_rounds plain -- --shared-prefix 0 ;;
        shared) serve_rounds shared -- --shared-prefix "$sp" ;;
        shared-nocache) serve_rounds shared-nocache --cache-prompts 0 -- --shared-prefix "$sp" ;;
        spec) serve_rounds spec --spec ngram -- --shared-prefix 0 ;;  # as plain, with n-gram speculation
      esac
    done
  fi
fi

if has spec; then
  step "speculative decoding"
  TAIL=20 run_logged spec "$log_dir/spec-tests.log" "$build/tests/weir_backends_tests" --gtest_brief=1 \
    --gtest_filter='*Speculative*:*Truncate*'
  target=$(path_of "${WEIR_GPU_SPEC_TARGET:-llama-8b-q4km}")
  draft=$(path_of "${WEIR_GPU_SPEC_DRAFT:-llama-1b-q4_0}")
  if [ -f "$target" ] && [ -f "$draft" ]; then
    "$build/weir" bench -m "$target" -ngl 99 -p 0 -n 128 -r 5 --spec off,draft -md "$draft" --verify-curve 16 2>&1 |
      tee "$log_dir/spec-curve.log" | grep -vE "^weir bench:" || failed+=(spec)
    "$build/weir" bench -m "$draft" -ngl 99 -p 0 -n 128 -r 5 2>&1 | grep -E "^\|" | tee -a "$log_dir/spec-curve.log"
  else
    echo "spec: no $target or $draft (run the models stage with WEIR_GPU_BENCH_MODELS naming them)"
  fi
  real=/tmp/weir-real-model/gemma-3-270m-q4_k_m.gguf
  if [ -f "$real" ]; then
    echo "-- real Gemma 3 270M, GPU"
    scripts/spec-bench.sh "$build/weir" "$real" -ngl 99 2>&1 | tee "$log_dir/spec-real-gpu.log"
    echo "-- real Gemma 3 270M, CPU (${WEIR_CPU_THREADS:-$(nproc)} threads)"
    CUDA_VISIBLE_DEVICES= scripts/spec-bench.sh "$build/weir" "$real" -t "${WEIR_CPU_THREADS:-$(nproc)}" 2>&1 |
      tee "$log_dir/spec-real-cpu.log"
  fi
fi

if has grammar; then
  step "constrained decoding: weir bench under no grammar, any object, a JSON schema"
  schema=tests/data/bench-person-schema.json
  TAIL=20 run_logged grammar "$log_dir/grammar-ops.log" "$build/tests/weir_backends_tests" --gtest_brief=1 \
    --gtest_filter='*AllowTokens*:*Sample*'
  for m in "${selected[@]}"; do
    p=$(path_of "${m%%:*}")
    TAIL=8 run_logged grammar "$log_dir/grammar-gpu.log" "$build/weir" bench -m "$p" -ngl 99 -p 0 -n 128 -np 64 -r 5 \
      --json-schema "none,object,$schema"
    TAIL=8 run_logged grammar "$log_dir/grammar-cpu.log" env CUDA_VISIBLE_DEVICES= "$build/weir" bench -m "$p" -ngl 0 \
      -t "${WEIR_CPU_THREADS:-$(nproc)}" -p 0 -n 16 -np 64 -r 3 --json-schema "none,object,$schema"
  done
fi

if has profile; then
  step "kernel profiles (WEIR_CUDA_PROFILE=1)"
  for m in "${selected[@]}"; do
    p=$(path_of "${m%%:*}")
    for t in "-p 0 -n 64" "-p 512 -n 0"; do
      # shellcheck disable=SC2086
      WEIR_CUDA_PROFILE=1 "$build/weir" bench -m "$p" -ngl 99 $t -r 1 >/dev/null 2>"$log_dir/profile.tmp" ||
        failed+=(profile)
      echo "--- $(basename "$p") $t"
      head -"${PROFILE_LINES:-14}" "$log_dir/profile.tmp"
      cat "$log_dir/profile.tmp" >>"$log_dir/profile.log"
    done
  done
fi

if has counters; then
  step "hardware counters (ncu), one decoded token"
  ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
  if [ -z "$ncu_bin" ]; then
    echo "counters: no ncu here"
    failed+=(counters)
  else
    for m in "${selected[@]}"; do
      p=$(path_of "${m%%:*}")
      report=$log_dir/ncu-$(basename "$p" .gguf).txt
      # Past the warm-up and the first tokens: -n 16 decodes enough tokens that
      # 600 kernels in, a whole token follows (the largest model: ~200 a token).
      timeout 300 "$ncu_bin" --clock-control none --section SpeedOfLight --section WarpStateStats \
        --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --launch-skip 600 \
        --launch-count "${WEIR_GPU_NCU_KERNELS:-260}" \
        -k 'regex:q8_mat_vec_kernel|q8_glu_kernel|attn_vec|attn_combine|attn_mma|mat_vec' \
        "$build/weir" bench -m "$p" -ngl 99 -p 0 -n 16 -r 1 >"$report" 2>&1 || failed+=(counters)
      echo "--- $(basename "$p")"
      python3 scripts/ncu-table.py "$report" || failed+=(counters)
    done
  fi
fi

if has ab; then
  a_bin=$build/weir
  [ -x "$base_dir/build/weir" ] && has base && a_bin=$base_dir/build/weir
  if [ -n "${WEIR_GPU_AB_BASE_BIN:-}" ]; then  # a carried binary of the base (xz or not)
    a_bin=/tmp/weir-base-bin
    if [ "${WEIR_GPU_AB_BASE_BIN%.xz}" != "$WEIR_GPU_AB_BASE_BIN" ]; then xz -dc "$WEIR_GPU_AB_BASE_BIN" >"$a_bin"
    else cp "$WEIR_GPU_AB_BASE_BIN" "$a_bin"; fi
    chmod +x "$a_bin"
  fi
  step "A/B: $a_bin vs $build/weir ${WEIR_GPU_AB_ENV:-}"
  for m in "${selected[@]}"; do
    p=$(path_of "${m%%:*}")
    echo "--- $(basename "$p")"
    read -r -a extra <<<"${WEIR_GPU_AB_ARGS:-"-p 0 -n 128"}"
    B_ENV=${WEIR_GPU_AB_ENV:-} scripts/ab-bench.sh "${WEIR_GPU_AB_ROUNDS:-3}" "$a_bin" "$build/weir" -- \
      -m "$p" -ngl 99 -r 5 "${extra[@]}" || failed+=(ab)
    # WEIR_GPU_AB_SAME=1: the two must plan the same launches (the plan dump,
    # with the words of either) and write the same greedy tokens.
    if [ "${WEIR_GPU_AB_SAME:-0}" = 1 ]; then
      for side in a b; do
        bin=$a_bin; [ $side = b ] && bin=$build/weir
        for prompt_tokens in 1 40; do
          WEIR_CUDA_PLAN_DUMP=1 "$bin" bench -m "$p" -ngl 99 -p "$prompt_tokens" -n 0 -r 1 2>&1 >/dev/null |
            grep '^plan ' | sed -e 's/ (x folded)/ (x after a deferred norm)/' \
            -e "s/ (x handed)/ (x: the GLU's 8-bit blocks)/" >>"$log_dir/ab-plan-$side.txt"
        done
        "$bin" run -m "$p" -ngl 99 -n 48 --temp 0 -p "The launch plan" 2>/dev/null >"$log_dir/ab-text-$side.txt" || true
      done
      if cmp -s "$log_dir/ab-plan-a.txt" "$log_dir/ab-plan-b.txt" && cmp -s "$log_dir/ab-text-a.txt" "$log_dir/ab-text-b.txt"
      then echo "same plans ($(wc -l <"$log_dir/ab-plan-b.txt") launches listed) and the same greedy text"
      else echo "DIFFERENT plans or text:"; diff "$log_dir/ab-plan-a.txt" "$log_dir/ab-plan-b.txt" | head -20
        diff "$log_dir/ab-text-a.txt" "$log_dir/ab-text-b.txt" | head -6; failed+=(ab-same); fi
      rm -f "$log_dir"/ab-plan-?.txt "$log_dir"/ab-text-?.txt
    fi
  done
fi

if has kvread; then
  step "K/V read probe (scripts/kv-read-probe.cu)"
  probe=/tmp/weir-kv-read-probe
  nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  if "$nvcc_bin" -arch=sm_90 -O3 -o "$probe" scripts/kv-read-probe.cu >"$log_dir/kvread.log" 2>&1; then
    "$probe" 2>&1 | tee -a "$log_dir/kvread.log" || failed+=(kvread)
  else
    tail -5 "$log_dir/kvread.log"; failed+=(kvread)
  fi
fi

if has realmodel; then
  step "real model, carried in parts"
  store=/tmp/weir-real-model
  mkdir -p "$store"
  if [ -f "$model_carry/manifest" ]; then
    read -r mname mparts msum <"$model_carry/manifest"
    for p in "$model_carry"/part.*; do [ -f "$p" ] && cp "$p" "$store/"; done
    have=$(find "$store" -name 'part.*' | wc -l)
    echo "parts here: $have of $mparts"
    if [ "$have" -ge "$mparts" ] && [ ! -f "$store/$mname" ]; then
      cat "$store"/part.* >"$store/$mname.tmp"
      if [ "$(sha256sum "$store/$mname.tmp" | cut -d' ' -f1)" = "$msum" ]; then
        mv "$store/$mname.tmp" "$store/$mname"
        rm -f "$store"/part.*
      else
        echo "joined parts do not match the manifest's sha256"
        rm -f "$store/$mname.tmp"
        failed+=(realmodel)
      fi
    fi
    if [ -f "$store/$mname" ]; then
      WEIR_TEST_MODEL=$store/$mname TAIL=30 run_logged realmodel "$log_dir/realmodel.log" \
        "$build/tests/weir_cuda_tests" --gtest_filter='CudaModel.RealGemma3*:CudaModel.RepeatsBitForBit'
    fi
  else
    echo "no $model_carry/manifest (scripts/gpu-check.sh --pack-model)"
  fi
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "gpu-check: FAILED: ${failed[*]} (logs in $log_dir)"
  exit 1
fi
echo "gpu-check: ok"
