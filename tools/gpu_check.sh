#!/usr/bin/env bash
# GPU verification of the CUDA variant, on a machine with an NVIDIA GPU, CUDA torch and nvcc.
#
#   bash tools/gpu_check.sh [STAGE...]     stages: info tests suite sanitizer bench benchfull model
#                                          (default: info tests; the usual full check: info tests sanitizer benchfull)
# bench / benchfull also print the memory model's prediction (benchmarks/gpu_model.py) next to the measurement.
#   BENCH_ARGS="--ops sum softmax" bash tools/gpu_check.sh benchfull   # options for bench_cuda.py
#
# The library: $TORCH_SEGOPS_LIBRARY if set (for example a _C.so built elsewhere against the stable ABI),
# else one built here into build-gpu/ for this GPU's architecture (CUDAARCHS overrides). The package is
# used from src/ (PYTHONPATH), nothing is installed. Logs and results go to $OUT (default /tmp/gpu_check).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
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
  "$PY" benchmarks/gpu_model.py --against "$measured" --markdown "$OUT/model-vs-$(basename "$measured")" "$@" 2>&1 \
    | tee "$OUT/model.txt" || status=1
}

library_loads() {
  "$PY" -c 'import torch_segops as t, json; print(json.dumps(t.build_info()))' 2>&1
}

if [ -n "${TORCH_SEGOPS_LIBRARY:-}" ] && ! library_loads >"$OUT/load.txt"; then
  echo "carried library $TORCH_SEGOPS_LIBRARY does not load:"; cat "$OUT/load.txt"
  unset TORCH_SEGOPS_LIBRARY
fi
if [ -z "${TORCH_SEGOPS_LIBRARY:-}" ]; then
  step "building the CUDA library"
  archs=${CUDAARCHS:-$("$PY" -c 'import torch; c = torch.cuda.get_device_capability(); print(f"{c[0]}{c[1]}-real")')}
  cmake -S . -B build-gpu -G Ninja -DTORCH_SEGOPS_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" >"$OUT/build.log" 2>&1 &&
    cmake --build build-gpu >>"$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
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
    timeout 420 "$PY" -m pytest tests/test_cuda.py -q -ra -p no:cacheprovider --durations=10 2>&1 | tee "$OUT/test_cuda.log" || status=1 ;;
  suite)
    step "whole test suite"
    # the packaging tests (recipe, environments) need rattler-build/py-rattler and run in CI; so does the
    # compile-only check of the CUDA build
    timeout "${SUITE_TIMEOUT:-540}" "$PY" -m pytest tests -q -ra -p no:cacheprovider -n 8 --durations=10 \
      --ignore tests/test_recipe.py --ignore tests/test_recipe_e2e.py --ignore tests/test_environments.py \
      --ignore tests/test_cuda_build.py 2>&1 | tee "$OUT/suite.log" | tail -30 || status=1 ;;
  sanitizer)
    # A reduced set (SAN_TESTS): 3 examples per property (hypothesis profile sanitizer), the fixed edge cases.
    for tool in memcheck racecheck; do
      step "compute-sanitizer --tool $tool"
      HYPOTHESIS_PROFILE=sanitizer timeout "${SAN_TIMEOUT:-280}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
        --target-processes all "$PY" -m pytest tests/test_cuda.py -q -p no:cacheprovider \
        -k "${SAN_TESTS:-not compile and not opcheck}" 2>&1 \
        | tee "$OUT/sanitizer-$tool.log" | tail -25 || status=1
    done ;;
  bench)
    step "benchmark (quick)"
    "$PY" benchmarks/bench_cuda.py --quick --markdown "$OUT/bench-quick.md" 2>/dev/null | tee "$OUT/bench-quick.txt" || status=1
    model "$OUT/bench-quick.md" --elems 4194304 ;;
  benchfull)
    step "benchmark (full grid)"
    # shellcheck disable=SC2086  # BENCH_ARGS: extra options, e.g. "--ops sum softmax --reps 10"
    timeout "${BENCH_TIMEOUT:-500}" "$PY" benchmarks/bench_cuda.py ${BENCH_ARGS:-} --markdown "$OUT/bench-full.md" 2>"$OUT/bench-full.err" \
      | tee "$OUT/bench-full.txt" || status=1
    model "$OUT/bench-full.md" ;;
  model)  # the model against the last full benchmark of this run (or the recorded H100 one)
    f="$OUT/bench-full.md"; [ -f "$f" ] || f=benchmarks/results/cuda-h100-2026-11-23.md
    model "$f" ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
step "done, status $status"
exit $status
