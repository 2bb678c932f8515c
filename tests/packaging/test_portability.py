"""osx and win: what of their builds can be checked on Linux (no macOS SDK, MSVC or Windows SDK here).

1. The platform seam: a scan of src/csrc for Linux-only headers and calls, OS APIs of the other platforms,
   and GCC/Clang-only constructs, each allowed only in src/csrc/platform.{h,cpp} (immintrin.h also inside
   an `#if defined(__AVX2__)` block), and `__linux__`/`_WIN32`/`__APPLE__` tested nowhere else.
2. Debian's clang with libc++ (the closest thing to Apple's toolchain; tools/bootstrap.sh installs clang,
   libc++-dev and libc++abi-dev with apt-get): every CPU translation unit, with -Werror -Wall -Wextra
   (torch's headers with -isystem), for x86-64 (baseline and avx2 kernels, as CMakeLists.txt compiles them),
   for x86-64 without GCC vector extensions (the path MSVC takes: -DSEGOPS_NO_VECTOR_EXT), and for aarch64
   (the arm64 kernels, when Debian's aarch64 cross headers are there). One warning is turned off:
   -Wbitwise-instead-of-logical, for the deliberate branch-free `(a | b) & !c` of bools in cpu/extremum_piece.h.
3. platform.cpp on its own: built with clang/libc++ and with g++, its x86-64-v3 check (cpuid + xgetbv under
   Clang, __builtin_cpu_supports under GCC) must agree with each other and with /proc/cpuinfo; its macOS
   side (dladdr, RTLD_NOLOAD) compiles with __APPLE__ defined and __linux__ undefined.
The Windows side (windows.h, __cpuidex, _xgetbv, __declspec) cannot be compiled here: only the scan covers it.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CSRC = REPO / "src" / "csrc"
SEAM = {"platform.h", "platform.cpp"}
CLANG = "clang++"
CMAKE = (REPO / "CMakeLists.txt").read_text()

# ---------------------------------------------------------------------------------------------
# 1. the source scan
# ---------------------------------------------------------------------------------------------

# (what, pattern): allowed only in the seam files
SEAM_ONLY = [
    ("POSIX/Linux/x86 header", r"#\s*include\s*<(dlfcn\.h|unistd\.h|sys/[\w/]+\.h|linux/[\w/]+\.h|pthread\.h|cpuid\.h|x86intrin\.h)>"),
    ("Windows/MSVC header", r"#\s*include\s*<(windows\.h|intrin\.h|psapi\.h)>"),
    ("madvise/mmap", r"\b(madvise|mmap|munmap|MADV_\w+)\b"),
    ("dynamic loader call", r"\b(dlopen|dlsym|dladdr|RTLD_\w+|GetProcAddress|GetModuleHandle\w*|LoadLibrary\w*)\b"),
    ("CPU feature query", r"\b(__builtin_cpu_\w+|__cpuid\w*|_xgetbv|xgetbv)\b"),
    ("GCC/Clang builtin", r"\b__builtin_\w+"),
    ("GCC/Clang attribute", r"__attribute__\s*\("),
    ("MSVC keyword", r"__declspec|\b__forceinline\b(?!__)"),
    ("platform macro", r"\b(__linux__|__APPLE__|_WIN32|_MSC_VER)\b"),
]


def sources() -> list[Path]:
    return sorted(p for p in CSRC.rglob("*") if p.suffix in (".h", ".cpp", ".cu", ".cuh"))


def code_lines(path: Path):
    """(line number, text) of the file without // comments."""
    for n, line in enumerate(path.read_text().splitlines(), 1):
        yield n, re.sub(r"//.*", "", line)


def test_the_scan_sees_the_sources():
    names = {p.relative_to(CSRC).as_posix() for p in sources()}
    assert {"platform.h", "platform.cpp", "cpu/reduce_piece.h", "cpu/segment_cpu.cpp", "cuda/segment_cuda.cu"} <= names


