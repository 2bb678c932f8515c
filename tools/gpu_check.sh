#!/usr/bin/env bash
# GPU verification of the CUDA variant, on a machine with an NVIDIA GPU, CUDA torch and nvcc.
#
#   bash tools/gpu_check.sh [STAGE...]     stages: info tests suite sanitizer bench benchfull kernels model
#                                          (default: info tests; the usual full check: info tests sanitizer benchfull)
#   bash tools/gpu_check.sh prebuild       on the CPU machine: build _C.so for sm_90 into gpu-prebuilt/ (ignored
#                                          by git), to carry to the GPU machine so no device time goes to nvcc
# bench / benchfull also print the memory model's prediction (research/gpu_model/model.py) next to the measurement;
# kernels times every kernel launch per reduction plan (benchmarks/cuda_kernel_times.py, torch.profiler).
#   BENCH_ARGS="--ops sum softmax" bash tools/gpu_check.sh benchfull   # options for bench_cuda.py
#
# The library: $TORCH_SEGOPS_LIBRARY if set, else gpu-prebuilt/_C.so if it loads (built against the stable
# ABI, it runs in the GPU machine's torch), else one built here into build-gpu/ for this GPU's architecture
# (CUDAARCHS overrides). The package is used from src/ (PYTHONPATH), nothing is installed. Logs and results go
# to $LOGS (default /tmp/gpu_check); when $OUT is set (the device tool's folder of files to bring back, at most
# 8 files), they are also packed into $OUT/gpu_check.tar.gz, with the summary in $OUT/summary.txt.
# docs/cuda.md, "The first session with a GPU", is the plan for a 20-minute lease.
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS=${LOGS:-/tmp/gpu_check}
mkdir -p "$LOGS"
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(info tests)
status=0
step() { printf '\n==> %s (%s)\n' "$*" "$(date +%T)"; }

# The memory model's predicted table next to a measured bench_cuda.py markdown (needs g++; see docs/cuda.md).
model() {
  local measured=$1; shift
  step "memory model: predicted vs measured ($measured)"
  "$PY" research/gpu_model/model.py --against "$measured" --markdown "$LOGS/model-vs-$(basename "$measured")" "$@" 2>&1 \
    | tee "$LOGS/model.txt" || status=1
}

library_loads() {
  "$PY" -c 'import torch_segops as t, json; print(json.dumps(t.build_info()))' 2>&1
}

if [ "${1:-}" = prebuild ]; then  # on the CPU machine: nvcc builds for sm_90 here, the GPU machine only runs
  step "building _C.so for sm_90 (carry gpu-prebuilt to the GPU machine)"
  cmake -S . -B build-gpu-prebuilt -G Ninja -DTORCH_SEGOPS_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DTORCH_SEGOPS_CUDA_RESOURCE_USAGE=ON >"$LOGS/prebuild.log" 2>&1 &&
    cmake --build build-gpu-prebuilt >>"$LOGS/prebuild.log" 2>&1 || { tail -50 "$LOGS/prebuild.log"; exit 1; }
  mkdir -p gpu-prebuilt && cp build-gpu-prebuilt/_C.so gpu-prebuilt/_C.so
  git rev-parse HEAD >gpu-prebuilt/commit.txt
  git status --porcelain -- src cmake CMakeLists.txt >>gpu-prebuilt/commit.txt
  ls -la gpu-prebuilt; exit 0
fi

if [ -z "${TORCH_SEGOPS_LIBRARY:-}" ] && [ -f gpu-prebuilt/_C.so ]; then
  export TORCH_SEGOPS_LIBRARY="$PWD/gpu-prebuilt/_C.so"
  echo "prebuilt library of $(head -1 gpu-prebuilt/commit.txt) (now $(git rev-parse HEAD 2>/dev/null || echo '?'))"
fi
if [ -n "${TORCH_SEGOPS_LIBRARY:-}" ] && ! library_loads >"$LOGS/load.txt"; then
  echo "carried library $TORCH_SEGOPS_LIBRARY does not load:"; cat "$LOGS/load.txt"
  unset TORCH_SEGOPS_LIBRARY
