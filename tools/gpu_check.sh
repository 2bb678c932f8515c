#!/usr/bin/env bash
# GPU verification of the CUDA variant, on a machine with an NVIDIA GPU and a CUDA torch.
#
#   bash tools/gpu_check.sh                the lease plan, in one call: what a session with a lent GPU runs (below)
#   bash tools/gpu_check.sh prebuild       on the CPU machine, before asking for a GPU (no device time): _C.so for
#                                          sm_90 (H100, H200) into gpu-prebuilt/ (ignored by git; carry it), and the
#                                          memory model's prediction of the quick benchmark, gpu-prebuilt/prediction.md
#   bash tools/gpu_check.sh STAGE...       stages: lease info tests memcheck sanitizer bench benchfull kernels model suite
#
# The lease plan (docs/cuda.md, "Checks on a lent GPU"; 15 minutes of device time in all, the machine's start
# included): one run under a hard budget of GPU_CHECK_BUDGET seconds (default 420: with the start, the run fits in
# 8 minutes and leaves time for a second try), in order, each stage given at most what is left:
#   info      the GPU, driver, torch and the library's build info (seconds);
#   tests     tests/kernels/test_cuda.py on the GPU, every plan forced (at most TESTS_S = 210 s);
#   memcheck  compute-sanitizer memcheck over a subset of tests/kernels/test_cuda.py (MEMCHECK_TESTS; at most MEMCHECK_S = 120 s);
#   bench     the quick benchmark, only if at least BENCH_MIN_S = 60 s are left.
# A stage cut short by its time limit says so in the results. Results: $OUT/gpu-check.md (the summary, the tails of
# the tests and of memcheck, the measured benchmark beside the model's prediction carried in gpu-prebuilt/), which
# the session commits as benchmarks/results/cuda-<gpu>-<date>.md, and $OUT/gpu_check.tar.gz (every log). After the
# lease, on the CPU machine: python research/gpu_model/model.py --against <the measured table> --elems 4194304.
#
# The library: $TORCH_SEGOPS_LIBRARY if set, else gpu-prebuilt/_C.so if it loads (built against the stable ABI,
# it runs in the GPU machine's torch), else one built here into build-gpu/ for this GPU (minutes of nvcc on device
# time: carry the prebuilt one). The package is used from src/ (PYTHONPATH), nothing is installed. Logs go to
# $LOGS (default /tmp/gpu_check).
#
# GPU_CHECK_DRY=1: the same plan without a GPU (the dry mode of tests/kernels/test_cuda.py on the CPU, no compute-sanitizer,
# the benchmark's CPU smoke test), to check this script; tests/packaging/test_test_files.py runs it.
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS=${LOGS:-/tmp/gpu_check}
mkdir -p "$LOGS"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
DRY=${GPU_CHECK_DRY:-0}
# the package from src/ with the carried library (a dry run: the package installed for $PY)
[ "$DRY" = 1 ] || export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
BUDGET=${GPU_CHECK_BUDGET:-420}
TESTS_S=${TESTS_S:-210}
MEMCHECK_S=${MEMCHECK_S:-120}
BENCH_MIN_S=${BENCH_MIN_S:-60}
# memcheck: the kernels of every plan, the error protocol and the COO offsets, on small shapes (not the tag-wrap
# test: 2^16 calls under the sanitizer take minutes)
MEMCHECK_TESTS=${MEMCHECK_TESTS:-"gradcheck or bad_indptr or publish_only or ending_after or index_to_indptr or segment_coo or misaligned or infinity or special_values or matches_cpu_and_reference or gather_matches_cpu or scatter_ops_empty or scatter_ops_bad or bad_plan"}
START=$(date +%s)
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(lease)
status=0
SUMMARY="$LOGS/summary.md"
: >"$SUMMARY"
step() { printf '\n==> %s (%s, %ss into the run)\n' "$*" "$(date +%T)" "$(($(date +%s) - START))"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }
note() { echo "- $*" >>"$SUMMARY"; }
# limit NAME CAP: the seconds stage NAME may take: CAP, or what is left of the budget if less (0: nothing left)
limit() { local l; l=$(left); [ "$l" -lt "$2" ] && echo $((l > 0 ? l : 0)) || echo "$2"; }
# run_timed NAME SECONDS CMD...: CMD under `timeout`, its output in $LOGS/NAME.log; notes the outcome
run_timed() {
  local name=$1 secs=$2; shift 2
  if [ "$secs" -le 0 ]; then note "$name: not run (no time left of the ${BUDGET} s budget)"; status=1; return; fi
  step "$name (at most ${secs} s)"
  local t0 rc; t0=$(date +%s)
  timeout --signal=INT --kill-after=15 "$secs" "$@" >"$LOGS/$name.log" 2>&1; rc=$?
  tail -25 "$LOGS/$name.log"
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 130 ] || [ "$rc" -eq 137 ]; then
    note "$name: CUT SHORT after ${secs} s (its time limit): $(grep -E '[0-9]+ (passed|failed)' "$LOGS/$name.log" | tail -1)"
    status=1
  else
    note "$name: exit $rc in $(($(date +%s) - t0)) s: $(grep -E '[0-9]+ (passed|failed)|ERROR SUMMARY' "$LOGS/$name.log" | tail -1)"
    [ "$rc" -eq 0 ] || status=1
  fi
}