@pytest.mark.parametrize("what,pattern", SEAM_ONLY, ids=[w for w, _ in SEAM_ONLY])
def test_platform_specific_code_sits_in_the_seam(what, pattern):
    hits = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in sources() if p.name not in SEAM
            for n, line in code_lines(p) if re.search(pattern, line)]
    assert not hits, f"{what} outside src/csrc/platform.{{h,cpp}}:\n" + "\n".join(hits)
    in_seam = [p for p in sources() if p.name in SEAM and re.search(pattern, (CSRC / p.name).read_text())]
    assert in_seam, f"the pattern for {what} matches nothing in the seam either: is it still right?"


def test_immintrin_only_inside_an_avx2_guard():
    seen = 0
    for p in sources():
        depth_guard = []  # per open #if: whether it tests __AVX2__
        for n, line in code_lines(p):
            s = line.strip()
            if re.match(r"#\s*if", s):
                depth_guard.append("__AVX2__" in s)
            elif re.match(r"#\s*endif", s):
                depth_guard.pop()
            elif re.search(r"#\s*include\s*<immintrin\.h>", s):
                seen += 1
                assert any(depth_guard), f"{p.relative_to(REPO)}:{n}: immintrin.h outside #if defined(__AVX2__)"
    assert seen, "no immintrin.h include found: update this test"


def test_the_seam_has_every_platform_side():
    text = (CSRC / "platform.cpp").read_text()
    for needle in ("madvise", "GetProcAddress", "GetModuleHandleW", "dladdr", "dlsym", "__cpuidex", "_xgetbv",
                   "__builtin_cpu_supports", "defined(_WIN32)", "defined(__APPLE__)"):
        assert needle in text, needle
    header = (CSRC / "platform.h").read_text()
    for needle in ("__declspec(dllexport)", '__attribute__((visibility("default")))', "__forceinline", "_BitScanForward"):
        assert needle in header, needle


def test_cmake_isa_flags_per_compiler():
    """No x86 flag reaches arm64 or MSVC: -m flags for GCC/Clang, /arch:AVX2 for MSVC, avx2 only on x86-64."""
    assert re.search(r"if\(MSVC\)\s*\n\s*set\(_isa_flags_avx2 /arch:AVX2\)\s*\nelse\(\)\s*\n\s*set\(_isa_flags_avx2 -mavx2", CMAKE)
    assert re.search(r'if\(CMAKE_SYSTEM_PROCESSOR MATCHES "\^\(x86_64\|AMD64\|amd64\)\$" AND NOT CMAKE_OSX_ARCHITECTURES MATCHES "arm64"\)\s*\n\s*list\(APPEND TORCH_SEGOPS_CPU_ISAS avx2\)', CMAKE)
    assert re.search(r'if\(CMAKE_SYSTEM_NAME STREQUAL "Linux"\)[^\n]*\n\s*target_link_options\(torch_segops_C PRIVATE "LINKER:--as-needed"\)', CMAKE)


# ---------------------------------------------------------------------------------------------
# 2. clang with libc++, -Werror
# ---------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def libcxx_found() -> bool:
    if not shutil.which(CLANG):
        return False
    r = subprocess.run([CLANG, "-stdlib=libc++", "-x", "c++", "-fsyntax-only", "-"], input="#include <vector>\n",
                       capture_output=True, text=True)
    return r.returncode == 0


def need_clang():
    if libcxx_found():
        return
    if shutil.which("apt-get"):
        pytest.fail("clang++ with libc++ not found: run tools/bootstrap.sh, which installs clang, libc++-dev and "
                    "libc++abi-dev with apt-get")
    pytest.skip("clang++/libc++ not found and no apt-get to install them: the clang/libc++ check did not run")


@pytest.fixture(scope="module")
def torch_include() -> str:
    import importlib.util
    spec = importlib.util.find_spec("torch")
    assert spec is not None, "torch is not installed (tools/bootstrap.sh installs it)"
    inc = os.path.join(spec.submodule_search_locations[0], "include")
    assert os.path.exists(os.path.join(inc, "torch", "csrc", "stable", "library.h")), inc
    return inc


