"""osx and win: what of their builds can be checked on Linux (no macOS SDK, MSVC or Windows SDK here).

1. The platform seam: a scan of src/csrc for Linux-only headers and calls, OS APIs of the other platforms,
   and GCC/Clang-only constructs, each allowed only in src/csrc/platform.{h,cpp}, and `__linux__`/`_WIN32`/
   `__APPLE__` tested nowhere else. No hand-written CPU detection anywhere: Google Highway's
   (hwy::SupportedTargets, cpu/dispatch.cpp) picks the kernel object; intrinsics only in cpu/simd.h, under a
   target test. The avx2 object's flags make Highway's static target AVX2 (GCC and Clang; MSVC's rule).
2. Debian's clang with libc++ (the closest thing to Apple's toolchain; tools/bootstrap.sh installs clang,
   libc++-dev and libc++abi-dev with apt-get): every CPU translation unit, with -Werror -Wall -Wextra
   (torch's and Highway's headers as system headers), for x86-64 (the baseline, avx2 and avx512 kernels,
   as CMakeLists.txt compiles them), and for aarch64 (the arm64 kernels, when Debian's aarch64 cross headers are
   there). One warning is turned off: -Wbitwise-instead-of-logical, for the deliberate branch-free
   `(a | b) & !c` of bools in cpu/extremum_piece.h.
3. platform.cpp on its own: built with clang/libc++ and with g++, its answers agree; its macOS side (dladdr,
   RTLD_NOLOAD) compiles with __APPLE__ defined and __linux__ undefined.
The Windows side (windows.h, __declspec) cannot be compiled here: only the scan covers it.
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
    ("POSIX/Linux/x86 header", r"#\s*include\s*<(dlfcn\.h|unistd\.h|sys/[\w/]+\.h|linux/[\w/]+\.h|pthread\.h|x86intrin\.h)>"),
    ("Windows/MSVC header", r"#\s*include\s*<(windows\.h|intrin\.h|psapi\.h)>"),
    ("madvise/mmap", r"\b(madvise|mmap|munmap|MADV_\w+)\b"),
    ("dynamic loader call", r"\b(dlopen|dlsym|dladdr|RTLD_\w+|GetProcAddress|GetModuleHandle\w*|LoadLibrary\w*)\b"),
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


# CPU feature queries: x86 (cpuid, xgetbv, GCC's builtins), Linux/aarch64 (the auxiliary vector), macOS, Windows
CPU_DETECTION = (r"\b(__builtin_cpu_\w+|__cpuid\w*|_xgetbv|xgetbv|getauxval|AT_HWCAP\w*|HWCAP_\w+|sysctlbyname|"
                 r"IsProcessorFeaturePresent)\b|#\s*include\s*<(cpuid\.h|sys/auxv\.h)>")


def test_no_hand_written_cpu_detection():
    """Google Highway's detection (hwy::SupportedTargets, in libhwy) picks the kernel object (cpu/dispatch.cpp);
    no source, the seam included, asks the CPU itself."""
    hits = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in sources() for n, line in code_lines(p)
            if re.search(CPU_DETECTION, line)]
    assert not hits, "hand-written CPU detection:\n" + "\n".join(hits)
    assert "hwy::SupportedTargets()" in (CSRC / "cpu" / "dispatch.cpp").read_text()
    removed = ["__builtin_cpu_supports(\"avx2\")", "__cpuidex(r, 7, 0);", "_xgetbv(0)", "#include <cpuid.h>",
               "getauxval(AT_HWCAP) & HWCAP_ASIMD"]  # what the scan catches (platform.cpp's code before #39)
    assert all(re.search(CPU_DETECTION, s) for s in removed)


# x86 and NEON intrinsics, and their headers (Highway includes the target's own)
INTRINSICS = r"\b_mm\d*_\w+|\bv\w+q_f32\b|#\s*include\s*<(immintrin|arm_neon|intrin)\.h>"


def test_intrinsics_only_in_the_simd_helpers():
    """The kernels are Highway code; the few instructions Highway 1.0 has no operation for (haddps, movmskps,
    faddp, unordered compares) are in cpu/simd.h alone, each inside a target test (SEGOPS_X86_*, SEGOPS_A64_NEON). SSE2 lacks haddps: pair_add shuffles there."""
    hits = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in sources() if p.name not in SEAM
            and p.relative_to(CSRC).as_posix() != "cpu/simd.h" for n, line in code_lines(p) if re.search(INTRINSICS, line)]
    assert not hits, "intrinsics outside cpu/simd.h:\n" + "\n".join(hits)
    guards, seen = [], 0
    for n, line in code_lines(CSRC / "cpu" / "simd.h"):
        s = line.strip()
        if re.match(r"#\s*if", s):
            guards.append(s)
        elif re.match(r"#\s*el", s):
            guards[-1] = s
        elif re.match(r"#\s*endif", s):
            guards.pop()
        elif re.search(INTRINSICS, s):
            seen += 1
            assert guards and re.search(r"SEGOPS_(X86_SIMD|X86_SSE2|X86_AVX512|A64_NEON)", guards[-1]), f"cpu/simd.h:{n}: {s}"
    assert seen, "no intrinsic found in cpu/simd.h: update this test"


def test_the_seam_has_every_platform_side():
    text = (CSRC / "platform.cpp").read_text()
    for needle in ("madvise", "GetProcAddress", "GetModuleHandleW", "dladdr", "dlsym", "defined(_WIN32)",
                   "defined(__APPLE__)"):
        assert needle in text, needle
    header = (CSRC / "platform.h").read_text()
    for needle in ("__declspec(dllexport)", '__attribute__((visibility("default")))', "__forceinline", "_BitScanForward"):
        assert needle in header, needle


def test_cmake_isa_flags_per_compiler():
    """No x86 flag reaches arm64 or MSVC: -m flags for GCC/Clang, /arch:AVX2 for MSVC, the avx2 object only on
    x86-64, the avx512 one there too but not with MSVC (Highway's AVX3 target is marked broken there: under
    /arch:AVX512 its static target is AVX2 again, tests below)."""
    assert re.search(r"if\(MSVC\)\s*\n\s*set\(_isa_flags_avx2 /arch:AVX2\)\s*\nelse\(\)[^\n]*\n\s*set\(_isa_flags_avx2 -mavx2", CMAKE)
    assert isa_flags("avx512")[:len(avx2_flags())] == avx2_flags()
    assert {"-mavx512f", "-mavx512cd", "-mavx512vl", "-mavx512dq", "-mavx512bw"} <= set(isa_flags("avx512"))
    assert re.search(r'if\(CMAKE_SYSTEM_PROCESSOR MATCHES "\^\(x86_64\|AMD64\|amd64\)\$" AND NOT CMAKE_OSX_ARCHITECTURES MATCHES "arm64"\)\s*\n\s*list\(APPEND _isa_default avx2\)'
                     r'\s*\n\s*if\(NOT MSVC\)[^\n]*\n\s*list\(APPEND _isa_default avx512\)', CMAKE)
    # the sse4 object (on request) is known to GCC/Clang builds on x86-64 only: MSVC has no flag for Highway's SSE4
    assert re.search(r'if\(MSVC\)\s*\n\s*set\(_isa_known \$\{_isa_default\}\)\s*\n\s*else\(\)[^\n]*\n\s*set\(_isa_known baseline sse4 avx2 avx512\)', CMAKE)
    assert isa_flags("sse4") == ["-msse4.2", "-mpopcnt", "-mpclmul", "-maes"]
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
    return re.search(r"else\(\)[^\n]*\n\s*set\(_isa_flags_avx2 ([^)]*)\)", CMAKE).group(1).split()


def isa_flags(isa: str) -> list[str]:
    """The GCC/Clang flags of an object in CMakeLists.txt (${_isa_flags_avx2} expanded)."""
    flags = re.findall(rf"\n\s*set\(_isa_flags_{isa} ([^)]*)\)", CMAKE)[-1].split()
    return [f for g in flags for f in (avx2_flags() if g == "${_isa_flags_avx2}" else [g])]


X86_64_V3 = ["-mavx2", "-mfma", "-mf16c", "-mbmi", "-mbmi2", "-mlzcnt", "-mmovbe"]
# Highway's AVX2 target: AVX2, BMI2, FMA, F16C and its SSE4 target, which needs PCLMUL and AES (hwy/detect_targets.h)
STATIC_TARGET_PROBE = "#include <hwy/detect_targets.h>\nstatic_assert(HWY_STATIC_TARGET == HWY_AVX2, \"not AVX2\");\n"


def preprocess(compiler: str, flags: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    probe = tmp_path / "static_target.cpp"
    probe.write_text(STATIC_TARGET_PROBE)
    return subprocess.run([compiler, "-std=c++17", "-fsyntax-only", *flags, str(probe)], capture_output=True, text=True)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 compilers only")
@pytest.mark.parametrize("compiler", ["g++", CLANG])
def test_avx2_flags_make_highways_static_target_avx2(compiler, tmp_path):
    """The avx2 object is Highway's AVX2 static target (kernels.cpp stops the build otherwise; cpu/dispatch.cpp
    runs it where hwy::SupportedTargets has HWY_AVX2): x86-64-v3's flags and -mpclmul -maes. Without those two,
    Highway's static target drops to SSSE3."""
    if compiler == CLANG:
        need_clang()
    hwy_include()
    flags = avx2_flags()
    assert set(X86_64_V3 + ["-mpclmul", "-maes"]) <= set(flags), flags
    r = preprocess(compiler, flags, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    r = preprocess(compiler, [f for f in flags if f not in ("-mpclmul", "-maes")], tmp_path)
    assert r.returncode != 0 and "not AVX2" in r.stderr, r.stderr[-3000:]


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 compilers only")
@pytest.mark.parametrize("compiler", ["g++", CLANG])
def test_sse4_flags_make_highways_static_target_sse4(compiler, tmp_path):
    """The sse4 object (built on request) is Highway's SSE4 static target: SSE4.2 with PCLMUL and AES (kernels.cpp
    stops the build otherwise); without -mpclmul -maes it would be SSSE3."""
    if compiler == CLANG:
        need_clang()
    hwy_include()
    probe = tmp_path / "sse4.cpp"
    probe.write_text(STATIC_TARGET_PROBE.replace("HWY_AVX2", "HWY_SSE4").replace("not AVX2", "not SSE4"))
    for flags, ok in ((isa_flags("sse4"), True), (["-msse4.2", "-mpopcnt"], False)):
        r = subprocess.run([compiler, "-std=c++17", "-fsyntax-only", *flags, str(probe)], capture_output=True, text=True)
        assert (r.returncode == 0) == ok and (ok or "not SSE4" in r.stderr), (flags, r.stderr[-3000:])


def test_msvc_arch_avx2_is_highways_avx2_target(tmp_path):
    """MSVC defines no per-feature macros: Highway takes __AVX2__ (/arch:AVX2 defines __AVX__ and __AVX2__) for
    its whole AVX2 target. Checked on Highway's headers with MSVC's predefined macros of an x64 /arch:AVX2
    build in place of the compiler's own (a model of MSVC: conda-forge's win-64 build compiles the real one)."""
    need_clang()
    hwy_include()
    msvc = ["-U__GNUC__", "-U__clang__", "-U__x86_64__", "-D_MSC_VER=1930", "-D_M_X64=100", "-D_M_AMD64=100",
            "-Wno-builtin-macro-redefined"]
    assert re.search(r"if\(MSVC\)\s*\n\s*set\(_isa_flags_avx2 /arch:AVX2\)", CMAKE)
    r = preprocess(CLANG, [*msvc, "-D__AVX__", "-D__AVX2__"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    r = preprocess(CLANG, [*msvc, "-D__AVX__"], tmp_path)  # /arch:AVX: not the AVX2 target
    assert r.returncode != 0 and "not AVX2" in r.stderr, r.stderr[-3000:]
    # /arch:AVX512 gives AVX2 again (Highway marks AVX3 broken under MSVC): why CMake builds no avx512 object there
    avx512 = ["-D__AVX__", "-D__AVX2__", *(f"-D__AVX512{x}__" for x in ("F", "CD", "BW", "DQ", "VL"))]
    r = preprocess(CLANG, [*msvc, *avx512], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]


def library_sources() -> list[str]:
    block = re.search(r"add_library\(torch_segops_C SHARED\n(.*?)\)", CMAKE, re.S).group(1)
    return block.split()


def hwy_include() -> str:
    """The folder that holds Highway's hwy/ headers (Debian's libhwy-dev: /usr/include), alone: x86-64's
    /usr/include must not reach the aarch64 compile."""
    header = Path("/usr/include/hwy/highway.h")
    if not header.exists():
        if shutil.which("apt-get"):
            pytest.fail("no Highway headers (/usr/include/hwy): tools/bootstrap.sh installs libhwy-dev with apt-get")
        pytest.skip("no Highway headers (/usr/include/hwy) and no apt-get: the clang/libc++ compile did not run")
    return str(_hwy_only_include())


@functools.lru_cache(maxsize=None)
def _hwy_only_include() -> Path:
    import tempfile
    folder = Path(tempfile.mkdtemp(prefix="hwy-include-"))
    (folder / "hwy").symlink_to("/usr/include/hwy")
    return folder


def aarch64_sysroot() -> bool:
    return Path("/usr/aarch64-linux-gnu/include/stdio.h").exists()


def isa_list_header(folder: Path, isas: list[str]) -> Path:
    """cpu_isa_list.h as CMakeLists.txt generates it (its file(CONFIGURE) template) for the objects `isas`."""
    template = re.search(r'file\(CONFIGURE OUTPUT "\$\{CMAKE_BINARY_DIR\}/generated/cpu_isa_list\.h" CONTENT\s*'
                         r'"((?:[^"\\]|\\.)*)"\)', CMAKE).group(1)
    text = (template.replace("${_isa_x}", " ".join(f"X({i})" for i in isas)).replace("${_isa_csv}", ",".join(isas))
            .replace("\\n", "\n").replace('\\"', '"'))
    assert "${" not in text, text
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cpu_isa_list.h").write_text(text)
    return folder


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict[str, Path]:
    """The generated-header folder of an x86-64 build (baseline, avx2, avx512) and of an aarch64 one (baseline)."""
    base = tmp_path_factory.mktemp("generated")
    return {"x86_64": isa_list_header(base / "x86_64", ["baseline", "avx2", "avx512"]),
            "aarch64": isa_list_header(base / "aarch64", ["baseline"])}


# (id, compiler arguments); the kernels as CMakeLists.txt compiles them, once per instruction set
def units() -> list[tuple[str, list[str]]]:
    out = []
    for src in library_sources():
        out.append((f"x86_64:{src}", [src]))
        out.append((f"aarch64:{src}", ["--target=aarch64-linux-gnu", src]))
    kernels = "src/csrc/cpu/kernels.cpp"
    out += [("x86_64:kernels/baseline", ["-DSEGOPS_CPU_ISA=baseline", kernels]),
            ("x86_64:kernels/avx2", ["-DSEGOPS_CPU_ISA=avx2", *avx2_flags(), kernels]),
            ("x86_64:kernels/avx512", ["-DSEGOPS_CPU_ISA=avx512", *isa_flags("avx512"), kernels]),
            ("aarch64:kernels/baseline", ["--target=aarch64-linux-gnu", "-DSEGOPS_CPU_ISA=baseline", kernels])]
    return out


def test_cpu_units_cover_the_library():
    """Every C++ source of the library is checked (the CUDA ones need nvcc: tests/packaging/test_cuda_build.py)."""
    srcs = library_sources()
    assert srcs and all(s.endswith(".cpp") for s in srcs), srcs
    assert "src/csrc/platform.cpp" in srcs


@pytest.mark.parametrize("name,args", units(), ids=[u[0] for u in units()])
def test_clang_libcxx_werror(name, args, torch_include, generated):
    need_clang()
    if name.startswith("aarch64") and not aarch64_sysroot():
        if shutil.which("apt-get"):
            pytest.fail("no aarch64 C headers (/usr/aarch64-linux-gnu): tools/bootstrap.sh installs g++-aarch64-linux-gnu")
        pytest.skip("no aarch64 C headers (/usr/aarch64-linux-gnu) and no apt-get: the arm64 compile did not run")
    cmd = [CLANG, "-std=c++17", "-stdlib=libc++", "-fsyntax-only", "-Werror", "-Wall", "-Wextra",
           "-Wno-bitwise-instead-of-logical",
           "-Wno-pragma-clang-attribute",  # HWY_BEFORE_NAMESPACE around a header region with no function (avx512: arg_extremum_rows16.h)
           "-isystem", torch_include, "-isystem", hwy_include(), "-I", str(CSRC),
           "-I", str(generated[name.split(":")[0].split("-")[0]]), *defines(), *args]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr[-6000:]}"


# ---------------------------------------------------------------------------------------------
# 3. platform.cpp on its own
# ---------------------------------------------------------------------------------------------

MAIN = r"""
#include <cstdio>
#include "platform.h"
int main() {
  std::printf("%d %d %d\n", torch_segops::platform::torch_cpu_symbol("torch_exception_get_what_without_backtrace") == nullptr,
              torch_segops::lowest_bit(0x50u), torch_segops::platform::available_memory_bytes() > 0);
}
"""


@pytest.mark.skipif(sys.platform != "linux", reason="Linux only")
def test_platform_cpp_agrees_across_compilers(tmp_path):
    need_clang()
    (tmp_path / "main.cpp").write_text(MAIN)
    results = {}
    for cxx, extra in ((CLANG, ["-stdlib=libc++"]), ("g++", [])):
        exe = tmp_path / f"main_{cxx.replace('+', 'x')}"
        subprocess.run([cxx, "-std=c++17", "-Werror", "-Wall", "-Wextra", *extra, "-I", str(CSRC),
                        str(CSRC / "platform.cpp"), str(tmp_path / "main.cpp"), "-o", str(exe), "-ldl"], check=True)
        results[cxx] = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    assert results[CLANG] == results["g++"], results
    # libtorch_cpu is not loaded in this program; the lowest bit of 0b1010000; /proc/meminfo read
    assert results["g++"] == ["1", "4", "1"], results


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
