"""What a built library links against: its undefined dynamic symbols (nm) and the libraries it needs
(readelf), checked against what a CUDA build of torch_segops may use."""

from __future__ import annotations

import re
import subprocess

# Undefined dynamic symbols a CUDA build may have: the torch stable C shim (libtorch_cpu/libtorch_cuda,
# bound when torch has loaded them), the CUDA runtime (versioned libcudart.so.N), the C/C++ runtime, and
# Google Highway's CPU detection (libhwy's versioned HWY_0 symbols; none where Highway is linked statically).
ALLOWED_UNVERSIONED = re.compile(r"^(aoti_torch_\w+|torch_\w+|__gmon_start__|_ITM_\w+|__cxa_finalize)$")
ALLOWED_VERSIONS = re.compile(r"^(GLIBC|GLIBCXX|CXXABI|GCC|libcudart\.so|HWY_)")


def undefined_symbols(path: str) -> list[tuple[str, str]]:
    """(name, version) of the undefined dynamic symbols (nm -D)."""
    out = subprocess.run(["nm", "-D", "--undefined-only", path], capture_output=True, text=True, check=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split()
        if not parts:
            continue
        name = parts[-1]
        sym, _, version = name.partition("@")
        syms.append((sym, version.lstrip("@")))
    return syms


def check_symbols(path: str) -> list[str]:
    problems = []
    for sym, version in undefined_symbols(path):
        if version and ALLOWED_VERSIONS.match(version):
            continue
        if not version and ALLOWED_UNVERSIONED.match(sym):
            continue
        problems.append(f"unexpected undefined symbol {sym}{'@' + version if version else ''}")
    return problems


def needed_libraries(path: str) -> list[str]:
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def check_needed(path: str) -> list[str]:
    needed = needed_libraries(path)
    problems = []
    if not any(n.startswith("libcudart.so") for n in needed):
        problems.append(f"libcudart is not a shared dependency (NEEDED: {needed})")
    if any(n.startswith("libcuda.so") for n in needed):
        problems.append("links the driver library libcuda.so directly (only the runtime may)")
    # torch loads these RTLD_LOCAL: the shim symbols bind only through our own NEEDED entries
    for lib in ("libtorch_cpu.so", "libtorch_cuda.so"):
        if lib not in needed:
            problems.append(f"{lib} is not a dependency (NEEDED: {needed}): its shim symbols would not bind at load time")
    return problems