def defines() -> list[str]:
    target = re.search(r'TORCH_SEGOPS_TORCH_TARGET "([0-9]+)\.([0-9]+)"', CMAKE)
    version = (int(target.group(1)) << 56) | (int(target.group(2)) << 48)
    return [f"-DTORCH_TARGET_VERSION={version:#x}", '-DTORCH_SEGOPS_VERSION="0.0.0"',
            f'-DTORCH_SEGOPS_TORCH_TARGET="{target.group(1)}.{target.group(2)}"', '-DTORCH_SEGOPS_TORCH_HEADERS="check"']


def avx2_flags() -> list[str]:
    return re.search(r"else\(\)\s*\n\s*set\(_isa_flags_avx2 ([^)]*)\)", CMAKE).group(1).split()


def library_sources() -> list[str]:
    block = re.search(r"add_library\(torch_segops_C SHARED\n(.*?)\)", CMAKE, re.S).group(1)
    return block.split()


def aarch64_sysroot() -> bool:
    return Path("/usr/aarch64-linux-gnu/include/stdio.h").exists()


# (id, compiler arguments); the kernels as CMakeLists.txt compiles them, once per instruction set
def units() -> list[tuple[str, list[str]]]:
    out = []
    for src in library_sources():
        out.append((f"x86_64:{src}", ["-DTORCH_SEGOPS_CPU_AVX2", src]))
        out.append((f"aarch64:{src}", ["--target=aarch64-linux-gnu", src]))
    kernels = "src/csrc/cpu/kernels.cpp"
    out += [("x86_64:kernels/baseline", ["-DSEGOPS_CPU_ISA=baseline", kernels]),
            ("x86_64:kernels/avx2", ["-DSEGOPS_CPU_ISA=avx2", *avx2_flags(), kernels]),
            ("x86_64-novec:kernels/baseline", ["-DSEGOPS_NO_VECTOR_EXT", "-DSEGOPS_CPU_ISA=baseline", kernels]),
            ("x86_64-novec:kernels/avx2", ["-DSEGOPS_NO_VECTOR_EXT", "-DSEGOPS_CPU_ISA=avx2", *avx2_flags(), kernels]),
            ("aarch64:kernels/baseline", ["--target=aarch64-linux-gnu", "-DSEGOPS_CPU_ISA=baseline", kernels])]
    return out


def test_cpu_units_cover_the_library():
    """Every C++ source of the library is checked (the CUDA ones need nvcc: tests/packaging/test_cuda_build.py)."""
    srcs = library_sources()
    assert srcs and all(s.endswith(".cpp") for s in srcs), srcs
    assert "src/csrc/platform.cpp" in srcs


@pytest.mark.parametrize("name,args", units(), ids=[u[0] for u in units()])
def test_clang_libcxx_werror(name, args, torch_include):
    need_clang()
    if name.startswith("aarch64") and not aarch64_sysroot():
        if shutil.which("apt-get"):
            pytest.fail("no aarch64 C headers (/usr/aarch64-linux-gnu): tools/bootstrap.sh installs g++-aarch64-linux-gnu")
        pytest.skip("no aarch64 C headers (/usr/aarch64-linux-gnu) and no apt-get: the arm64 compile did not run")
    cmd = [CLANG, "-std=c++17", "-stdlib=libc++", "-fsyntax-only", "-Werror", "-Wall", "-Wextra",
           "-Wno-bitwise-instead-of-logical", "-isystem", torch_include, "-I", str(CSRC), *defines(), *args]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr[-6000:]}"


# ---------------------------------------------------------------------------------------------
# 3. platform.cpp on its own
# ---------------------------------------------------------------------------------------------