library_loads() {
  "$PY" -c 'import torch_segops as t, json; print(json.dumps(t.build_info()))' 2>&1
}

if [ "${1:-}" = prebuild ]; then  # on the CPU machine: nvcc builds for sm_90 here, the GPU machine only runs
  step "building _C.so for sm_90 (carry gpu-prebuilt to the GPU machine)"
  cmake -S . -B build-gpu-prebuilt -G Ninja -DTORCH_SEGOPS_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DTORCH_SEGOPS_CUDA_RESOURCE_USAGE=ON -DTORCH_SEGOPS_CUDA_SCATTER=ON >"$LOGS/prebuild.log" 2>&1 &&
    cmake --build build-gpu-prebuilt >>"$LOGS/prebuild.log" 2>&1 || { tail -50 "$LOGS/prebuild.log"; exit 1; }
  mkdir -p gpu-prebuilt && cp build-gpu-prebuilt/_C.so gpu-prebuilt/_C.so
  git rev-parse HEAD >gpu-prebuilt/commit.txt
  git status --porcelain -- src cmake CMakeLists.txt >>gpu-prebuilt/commit.txt
  step "the memory model's prediction of the quick benchmark (research/gpu_model/model.py)"
  "$PY" research/gpu_model/model.py --against "" --elems 4194304 --ops sum mean max logsumexp softmax gather \
    --markdown gpu-prebuilt/prediction.md \
    >"$LOGS/prediction.log" 2>&1 || { tail -20 "$LOGS/prediction.log"; echo "no prediction (see above)"; }
  ls -la gpu-prebuilt; exit 0
fi

if [ "$DRY" = 1 ]; then
  export TORCH_SEGOPS_CUDA_TESTS_DEVICE=cpu
  echo "dry run (GPU_CHECK_DRY=1): no GPU; tests/kernels/test_cuda.py's dry mode, no compute-sanitizer, the CPU benchmark"
