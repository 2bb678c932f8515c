"""linux-aarch64: the sources cross-compile and link for aarch64 against the aarch64 torch wheel and Debian's arm64
Google Highway, and the CPU kernels' hot loops are NEON vector code.

The cross compiler is Debian's g++-aarch64-linux-gnu (tools/bootstrap.sh installs it with apt-get; the
test is skipped, with that reason, only where there is no apt-get; with apt-get and no compiler it fails). The torch
is PyPI's torch==2.10.0 manylinux_2_28_aarch64 wheel (a +cpu build, ~140 MB, downloaded once without its
dependencies into the kept cache folder by tools/torch_wheels.py; only include/, libtorch_cpu, libc10 and
version.py are unpacked). Highway is Debian's arm64 libhwy-dev and libhwy1 (the version of the machine's own
libhwy-dev), downloaded once by apt-get with a private state folder (the machine's dpkg is not touched) and
unpacked into the cache folder by tools/debian_arm64.py; CMake takes it through hwy_DIR (TORCH_SEGOPS_HWY=system).
The library is linked with -Wl,--no-undefined against that libtorch_cpu and libhwy.

One build. Every source is compiled unoptimised (-O0, as tests/packaging/test_torch_headers.py's builds: every
source, template instance and call is still compiled, so the torch and Highway symbols the library needs and
its NEEDED entries are those of the optimised build or more; docs/ci.md, "Compiling less"), except
src/csrc/cpu/kernels.cpp, which is compiled at the release's -O3 (a CMake project include sets that file's
COMPILE_OPTIONS): its object holds the CSR reductions' hot loops, disassembled below. That compile is the
build's longest step (about 30 CPU s more than at -O0; docs/ci.md, "Compiling less").

Checked: the result is an aarch64 ELF64 shared object; its NEEDED entries are libtorch_cpu, libhwy.so.1 and the
C/C++ runtime only (no CUDA, no x86 loader); the CPU kernels are compiled once, as the "baseline" object (no
avx2 or avx512 object, no -m flag anywhere; build_info says cpu_isas "baseline"), whose own compile command makes
Highway's NEON target the static target (a probe compiled with it); and the hot loops of that object (min/max
with arg over features and over one feature, the max and the exp of logsumexp and softmax, the float sums) are
vector code (tools/check_vector_code.py: NEON data processing against scalar floating-point compares, selects
and arithmetic). The check's control here: lane-by-lane code, a min/max-with-arg loop in GCC's 32-byte vector
extensions (the kernels' style before Highway, 9d7a82b, whose NEON build GCC compared and selected lane by
lane), compiled by the same GCC, fails it. The op tests under qemu-user are run by tools/aarch64_qemu.py (not
in CI: an emulated torch is slow); see docs/conda.md, "linux-aarch64".
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import struct
import subprocess

import pytest

from tools import check_vector_code as cvc
from tools import debian_arm64
from tools import torch_wheels as tw

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CROSS_CXX = debian_arm64.CROSS_CXX
EM_AARCH64, EM_X86_64 = 183, 62
ALLOWED_NEEDED = {"libtorch_cpu.so", "libc10.so", "libhwy.so.1", "libstdc++.so.6", "libm.so.6", "libgcc_s.so.1",
                  "libc.so.6"}
OPTIMISED_SOURCE = "src/csrc/cpu/kernels.cpp"
OPTIMISED_OBJECT = "torch_segops_cpu_baseline.dir/src/csrc/cpu/kernels.cpp.o"

pytestmark = pytest.mark.skipif(
    shutil.which(CROSS_CXX) is None and shutil.which("apt-get") is None,
    reason=f"{CROSS_CXX} not found and no apt-get to install it with: the linux-aarch64 cross build is not checked")


@pytest.fixture(scope="module", autouse=True)
def cross_compiler():
    assert shutil.which(CROSS_CXX), (f"{CROSS_CXX} not found: run tools/bootstrap.sh, which installs it with "
                                     "apt-get (g++-aarch64-linux-gnu)")


@pytest.fixture(scope="module")
def cross_defines() -> dict:
    try:
        return debian_arm64.cross_defines()  # Debian's arm64 Highway, downloaded once
    except RuntimeError as e:
        why = str(e)
    pytest.fail(f"Debian's arm64 libhwy-dev is needed for the cross build and could not be fetched: {why}")


@pytest.fixture(scope="module")
def torch_tree():
    try:
        return tw.oldest_torch_dir("aarch64")
    except tw.WheelError as e:
        pytest.fail(f"the aarch64 torch wheel is needed for this check and could not be fetched: {e}")


@pytest.fixture(scope="module")
def built(torch_tree, cross_defines, tmp_path_factory):
    build_dir = tmp_path_factory.mktemp("aarch64")
    include = tmp_path_factory.mktemp("aarch64-cmake") / "optimise_kernels.cmake"
    include.write_text(f'set_source_files_properties("{OPTIMISED_SOURCE}" PROPERTIES COMPILE_OPTIONS "-O3")\n')
    defines = dict(cross_defines, CMAKE_PROJECT_INCLUDE=str(include), CMAKE_EXPORT_COMPILE_COMMANDS="ON")
    try:
        lib, log, seconds = tw.build_library(build_dir, torch_tree, defines=defines, optimize=False)
    except RuntimeError as e:
        why = str(e)
    else:
        print(f"cross-built for aarch64 in {seconds:.0f} s")
        return lib, log, build_dir
    pytest.fail(f"the aarch64 cross build failed:\n{why}")


def compile_commands(build_dir) -> dict[str, list[str]]:
    """The build's compile commands (argument lists), by object file (relative to CMakeFiles/)."""
    with open(os.path.join(build_dir, "compile_commands.json")) as fh:
        entries = json.load(fh)
    out = {}
    for e in entries:
        args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
        obj = args[args.index("-o") + 1]
        out[obj.split("CMakeFiles/", 1)[-1]] = args
    return out


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


