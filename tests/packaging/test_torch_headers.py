"""The sources compile and link against the OLDEST supported torch (2.10), not only the installed one.

The library targets the LibTorch stable ABI of torch 2.10 (TORCH_SEGOPS_TORCH_TARGET) so that one binary
loads in every newer torch. Newer headers still offer newer APIs (a 2.13-only macro was once used by
mistake and only a GPU run found it), so CI also builds against torch 2.10's own headers and libtorch_cpu:

- the 2.10 wheel (PyPI's torch==2.10.0, a cu128 build) is downloaded once without its dependencies into
  the kept cache folder (tools/torch_wheels.py; ~0.9 GB, ~20 s here) and only include/, libtorch_cpu,
  libc10 and version.py are unpacked;
- the whole library, CPU and CUDA sources (nvcc, PTX for compute_75 only: the host code and headers are
  what matters here) is built against that tree and linked with -Wl,--no-undefined, so every stable-C-shim
  function it calls must be exported by torch 2.10's libtorch_cpu (the CUDA stream getter by the
  libtorch_cuda stub of cmake/cuda.cmake). The build is unoptimised (-O0, nvcc -Ofc=max: every source and
  template instance compiled, every call kept, so the torch shim symbols the library needs are those of the
  optimised build or more): this module took 274 CPU s for both builds (2026-11-27), the two -O3 builds about
  1,050 (525 + 549 s of CI wall with both cores busy);
- two controls show the check has teeth: a 2.13-only macro fails to compile against the 2.10 headers (and
  compiles against the installed newer ones), a 2.13-only shim function fails to link against 2.10's
  libtorch_cpu (and links against the installed one).

The installed torch (2.13 in CI, tools/bootstrap.sh) is built against by tools/bootstrap.sh (CPU) and
tests/packaging/test_cuda_build.py (CUDA); the newest supported torch (tw.NEWEST, 2.14) is built against here too
(its wheel, like 2.10's, without dependencies), so an API removed or changed after 2.13 fails in CI.
A failed download fails the test (it is not skipped): the check is part of CI.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess

import pytest

from tools import cuda_linkage, cuda_toolchain
from tools import torch_wheels as tw

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

NVCC = cuda_toolchain.find_nvcc()
_spec = importlib.util.find_spec("torch")
INSTALLED = list(_spec.submodule_search_locations)[0] if _spec and _spec.submodule_search_locations else None
OLDEST_MINOR = ".".join(tw.OLDEST.split(".")[:2])
CUDA_ARCHS = "75-virtual"  # host code of the .cu and the device front end; no ptxas/SASS needed here

# The controls: APIs of torch 2.13 that torch 2.10 lacks (found by diffing the two wheels' headers and
# the exports of their libtorch_cpu).
NEWER_MACRO_TU = r"""
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>
int planted(AtenTensorHandle t) {
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_delete_tensor_object(t));  // torch >= 2.13 only
  return 0;
}
"""
NEWER_SYMBOL_TU = r"""
extern "C" int aoti_torch_cpu_nonzero_static(void*, long, long, void**);  // exported from torch 2.13 on
extern "C" int planted(void* t, void** out) { return aoti_torch_cpu_nonzero_static(t, 4, -1, out); }
"""


# The CPU kernels as the baseline object alone: the sources of every object include the same torch headers, and
# the other objects' optimised builds are the pip build's and the packages' (docs/ci.md, "Compiling less")
BASELINE_ONLY = {"TORCH_SEGOPS_CPU_ISAS": "baseline"}


@pytest.fixture(scope="module")
def oldest():
    try:
        return tw.oldest_torch_dir()
    except tw.WheelError as e:
        pytest.fail(f"torch {tw.OLDEST}'s headers are needed for this check and could not be fetched: {e}")


@pytest.fixture(scope="module")
def built(oldest, tmp_path_factory):
    """_C.so built against torch 2.10 (CPU and, when nvcc is there, CUDA sources), --no-undefined."""
    lib, log, seconds = tw.build_library(tmp_path_factory.mktemp("oldest-headers"), oldest,
                                         cuda_archs=CUDA_ARCHS if NVCC else None, optimize=False, defines=BASELINE_ONLY)
    print(f"built against torch {tw.OLDEST} headers in {seconds:.0f} s (CUDA: {bool(NVCC)})")
    return lib, log


def _torch_version(tree) -> str:
    with open(os.path.join(tree, "version.py")) as fh:
        return re.search(r"^__version__\s*=\s*'([^']+)'", fh.read(), re.M).group(1)


def test_the_tree_is_the_oldest_torch(oldest):
    assert _torch_version(oldest).startswith(tw.OLDEST + "+"), _torch_version(oldest)
    assert os.path.isfile(os.path.join(oldest, "include", "torch", "csrc", "stable", "library.h"))
    # the headers are 2.10's: they predate the 2.11+ version macros
    with open(os.path.join(oldest, "include", "torch", "headeronly", "version.h")) as fh:
        assert "TORCH_VERSION_2_11_0" not in fh.read()


def test_library_builds_and_links_against_oldest_torch(built, oldest):
    lib, log = built
    assert "-Wl,--no-undefined" in log
    data = open(lib, "rb").read()
    assert f'"torch_headers": "{_torch_version(oldest)}"'.encode() in data
    assert f'"torch_target": "{OLDEST_MINOR}"'.encode() in data
    if NVCC:
        assert b'"variant": "cuda"' in data and "segment_cuda.cu" in log


@pytest.mark.xdist_group("torch-headers-newest")  # needs none of the module's fixtures: another worker may run it
def test_library_builds_and_links_against_newest_torch(tmp_path):
    try:
        newest = tw.torch_tree(tw.download_torch(tw.NEWEST))
    except tw.WheelError as e:
        pytest.fail(f"torch {tw.NEWEST}'s headers are needed for this check and could not be fetched: {e}")
    assert _torch_version(newest).startswith(tw.NEWEST + "+"), _torch_version(newest)
    lib, log, seconds = tw.build_library(tmp_path / "newest-headers", newest, cuda_archs=CUDA_ARCHS if NVCC else None,
                                         optimize=False, defines=BASELINE_ONLY)
    print(f"built against torch {tw.NEWEST} headers in {seconds:.0f} s (CUDA: {bool(NVCC)})")
    assert "-Wl,--no-undefined" in log
    data = open(lib, "rb").read()
    assert f'"torch_headers": "{_torch_version(newest)}"'.encode() in data
    assert f'"torch_target": "{OLDEST_MINOR}"'.encode() in data, "still built for the oldest torch's stable ABI"


def test_every_shim_symbol_is_exported_by_oldest_libtorch(built, oldest):
    """What --no-undefined enforced, spelled out: each torch symbol the library needs is in 2.10's
    libtorch_cpu, except the CUDA stream getter, which libtorch_cuda exports."""
    lib, _ = built
    out = subprocess.run(["nm", "-D", "--defined-only", os.path.join(oldest, "lib", "libtorch_cpu.so")],
                         capture_output=True, text=True, check=True).stdout
    defined = {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}
    used = {s for s, v in cuda_linkage.undefined_symbols(str(lib)) if not v and re.match(r"^(aoti_torch_|torch_)", s)}
    assert used, "the library uses no torch shim symbol?"
    assert used - defined <= {"aoti_torch_get_current_cuda_stream"}, used - defined


def _at_least(tree, minor: str) -> bool:
    have = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", _torch_version(tree)).groups())
    return have >= tuple(int(x) for x in minor.split("."))


def _flags(torch_dir):
    return ["-std=c++17", f"-DTORCH_TARGET_VERSION={tw.target_version_hex(OLDEST_MINOR)}",
            "-isystem", os.path.join(torch_dir, "include")]


def test_newer_only_macro_fails_against_oldest_headers(oldest, tmp_path):
    src = tmp_path / "planted.cpp"
    src.write_text(NEWER_MACRO_TU)
    cp = subprocess.run(["c++", "-fsyntax-only", *_flags(oldest), str(src)], capture_output=True, text=True)
    assert cp.returncode != 0 and "STABLE_TORCH_ERROR_CODE_CHECK" in cp.stderr, cp.stderr[-3000:]
    if INSTALLED and _at_least(INSTALLED, "2.13"):
        ok = subprocess.run(["c++", "-fsyntax-only", *_flags(INSTALLED), str(src)], capture_output=True, text=True)
        assert ok.returncode == 0, ("the control must compile against the installed torch "
                                    f"{_torch_version(INSTALLED)}:\n{ok.stderr[-3000:]}")


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
def test_newer_only_shim_symbol_fails_to_link_against_oldest_libtorch(oldest, tmp_path):
    src = tmp_path / "planted.cpp"
    src.write_text(NEWER_SYMBOL_TU)

    def link(torch_dir):
        return subprocess.run(["c++", "-shared", "-fPIC", str(src), "-o", str(tmp_path / "planted.so"),
                               "-Wl,--no-undefined", os.path.join(torch_dir, "lib", "libtorch_cpu.so")],
                              capture_output=True, text=True)
    cp = link(oldest)
    assert cp.returncode != 0 and "aoti_torch_cpu_nonzero_static" in cp.stderr, cp.stderr[-3000:]
    if INSTALLED and _at_least(INSTALLED, "2.13"):
        ok = link(INSTALLED)
        assert ok.returncode == 0, ok.stderr[-3000:]


def test_compat_points_at_a_recorded_matrix():
    """data/compat.yaml's stable-ABI row names the recorded matrix run (tools/torch_matrix.py), and that
    record shows every listed torch version passing with the one binary."""
    import yaml
    with open(os.path.join(REPO, "data", "compat.yaml")) as fh:
        row = yaml.safe_load(fh)["stable_abi"]
    path = os.path.join(REPO, row["verified_by"])
    assert os.path.isfile(path), path
    text = open(path).read()
    assert row["verified_torch"][0] == row["min_torch"]
    for minor in row["verified_torch"]:
        lines = [ln for ln in text.splitlines() if re.match(rf"^\| {re.escape(minor)}\.\d+\+\w+ \|", ln)]
        assert lines and all("| PASS:" in ln for ln in lines), f"torch {minor}: {lines}"