else
  if [ -z "${TORCH_SEGOPS_LIBRARY:-}" ] && [ -f gpu-prebuilt/_C.so ]; then
    export TORCH_SEGOPS_LIBRARY="$PWD/gpu-prebuilt/_C.so"
    echo "prebuilt library of $(head -1 gpu-prebuilt/commit.txt) (now $(git rev-parse HEAD 2>/dev/null || echo '?'))"
  fi
  if [ -n "${TORCH_SEGOPS_LIBRARY:-}" ] && ! library_loads >"$LOGS/load.txt"; then
    echo "carried library $TORCH_SEGOPS_LIBRARY does not load:"; cat "$LOGS/load.txt"
    unset TORCH_SEGOPS_LIBRARY
  fi
  if [ -z "${TORCH_SEGOPS_LIBRARY:-}" ]; then
    step "building the CUDA library (no prebuilt one: this costs device time)"
    archs=${CUDAARCHS:-$("$PY" -c 'import torch; c = torch.cuda.get_device_capability(); print(f"{c[0]}{c[1]}-real")')}
    cmake -S . -B build-gpu -G Ninja -DTORCH_SEGOPS_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" >"$LOGS/build.log" 2>&1 &&
      cmake --build build-gpu >>"$LOGS/build.log" 2>&1 || { tail -50 "$LOGS/build.log"; exit 1; }
    export TORCH_SEGOPS_LIBRARY="$PWD/build-gpu/_C.so"
  fi
fi

info() {
  step info
  { if [ "$DRY" = 1 ]; then echo "no GPU (dry run)"; else
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; fi
    "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
    library_loads; } 2>&1 | tee "$LOGS/info.log"
}

tests() {
  # shellcheck disable=SC2086  # PYTEST_ARGS: extra pytest options, e.g. "-k 'not compile'"
  run_timed tests "$(limit tests "${1:-$TESTS_S}")" "$PY" -m pytest tests/kernels/test_cuda.py -q -ra -p no:cacheprovider \
    --durations=10 ${PYTEST_ARGS:-}
}

memcheck() {
  if [ "$DRY" = 1 ]; then note "memcheck: not run (dry run: no compute-sanitizer)"; return; fi
  # without torch's caching allocator: a cached block hides an overrun inside it
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 HYPOTHESIS_PROFILE=sanitizer run_timed memcheck "$(limit memcheck "${1:-$MEMCHECK_S}")" \
    compute-sanitizer --tool memcheck --error-exitcode 9 --target-processes all \
    "$PY" -m pytest tests/kernels/test_cuda.py -q -p no:cacheprovider -k "$MEMCHECK_TESTS"
}

bench() {  # the quick benchmark (2^22 elements)
  if [ "$DRY" = 1 ]; then
    run_timed bench "$(limit bench 120)" "$PY" benchmarks/bench_cuda.py --device cpu --ops sum softmax \
      --dists uniform --features 16 --dtypes float32
  else
    run_timed bench "$(limit bench "${1:-400}")" "$PY" benchmarks/bench_cuda.py --quick --markdown "$LOGS/bench-quick.md"
  fi
}

# The memory model's predicted table next to a measured bench_cuda.py markdown (needs g++; minutes of tracing:
# not for device time, see the lease plan).
model() {
  local measured=$1; shift
  step "memory model: predicted vs measured ($measured)"
  "$PY" research/gpu_model/model.py --against "$measured" --markdown "$LOGS/model-vs-$(basename "$measured")" "$@" 2>&1 \
    | tee "$LOGS/model.txt" || status=1
}

# The results file: the summary, the tails of the logs, the measured benchmark and the carried prediction.
results() {
  local md="$LOGS/gpu-check.md" gpu
  gpu=$(if [ "$DRY" = 1 ]; then echo "no GPU (dry run)"; else nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1; fi)
  {
    echo "# GPU check ($(date -u +%F), ${gpu})"
    echo
    echo "\`bash tools/gpu_check.sh ${stages[*]}\`: status $status, $(($(date +%s) - START)) s of a ${BUDGET} s budget;" \
      "library: ${TORCH_SEGOPS_LIBRARY:-the installed one} ($(head -1 gpu-prebuilt/commit.txt 2>/dev/null || git rev-parse HEAD 2>/dev/null))."
    echo; cat "$SUMMARY"
    [ -f "$LOGS/info.log" ] && { echo; echo '## Machine'; echo; echo '```'; cat "$LOGS/info.log"; echo '```'; }
    for name in tests memcheck bench; do
      [ -f "$LOGS/$name.log" ] || continue
      echo; echo "## $name (last lines)"; echo; echo '```'; tail -40 "$LOGS/$name.log"; echo '```'
    done
    if [ -f "$LOGS/bench-quick.md" ]; then echo; echo '## Measured (quick benchmark)'; echo; sed -n '/^|/,$p' "$LOGS/bench-quick.md"; fi
    if [ -f gpu-prebuilt/prediction.md ]; then
      echo; echo '## Predicted by the memory model before the run (gpu-prebuilt/prediction.md)'; echo; cat gpu-prebuilt/prediction.md
    fi
  } >"$md"
  echo "results: $md"
}