fi
if [ -z "${TORCH_SEGOPS_LIBRARY:-}" ]; then
  step "building the CUDA library"
  archs=${CUDAARCHS:-$("$PY" -c 'import torch; c = torch.cuda.get_device_capability(); print(f"{c[0]}{c[1]}-real")')}
  cmake -S . -B build-gpu -G Ninja -DTORCH_SEGOPS_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" >"$LOGS/build.log" 2>&1 &&
    cmake --build build-gpu >>"$LOGS/build.log" 2>&1 || { tail -50 "$LOGS/build.log"; exit 1; }
  export TORCH_SEGOPS_LIBRARY="$PWD/build-gpu/_C.so"
fi

for stage in "${stages[@]}"; do
  case "$stage" in
  info)
    step info
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
    library_loads ;;
  tests)
    step "GPU tests (tests/test_cuda.py)"
    timeout 420 "$PY" -m pytest tests/test_cuda.py -q -ra -p no:cacheprovider --durations=10 2>&1 | tee "$LOGS/test_cuda.log" || status=1 ;;
  suite)
    step "whole test suite"
    # the packaging tests (recipe, environments) need rattler-build/py-rattler and run in CI; so does the
    # compile-only check of the CUDA build
    timeout "${SUITE_TIMEOUT:-540}" "$PY" -m pytest tests -q -ra -p no:cacheprovider -n 8 --durations=10 \
      --ignore tests/test_recipe.py --ignore tests/test_recipe_e2e.py --ignore tests/test_environments.py \
      --ignore tests/test_cuda_build.py 2>&1 | tee "$LOGS/suite.log" | tail -30 || status=1 ;;
  sanitizer)
    # A reduced set (SAN_TESTS): 3 examples per property (hypothesis profile sanitizer), the fixed edge cases.
    # initcheck: no kernel reads workspace memory it has not written (every keyed state is written, see
    # store_identity in device_primitives.cuh); synccheck: barriers and shuffles of the block kernel.
    for tool in ${SAN_TOOLS:-memcheck racecheck synccheck initcheck}; do
      step "compute-sanitizer --tool $tool"
      # without torch's caching allocator: a cached block that earlier kernels wrote hides an uninitialised
      # read from initcheck, and an overrun inside a cached block from memcheck
      PYTORCH_NO_CUDA_MEMORY_CACHING=1 HYPOTHESIS_PROFILE=sanitizer timeout "${SAN_TIMEOUT:-280}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
        --target-processes all "$PY" -m pytest tests/test_cuda.py -q -p no:cacheprovider \
        -k "${SAN_TESTS:-not compile and not opcheck}" 2>&1 \
        | tee "$LOGS/sanitizer-$tool.log" | tail -25 || status=1
    done ;;
  bench)
    step "benchmark (quick)"
    "$PY" benchmarks/bench_cuda.py --quick --markdown "$LOGS/bench-quick.md" 2>/dev/null | tee "$LOGS/bench-quick.txt" || status=1
    model "$LOGS/bench-quick.md" --elems 4194304 ;;
  benchfull)
    step "benchmark (full grid)"
    # shellcheck disable=SC2086  # BENCH_ARGS: extra options, e.g. "--ops sum softmax --reps 10"
    timeout "${BENCH_TIMEOUT:-500}" "$PY" benchmarks/bench_cuda.py ${BENCH_ARGS:-} --markdown "$LOGS/bench-full.md" 2>"$LOGS/bench-full.err" \
      | tee "$LOGS/bench-full.txt" || status=1
    model "$LOGS/bench-full.md" ;;
  kernels)
    step "per-kernel times, every plan forced (benchmarks/cuda_kernel_times.py)"
    timeout "${KERNELS_TIMEOUT:-300}" "$PY" benchmarks/cuda_kernel_times.py --markdown "$LOGS/kernel-times.md" \
      2>&1 | tee "$LOGS/kernel-times.txt" || status=1 ;;
  model)  # the model against the last full benchmark of this run (or the recorded H100 one)
    f="$LOGS/bench-full.md"; [ -f "$f" ] || f=benchmarks/results/cuda-h100-2026-11-23.md
    model "$f" ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
step "done, status $status"
if [ -n "${OUT:-}" ] && [ "$OUT" != "$LOGS" ]; then  # the device tool brings back at most 8 files from $OUT
  mkdir -p "$OUT"
  { echo "gpu_check.sh ${stages[*]}: status $status, $(date -u +%FT%TZ)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
    grep -hE "passed|failed|ERROR SUMMARY|error\(s\)|hazard" "$LOGS"/*.log 2>/dev/null | tail -40; } >"$OUT/summary.txt"
  tar -czf "$OUT/gpu_check.tar.gz" -C "$LOGS" .
fi
exit $status
