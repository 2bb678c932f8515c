"""CUDA architecture lists: which entry of a binary's CMake CUDA_ARCHITECTURES runs on a GPU."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Integrated (Tegra/Jetson) GPUs: SASS runs there only when built for exactly that cc, and their SASS
# runs on no other GPU (CUDA C++ Programming Guide, "Binary Compatibility").
TEGRA = {(5, 3), (6, 2), (7, 2), (8, 7), (10, 1), (11, 0)}


@dataclass(frozen=True)
class ArchEntry:
    """One CMake CUDA_ARCHITECTURES entry: '75-real' (SASS), '90-virtual' (PTX), '120' (both), '90a-real'."""

    major: int
    minor: int
    suffix: str  # "" | "a" (arch-specific) | "f" (family-specific)
    sass: bool
    ptx: bool

    @property
    def name(self) -> str:
        return f"{self.major}{self.minor}{self.suffix}"


def parse_arch(entry: str) -> ArchEntry | None:
    m = re.fullmatch(r"(?:sm_|compute_)?(\d+)([af]?)(?:-(real|virtual))?", entry.strip())
    if not m:
        return None  # "native", "all", "all-major": cannot be judged from the list
    num, suffix, kind = int(m.group(1)), m.group(2), m.group(3)
    return ArchEntry(num // 10, num % 10, suffix, sass=kind in (None, "real"), ptx=kind in (None, "virtual"))


def arch_support(capability: tuple[int, int], archs: list[str]) -> tuple[str, ArchEntry | None]:
    """How a binary with these CMake arch entries runs on a GPU of this compute capability.

    Returns ("sass", entry) when there is machine code the GPU runs directly (same major, minor not
    above the GPU's; an "a" entry, or a Tegra GPU or entry, only on its exact cc), ("ptx", entry) when only PTX of a lower or
    equal cc can be JIT-compiled by the driver, ("none", None) otherwise.
    """
    major, minor = capability
    entries = [e for e in (parse_arch(a) for a in archs) if e is not None]

    def sass_ok(e: ArchEntry) -> bool:
        if e.suffix == "a" or (major, minor) in TEGRA or (e.major, e.minor) in TEGRA:
            return (e.major, e.minor) == (major, minor)
        return e.major == major and e.minor <= minor

    def ptx_ok(e: ArchEntry) -> bool:
        if e.suffix == "a":
            return (e.major, e.minor) == (major, minor)
        if e.suffix == "f":
            return e.major == major and e.minor <= minor
        return (e.major, e.minor) <= (major, minor)

    sass = [e for e in entries if e.sass and sass_ok(e)]
    if sass:
        return "sass", max(sass, key=lambda e: (e.minor, e.suffix == "a"))
    ptx = [e for e in entries if e.ptx and ptx_ok(e)]
    if ptx:
        return "ptx", max(ptx, key=lambda e: (e.major, e.minor))
    return "none", None