for stage in "${stages[@]}"; do
  case "$stage" in
  lease)  # the plan above, in one call
    info
    tests
    memcheck
    if [ "$(left)" -ge "$BENCH_MIN_S" ]; then bench "$(left)"; else note "bench: not run ($(left) s left, less than ${BENCH_MIN_S} s)"; fi ;;
  info) info ;;
  tests) tests ;;
  memcheck) memcheck ;;
  sanitizer)
    # A reduced set (SAN_TESTS): 3 examples per property (hypothesis profile sanitizer), the fixed edge cases.
    # initcheck: no kernel reads workspace memory it has not written (every keyed state is written, see
    # store_identity in device_primitives.cuh); synccheck: barriers and shuffles of the block kernel.
    for tool in ${SAN_TOOLS:-memcheck racecheck synccheck initcheck}; do
      PYTORCH_NO_CUDA_MEMORY_CACHING=1 HYPOTHESIS_PROFILE=sanitizer run_timed "sanitizer-$tool" "${SAN_TIMEOUT:-280}" \
        compute-sanitizer --tool "$tool" --error-exitcode 9 --target-processes all "$PY" -m pytest tests/kernels/test_cuda.py \
        -q -p no:cacheprovider -k "${SAN_TESTS:-not compile and not opcheck and not tag_wrap}"
    done ;;
  suite)
    # the packaging tests (recipe, environments) need rattler-build/py-rattler and run in CI; so does the
    # compile-only check of the CUDA build
    run_timed suite "${SUITE_TIMEOUT:-540}" "$PY" -m pytest tests -q -ra -p no:cacheprovider -n 8 --durations=10 \
      --ignore tests/packaging/test_recipe.py --ignore tests/packaging/test_recipe_e2e.py \
      --ignore tests/packaging/test_environments.py --ignore tests/packaging/test_cuda_build.py ;;
  bench) bench ;;
  benchfull)
    # shellcheck disable=SC2086  # BENCH_ARGS: extra options, e.g. "--ops sum softmax --reps 10"
    run_timed benchfull "${BENCH_TIMEOUT:-500}" "$PY" benchmarks/bench_cuda.py ${BENCH_ARGS:-} --markdown "$LOGS/bench-full.md" ;;
  kernels)  # every kernel launch per reduction plan (benchmarks/cuda_kernel_times.py, torch.profiler)
    run_timed kernels "${KERNELS_TIMEOUT:-300}" "$PY" benchmarks/cuda_kernel_times.py --markdown "$LOGS/kernel-times.md" ;;
  model)  # the model against the last full benchmark of this run (or the recorded H100 one); on the CPU machine
    f="$LOGS/bench-full.md"; [ -f "$f" ] || f=benchmarks/results/cuda-h100-2026-11-23.md
    model "$f" ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
results
step "done, status $status"
if [ -n "${OUT:-}" ] && [ "$OUT" != "$LOGS" ]; then  # the device tool brings back what is under $OUT
  mkdir -p "$OUT"
  cp "$LOGS/gpu-check.md" "$OUT/gpu-check.md"
  tar -czf "$OUT/gpu_check.tar.gz" -C "$LOGS" .
fi
exit $status