MAIN = r"""
#include <cstdio>
#include "platform.h"
int main() {
  std::printf("%d %d %d\n", torch_segops::platform::cpu_has_x86_64_v3() ? 1 : 0,
              torch_segops::platform::torch_cpu_symbol("torch_exception_get_what_without_backtrace") == nullptr,
              torch_segops::lowest_bit(0x50u));
}
"""


def cpuinfo_has_v3() -> bool | None:
    """x86-64-v3 as the kernel reports it (it clears avx where the OS does not save YMM state)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    flags = set(re.search(r"^flags\s*:(.*)$", text, re.M).group(1).split())
    return {"avx", "avx2", "fma", "f16c", "bmi1", "bmi2"} <= flags


@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64", reason="x86-64 Linux only")
def test_cpu_check_agrees_across_compilers(tmp_path):
    need_clang()
    (tmp_path / "main.cpp").write_text(MAIN)
    results = {}
    for cxx, extra in ((CLANG, ["-stdlib=libc++"]), ("g++", [])):
        exe = tmp_path / f"main_{cxx.replace('+', 'x')}"
        subprocess.run([cxx, "-std=c++17", "-Werror", "-Wall", "-Wextra", *extra, "-I", str(CSRC),
                        str(CSRC / "platform.cpp"), str(tmp_path / "main.cpp"), "-o", str(exe), "-ldl"], check=True)
        results[cxx] = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    assert results[CLANG] == results["g++"], results
    v3, no_torch, bit = results["g++"]
    assert (no_torch, bit) == ("1", "4")  # libtorch_cpu is not loaded in this program; lowest bit of 0b1010000
    expected = cpuinfo_has_v3()
    if expected is not None:
        assert v3 == ("1" if expected else "0"), (v3, expected)


def test_platform_cpp_macos_side_compiles(tmp_path, torch_include):
    """__APPLE__ defined, __linux__ not: the dladdr branch and torch's shim header. libstdc++ (libc++ under a faked
    __APPLE__ wants the macOS SDK); TargetConditionals.h, which torch's Macros.h includes on Apple, is an empty stub."""
    need_clang()
    (tmp_path / "TargetConditionals.h").write_text("")
    cmd = [CLANG, "-std=c++17", "-fsyntax-only", "-Werror", "-Wall", "-Wextra", "-U__linux__", "-U__gnu_linux__",
           "-Ulinux", "-D__APPLE__", "-isystem", str(tmp_path), "-isystem", torch_include, "-I", str(CSRC),
           *defines(), str(CSRC / "platform.cpp")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    # and the branch really is the macOS one: a deliberate error inside it is reported
    broken = tmp_path / "platform_probe.cpp"
    broken.write_text((CSRC / "platform.cpp").read_text().replace("Dl_info info;", "Dl_info info; static_assert(false, \"apple\");"))
    r = subprocess.run(cmd[:-1] + [str(broken)], capture_output=True, text=True)
    assert "apple" in r.stderr, r.stderr[-2000:]


# ---------------------------------------------------------------------------------------------
# 4. the Python side: the library file check before loading it
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("platform,good", [("darwin", b"\xcf\xfa\xed\xfe" + bytes(60)), ("win32", b"MZ" + bytes(62))])
def test_library_file_check_per_platform(tmp_path, platform, good):
    """macOS and Windows libraries are not ELF: their magic is checked there, the ELF checks elsewhere."""
    from torch_segops._libfile import library_file_problem

    lib = tmp_path / "_C.so"
    lib.write_bytes(good)
    assert library_file_problem(str(lib), platform) is None
    assert "an ELF file starts with 7f 45 4c 46" in library_file_problem(str(lib), "linux")  # ELF rules on Linux
    lib.write_bytes(b"\x7fELF" + bytes(60))
    assert "starts with 7f 45 4c 46" in library_file_problem(str(lib), platform)
    lib.write_bytes(b"")
    assert "starts with nothing" in library_file_problem(str(lib), platform)
    os.mkfifo(tmp_path / "fifo")
    assert "not a regular file" in library_file_problem(str(tmp_path / "fifo"), platform)
