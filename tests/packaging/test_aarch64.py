"""linux-aarch64: the sources cross-compile and link for aarch64 against the aarch64 torch wheel.

The cross compiler is Debian's g++-aarch64-linux-gnu (tools/bootstrap.sh installs it with apt-get; the
test is skipped, with that reason, only where there is no apt-get; with apt-get and no compiler it fails). The torch
is PyPI's torch==2.10.0 manylinux_2_28_aarch64 wheel (a +cpu build, ~140 MB, downloaded once without its
dependencies into the kept cache folder by tools/torch_wheels.py; only include/, libtorch_cpu, libc10 and
version.py are unpacked). The library is linked with -Wl,--no-undefined against that libtorch_cpu. It is built
unoptimised (-O0, as tests/packaging/test_torch_headers.py's builds: nothing here runs or inspects the generated code; every
source, template instance and call is still compiled, so the torch symbols it needs and its NEEDED entries are
those of the optimised build or more; docs/ci.md, "Compiling less").

Checked: the result is an aarch64 ELF64 shared object; its NEEDED entries are libtorch_cpu and the C/C++
runtime only (no CUDA, no x86 loader); the CPU kernels exist once, for the portable "baseline" path (GCC
vector extensions: GCC makes NEON instructions of their arithmetic but compares and selects them lane by lane,
see docs/conda.md): no AVX2 copy, no -mavx2 flag anywhere, and
build_info says cpu_isas "baseline". The op tests under qemu-user are run by tools/aarch64_qemu.py (not in
CI: an emulated torch is slow); see docs/conda.md, "linux-aarch64".
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import struct
import subprocess

import pytest

from tools import torch_wheels as tw

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CROSS_CXX = "aarch64-linux-gnu-g++"
EM_AARCH64, EM_X86_64 = 183, 62
ALLOWED_NEEDED = {"libtorch_cpu.so", "libc10.so", "libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6"}

pytestmark = pytest.mark.skipif(
    shutil.which(CROSS_CXX) is None and shutil.which("apt-get") is None,
    reason=f"{CROSS_CXX} not found and no apt-get to install it with: the linux-aarch64 cross build is not checked")


@pytest.fixture(scope="module", autouse=True)
def cross_compiler():
    assert shutil.which(CROSS_CXX), (f"{CROSS_CXX} not found: run tools/bootstrap.sh, which installs it with "
                                     "apt-get (g++-aarch64-linux-gnu)")


def cross_defines() -> dict:
    return {"CMAKE_SYSTEM_NAME": "Linux", "CMAKE_SYSTEM_PROCESSOR": "aarch64", "CMAKE_CXX_COMPILER": CROSS_CXX}


@pytest.fixture(scope="module")
def torch_tree():
    try:
        return tw.oldest_torch_dir("aarch64")
    except tw.WheelError as e:
        pytest.fail(f"the aarch64 torch wheel is needed for this check and could not be fetched: {e}")


@pytest.fixture(scope="module")
def built(torch_tree, tmp_path_factory):
    build_dir = tmp_path_factory.mktemp("aarch64")
    lib, log, seconds = tw.build_library(build_dir, torch_tree, defines=cross_defines(), optimize=False)
    print(f"cross-built for aarch64 in {seconds:.0f} s")
    return lib, log, build_dir


def elf_machine(path) -> tuple[int, int]:
    """(EI_CLASS, e_machine) of an ELF file."""
    with open(path, "rb") as fh:
        head = fh.read(20)
    assert head[:4] == b"\x7fELF", f"{path} is not an ELF file"
    return head[4], struct.unpack_from("<H", head, 18)[0]


def needed(path) -> set[str]:
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))


def symbols(path) -> str:
    return subprocess.run(["nm", "-C", str(path)], capture_output=True, text=True, check=True).stdout


def test_the_torch_is_the_aarch64_wheel(torch_tree):
    assert elf_machine(os.path.join(torch_tree, "lib", "libtorch_cpu.so")) == (2, EM_AARCH64)


def test_is_an_aarch64_shared_object(built):
    lib, _, _ = built
    assert elf_machine(lib) == (2, EM_AARCH64)  # ELFCLASS64, EM_AARCH64
    out = subprocess.run(["readelf", "-h", str(lib)], capture_output=True, text=True, check=True).stdout
    assert re.search(r"Type:\s+DYN", out) and re.search(r"Machine:\s+AArch64", out), out


def test_needed_entries(built):
    lib, _, _ = built
    have = needed(lib)
    assert "libtorch_cpu.so" in have, have
    assert have <= ALLOWED_NEEDED, f"unexpected NEEDED entries: {sorted(have - ALLOWED_NEEDED)}"


def test_linked_with_no_undefined_against_aarch64_libtorch(built, torch_tree):
    _, log, _ = built
    assert "-Wl,--no-undefined" in log and str(torch_tree) in log


def test_only_the_portable_cpu_kernels(built):
    lib, log, build_dir = built
    assert "torch_segops_cpu_avx2" not in log and "torch_segops_cpu_baseline" in log
    text = "".join(p.read_text() for p in build_dir.rglob("*") if p.name in ("build.ninja", "flags.make"))
    assert "torch_segops_cpu_baseline" in text and "-mavx" not in text and "avx2" not in text
    syms = symbols(lib)
    assert "isa_baseline::" in syms and "isa_avx2::" not in syms
    with open(lib, "rb") as fh:
        data = fh.read()
    assert b'"cpu_isas": "baseline"' in data and b'"variant": "cpu"' in data


def test_x86_configuration_does_have_the_avx2_kernels(tmp_path):
    """Control for the check above: configured for x86-64 (against the installed torch), the same
    CMakeLists compiles the kernels twice, once with -mavx2."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torch is not installed here")
    torch_dir = list(spec.submodule_search_locations)[0]
    cmd = ["cmake", "-S", REPO, "-B", str(tmp_path), f"-DTORCH_SEGOPS_TORCH_DIR={torch_dir}"]
    if shutil.which("ninja"):
        cmd += ["-G", "Ninja"]
    cp = subprocess.run(cmd, capture_output=True, text=True)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    text = "".join(p.read_text() for p in tmp_path.rglob("*") if p.name in ("build.ninja", "flags.make"))
    assert "torch_segops_cpu_avx2" in text and "-mavx2" in text
