"""The checks that involve the GPUs and the driver: torch's build on a GPU machine, the driver against the CUDA
majors in use, the binary's architectures (CMake CUDA_ARCHITECTURES entries) against each GPU, CUDA majors that
dropped a GPU."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .checks import build_cuda, torch_fix, variant
from .records import ERROR, MIN_DRIVER_LINUX, OK, OLDEST_ARCH, SUGGESTED_CUDA, WARNING, Facts, Finding, cuda_major, version_at_least

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
    """How a binary with these CMake arch entries runs on a GPU of this compute capability: ("sass", entry) when
    there is machine code the GPU runs (same major, minor not above the GPU's; an "a" entry, or a Tegra GPU or
    entry, only on its exact cc), ("ptx", entry) when only PTX of a lower or equal cc can be JIT-compiled,
    ("none", None) otherwise."""
    cc = tuple(capability)
    exact = lambda e: (e.major, e.minor) == cc  # noqa: E731
    entries = [e for e in map(parse_arch, archs) if e is not None]
    sass = [e for e in entries if e.sass and (exact(e) if e.suffix == "a" or cc in TEGRA or (e.major, e.minor) in TEGRA
                                              else e.major == cc[0] and e.minor <= cc[1])]
    if sass:
        return "sass", max(sass, key=lambda e: (e.minor, e.suffix == "a"))
    ptx = [e for e in entries if e.ptx and (exact(e) if e.suffix == "a" else e.major == cc[0] and e.minor <= cc[1]
                                            if e.suffix == "f" else (e.major, e.minor) <= cc)]
    return ("ptx", max(ptx, key=lambda e: (e.major, e.minor))) if ptx else ("none", None)


def check_torch_vs_gpu(f: Facts) -> list[Finding]:
    if not f.gpus or f.torch_version is None:
        return []
    if not f.torch_cuda_version:
        return [Finding(ERROR, "cpu-torch-on-gpu-machine", f"this machine has {len(f.gpus)} NVIDIA GPU(s) ({f.gpus[0].name}) but "
                                                           f"torch {f.torch_version} is a cpu build",
                        torch_fix(f, cuda=SUGGESTED_CUDA) + ("" if f.in_conda_env else '   (in a conda env: mamba install "pytorch=*=cuda*")'))]
    if f.torch_cuda_available is False:
        why = f": {f.torch_cuda_error}" if f.torch_cuda_error else ""
        return [Finding(WARNING, "torch-cuda-unavailable", f"torch {f.torch_version} is a CUDA {f.torch_cuda_version} build but "
                                                           f"torch.cuda.is_available() is False{why}",
                        "see the driver finding below; check CUDA_VISIBLE_DEVICES and that the NVIDIA kernel module is loaded (nvidia-smi)")]
    return []


def check_driver(f: Facts) -> list[Finding]:
    """The driver must support every CUDA major in use (torch's and torch_segops')."""
    if not f.gpus and not f.driver_version and not f.driver_cuda_version:
        return []
    needed: dict[int, list[str]] = {}
    for who, v in (("torch", f.torch_cuda_version), ("torch_segops", build_cuda(f) if variant(f) == "cuda" else None)):
        if cuda_major(v):
            needed.setdefault(cuda_major(v), []).append(f"{who} (CUDA {v})")
    out: list[Finding] = []
    for major, users in sorted(needed.items()):
        minimum = MIN_DRIVER_LINUX.get(major)
        ok = (version_at_least(f.driver_version, minimum) if f.driver_version and minimum
              else cuda_major(f.driver_cuda_version) >= major if f.driver_cuda_version else None)
        if ok is False:
            have = f.driver_version or f"supporting CUDA {f.driver_cuda_version}"
            alt = f"; or stay on this driver with CUDA 12 builds: {torch_fix(f, cuda='12.9')} and the cuda129 torch_segops" if major >= 13 else ""
            out.append(Finding(ERROR, "driver-too-old", f"NVIDIA driver {have} is too old for {' and '.join(users)}: CUDA {major}.x "
                                                        f"needs driver >= {minimum} on Linux", f"upgrade the NVIDIA driver to >= {minimum}{alt}"))
        elif ok is None:
            out.append(Finding(WARNING, "driver-unknown", f"could not read the NVIDIA driver version to check it against CUDA {major}.x "
                                                          f"(needs >= {minimum})"))
        else:
            have = " ".join(x for x in (f.driver_version, f"(CUDA {f.driver_cuda_version})" if f.driver_cuda_version else None) if x)
            out.append(Finding(OK, "driver", f"NVIDIA driver {have} supports CUDA {major}.x (needs >= {minimum})"))
    return out


def check_arch(f: Facts) -> list[Finding]:
    if variant(f) != "cuda" or not f.gpus:
        return []
    archs, out = list((f.build_info or {}).get("cuda_archs") or []), []
    for g in f.gpus:
        if g.capability is None:
            out.append(Finding(WARNING, "gpu-cc-unknown", f"GPU {g.index} ({g.name}): compute capability unknown, cannot check the "
                                                          "binary's architectures"))
            continue
        sm, gpu = f"{g.capability[0]}{g.capability[1]}", f"GPU {g.index} {g.name}"
        if not archs or any(parse_arch(a) is None for a in archs):
            out.append(Finding(WARNING, "archs-unknown", f"the binary's architecture list ({';'.join(archs) or 'empty'}) cannot be "
                                                         f"checked against GPU {g.index} (sm_{sm})"))
            continue
        kind, entry = arch_support(g.capability, archs)
        rebuild = f'TORCH_SEGOPS_WITH_CUDA=1 CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES={sm}" pip install --no-build-isolation -e .'
        if kind == "sass":
            out.append(Finding(OK, "arch", f"{gpu} (sm_{sm}): the binary has machine code for sm_{entry.name}"))
        elif kind == "ptx" and f.driver_cuda_version and build_cuda(f) and version_at_least(f.driver_cuda_version, build_cuda(f)) is False:
            out.append(Finding(ERROR, "ptx-needs-newer-driver", f"{gpu} (sm_{sm}) would run PTX for compute_{entry.name}, made by CUDA "
                                                                f"{build_cuda(f)}, but the driver only supports CUDA {f.driver_cuda_version}: "
                                                                "the PTX cannot be JIT-compiled",
                               f"upgrade the NVIDIA driver, or rebuild with machine code for this GPU: {rebuild}"))
        elif kind == "ptx":
            out.append(Finding(WARNING, "arch-ptx-jit", f"{gpu} (sm_{sm}) has no machine code in the binary; the driver JIT-compiles PTX "
                                                        f"for compute_{entry.name} on first use (slow start, possibly slower kernels)",
                               f"for native code: {rebuild}"))
        else:
            out.append(Finding(ERROR, "arch-missing", f"{gpu} (compute capability {g.capability[0]}.{g.capability[1]}) is not covered "
                                                      f"by the binary's architectures {';'.join(archs)} (no sm_{g.capability[0]}x machine "
                                                      f"code <= sm_{sm}, no PTX <= compute_{sm})", f"rebuild for this GPU: {rebuild}"))
    return out


def check_gpu_vs_cuda(f: Facts) -> list[Finding]:
    """A CUDA major that no longer targets the GPU (CUDA 13 dropped Maxwell, Pascal and Volta)."""
    out: list[Finding] = []
    for g in (g for g in f.gpus if g.capability is not None):
        cc = g.capability[0] * 10 + g.capability[1]
        for who, v in (("torch", f.torch_cuda_version), ("torch_segops", build_cuda(f) if variant(f) == "cuda" else None)):
            oldest = OLDEST_ARCH.get(cuda_major(v) or -1)
            if oldest is not None and cc < oldest:
                older = any(a <= cc for a in OLDEST_ARCH.values())
                fix = torch_fix(f, cuda=SUGGESTED_CUDA) if older else "this GPU is older than every supported CUDA toolkit"
                out.append(Finding(ERROR, "cuda-drops-gpu", f"GPU {g.index} {g.name} (sm_{cc}) is not supported by CUDA {v}, used by "
                                                            f"{who}: CUDA {cuda_major(v)}.x builds for sm_{oldest} and newer",
                                   fix + (" and the matching torch_segops build" if who == "torch_segops" or variant(f) == "cuda" else "")))
    return out