def test_highway_is_debians_arm64_package(cross_defines):
    """The arm64 libhwy of the version of the machine's libhwy-dev (where it has one)."""
    root = debian_arm64.hwy_root()
    version = (root / "VERSION").read_text().strip()
    mine = debian_arm64.machine_version("libhwy-dev")
    assert mine is None or version == mine, (version, mine)
    assert elf_machine(debian_arm64.hwy_lib_dir() / "libhwy.so.1") == (2, EM_AARCH64)
    assert cross_defines["hwy_DIR"] == str(debian_arm64.hwy_cmake_dir())


def test_is_an_aarch64_shared_object(built):
    lib, _, _ = built
    assert elf_machine(lib) == (2, EM_AARCH64)  # ELFCLASS64, EM_AARCH64
    out = subprocess.run(["readelf", "-h", str(lib)], capture_output=True, text=True, check=True).stdout
    assert re.search(r"Type:\s+DYN", out) and re.search(r"Machine:\s+AArch64", out), out


def test_needed_entries(built):
    lib, _, _ = built
    have = needed(lib)
    assert {"libtorch_cpu.so", "libhwy.so.1"} <= have, have  # libhwy: Highway's CPU detection (cpu/dispatch.cpp)
    assert have <= ALLOWED_NEEDED, f"unexpected NEEDED entries: {sorted(have - ALLOWED_NEEDED)}"


def test_linked_with_no_undefined_against_aarch64_libtorch_and_libhwy(built, torch_tree):
    _, log, build_dir = built
    assert "-Wl,--no-undefined" in log and str(torch_tree) in log
    hwy_dir = debian_arm64.hwy_cmake_dir()
    assert re.search(rf"Google Highway [0-9.]+, installed \({re.escape(str(hwy_dir))}\)", log), log[-3000:]
    link = "".join(p.read_text() for p in build_dir.rglob("*") if p.name in ("build.ninja", "link.txt"))
    assert str(debian_arm64.hwy_lib_dir() / "libhwy.so") in link


def test_the_kernels_are_the_baseline_object_only(built):
    lib, _, build_dir = built
    commands = compile_commands(build_dir)
    objects = {o.split(".dir/", 1)[0] for o in commands if o.startswith("torch_segops_cpu_")}
    assert objects == {"torch_segops_cpu_baseline"}, objects
    flagged = {o: [a for a in args if re.match(r"-m[a-z]", a)] for o, args in commands.items()}
    assert not any(flagged.values()), f"an instruction-set flag in the cross build: {flagged}"
    isa_list = (build_dir / "generated" / "cpu_isa_list.h").read_text()
    assert '#define TORCH_SEGOPS_CPU_ISAS "baseline"' in isa_list, isa_list
    syms = symbols(lib)
    assert "isa_baseline::" in syms and not re.search(r"isa_avx(2|512)::", syms)
    # Highway's own functions the -O0 objects left out of line: NEON's, not an x86 or the emulated target's
    assert "hwy::N_NEON::" in syms
    assert not re.search(r"hwy::N_(SSE\w*|AVX\w*|EMU128|SCALAR)::", syms), "a non-NEON Highway target"
    data = lib.read_bytes()
    assert b'"cpu_isas": "baseline"' in data and b'"variant": "cpu"' in data


PROBE = r"""
#include <hwy/highway.h>
#if !HWY_ARCH_ARM_A64
#error "not compiled for aarch64"
#endif
#ifdef HWY_NEON_WITHOUT_AES  /* Highway >= 1.1: NEON without the AES instructions, the baseline of armv8-a */
static_assert(HWY_STATIC_TARGET == HWY_NEON || HWY_STATIC_TARGET == HWY_NEON_WITHOUT_AES, "static target not NEON");
#else
static_assert(HWY_STATIC_TARGET == HWY_NEON, "Highway's static target is not NEON");
#endif
"""


def test_the_baseline_objects_static_target_is_neon(built, tmp_path):
    """The kernels' object compiled with its own command: Highway's static target there (hn) is NEON."""
    _, _, build_dir = built
    args = compile_commands(build_dir)[OPTIMISED_OBJECT]
    assert "-DSEGOPS_CPU_ISA=baseline" in args
    probe = tmp_path / "probe.cpp"
    probe.write_text(PROBE)
    keep, skip = [], 0
    for a in args:
        if skip:
            skip -= 1
        elif a in ("-o", "-c", "-MT", "-MF"):
            skip = 1
        elif a != "-MD":
            keep.append(a)
    cp = subprocess.run(keep + ["-fsyntax-only", str(probe)], capture_output=True, text=True, cwd=build_dir)
    assert cp.returncode == 0, cp.stderr[-3000:]


def test_hot_loops_are_vector_code(built):
    _, _, build_dir = built
    args = compile_commands(build_dir)[OPTIMISED_OBJECT]
    assert [a for a in args if re.fullmatch(r"-O\w*", a)][-1] == "-O3", "the kernels' object is not optimised"
    obj = build_dir / "CMakeFiles" / OPTIMISED_OBJECT
    counts = cvc.count(cvc.disassemble(str(obj)))
    print("\n".join(c.line() for c in counts))
    problems = cvc.problems(str(obj))
    assert not problems, "\n".join(problems)


# Lane-by-lane code: a min/max with arg over a block of 32 float features as GCC vector-extension vectors of
# 32 bytes, a strict compare selecting value and row (the kernels' style before Highway, 9d7a82b's
# cpu/reduce_piece.h Lanes), named as the check looks for the kernel.
LANE_BY_LANE = r"""
#include <cstdint>
#include <cstring>
namespace torch_segops { template <typename A, bool M> struct ArgExtremumOp { struct State { A v; int64_t arg; }; };
namespace cpu { template <typename T> struct ArrayLoad { const T* x; };
namespace isa_baseline {
typedef float V __attribute__((vector_size(32)));
typedef int32_t P __attribute__((vector_size(32)));
template <class Op, class Load>
__attribute__((noinline)) void extremum_piece(typename Op::State* st, const Load& load, int64_t F, int64_t count) {
  V m[4]; P idx[4];
  for (int v = 0; v < 4; ++v) { std::memcpy(&m[v], load.x + 8 * v, 32); idx[v] = P{}; }
  for (int64_t r = 1; r < count; ++r) {
    const P row = P{} + static_cast<int32_t>(r);
    for (int v = 0; v < 4; ++v) {
      V x; std::memcpy(&x, load.x + r * F + 8 * v, 32);
      const auto take = x > m[v];
      m[v] = take ? x : m[v]; idx[v] = take ? row : idx[v];
    }
  }
  for (int v = 0; v < 4; ++v) for (int l = 0; l < 8; ++l) st[8 * v + l] = {m[v][l], idx[v][l]};
}
template void extremum_piece<ArgExtremumOp<float, true>, ArrayLoad<float>>(ArgExtremumOp<float, true>::State*,
    const ArrayLoad<float>&, int64_t, int64_t);
}}}
"""


def test_the_check_fails_on_lane_by_lane_code(tmp_path):
    """Control: GCC's aarch64 lowering of a 32-byte vector-extension compare/select loop is lane by lane
    (fcmpe/fcsel on s registers), which the check reports as not vector code."""
    (tmp_path / "lanes.cpp").write_text(LANE_BY_LANE)
    obj = tmp_path / "lanes.o"
    subprocess.run([CROSS_CXX, "-std=c++17", "-O3", "-c", str(tmp_path / "lanes.cpp"), "-o", str(obj)], check=True)
    (c,) = cvc.count(cvc.disassemble(str(obj)), kernels=[cvc.HOT[0]])
    print(c.line())
    assert c.functions and not c.passes(), c.line()


def test_x86_configuration_does_have_the_x86_objects(tmp_path):
    """Control for the object checks above: configured for x86-64 (against the installed torch), the same
    CMakeLists compiles the kernels three times, with -mavx2 for the avx2 object."""
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
    assert "torch_segops_cpu_avx2" in text and "torch_segops_cpu_avx512" in text and "-mavx2" in text
