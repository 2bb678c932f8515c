"""The checks that involve the GPUs and the driver: torch's build on a GPU machine, the driver against the
CUDA majors in use, the binary's architectures against each GPU, CUDA majors that dropped a GPU."""

from __future__ import annotations

from .archs import arch_support, parse_arch
from .fixes import _build_cuda, _variant, fix_cuda_torch
from .records import (ERROR, MIN_DRIVER_LINUX, OK, OLDEST_ARCH, SUGGESTED_CUDA, WARNING, Facts, Finding, cuda_major,
                      version_at_least)


def check_torch_vs_gpu(f: Facts) -> list[Finding]:
    if not f.gpus or f.torch_version is None:
        return []
    if not f.torch_cuda_version:
        return [
            Finding(
                ERROR,
                "cpu-torch-on-gpu-machine",
                f"this machine has {len(f.gpus)} NVIDIA GPU(s) ({f.gpus[0].name}) but torch {f.torch_version} is a cpu build",
                fix_cuda_torch(f) + ("" if f.in_conda_env else '   (in a conda env: mamba install "pytorch=*=cuda*")'),
            )
        ]
    if f.torch_cuda_available is False:
        why = f": {f.torch_cuda_error}" if f.torch_cuda_error else ""
        return [
            Finding(
                WARNING,
                "torch-cuda-unavailable",
                f"torch {f.torch_version} is a CUDA {f.torch_cuda_version} build but torch.cuda.is_available() is False{why}",
                "see the driver finding below; check CUDA_VISIBLE_DEVICES and that the NVIDIA kernel module is loaded (nvidia-smi)",
            )
        ]
    return []


def check_driver(f: Facts) -> list[Finding]:
    """The driver must support every CUDA major in use (torch's and torch_segops')."""
    if not f.gpus and not f.driver_version and not f.driver_cuda_version:
        return []
    needed: dict[int, list[str]] = {}
    for who, v in (("torch", f.torch_cuda_version), ("torch_segops", _build_cuda(f) if _variant(f) == "cuda" else None)):
        if cuda_major(v):
            needed.setdefault(cuda_major(v), []).append(f"{who} (CUDA {v})")
    out: list[Finding] = []
    for major, users in sorted(needed.items()):
        minimum = MIN_DRIVER_LINUX.get(major)
        ok: bool | None = None
        if f.driver_version and minimum:
            ok = version_at_least(f.driver_version, minimum)
        elif f.driver_cuda_version:
            ok = cuda_major(f.driver_cuda_version) >= major
        if ok is False:
            have = f.driver_version or f"supporting CUDA {f.driver_cuda_version}"
            alt = ""
            if major >= 13:
                alt = f"; or stay on this driver with CUDA 12 builds: {fix_cuda_torch(f, '12.9')} and the cuda129 torch_segops"
            out.append(
                Finding(
                    ERROR,
                    "driver-too-old",
                    f"NVIDIA driver {have} is too old for {' and '.join(users)}: CUDA {major}.x needs driver >= {minimum} on Linux",
                    f"upgrade the NVIDIA driver to >= {minimum}{alt}",
                )
            )
        elif ok is None:
            out.append(Finding(WARNING, "driver-unknown", f"could not read the NVIDIA driver version to check it against CUDA {major}.x (needs >= {minimum})", None))
        else:
            have = " ".join(x for x in (f.driver_version, f"(CUDA {f.driver_cuda_version})" if f.driver_cuda_version else None) if x)
            out.append(Finding(OK, "driver", f"NVIDIA driver {have} supports CUDA {major}.x (needs >= {minimum})"))
    return out


def check_arch(f: Facts) -> list[Finding]:
    if _variant(f) != "cuda" or not f.gpus:
        return []
    archs = list((f.build_info or {}).get("cuda_archs") or [])
    out: list[Finding] = []
    for g in f.gpus:
        if g.capability is None:
            out.append(Finding(WARNING, "gpu-cc-unknown", f"GPU {g.index} ({g.name}): compute capability unknown, cannot check the binary's architectures"))
            continue
        cc = f"{g.capability[0]}.{g.capability[1]}"
        sm = f"{g.capability[0]}{g.capability[1]}"
        if not archs or any(parse_arch(a) is None for a in archs):
            out.append(Finding(WARNING, "archs-unknown", f"the binary's architecture list ({';'.join(archs) or 'empty'}) cannot be checked against GPU {g.index} (sm_{sm})"))
            continue
        kind, entry = arch_support(g.capability, archs)
        rebuild = f'TORCH_SEGOPS_WITH_CUDA=1 CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES={sm}" pip install --no-build-isolation -e .'
        if kind == "sass":
            out.append(Finding(OK, "arch", f"GPU {g.index} {g.name} (sm_{sm}): the binary has machine code for sm_{entry.name}"))
        elif kind == "ptx":
            newer_ptx = f.driver_cuda_version and _build_cuda(f) and version_at_least(f.driver_cuda_version, _build_cuda(f)) is False
            if newer_ptx:
                out.append(
                    Finding(
                        ERROR,
                        "ptx-needs-newer-driver",
                        f"GPU {g.index} {g.name} (sm_{sm}) would run PTX for compute_{entry.name}, made by CUDA {_build_cuda(f)}, but the driver only supports CUDA {f.driver_cuda_version}: the PTX cannot be JIT-compiled",
                        f"upgrade the NVIDIA driver, or rebuild with machine code for this GPU: {rebuild}",
                    )
                )
            else:
                out.append(
                    Finding(
                        WARNING,
                        "arch-ptx-jit",
                        f"GPU {g.index} {g.name} (sm_{sm}) has no machine code in the binary; the driver JIT-compiles PTX for compute_{entry.name} on first use (slow start, possibly slower kernels)",
                        f"for native code: {rebuild}",
                    )
                )
        else:
            out.append(
                Finding(
                    ERROR,
                    "arch-missing",
                    f"GPU {g.index} {g.name} (compute capability {cc}) is not covered by the binary's architectures {';'.join(archs)} (no sm_{g.capability[0]}x machine code <= sm_{sm}, no PTX <= compute_{sm})",
                    f"rebuild for this GPU: {rebuild}",
                )
            )
    return out


def check_gpu_vs_cuda(f: Facts) -> list[Finding]:
    """A CUDA major that no longer targets the GPU (CUDA 13 dropped Maxwell, Pascal and Volta)."""
    out: list[Finding] = []
    users = [("torch", f.torch_cuda_version), ("torch_segops", _build_cuda(f) if _variant(f) == "cuda" else None)]
    for g in f.gpus:
        if g.capability is None:
            continue
        cc = g.capability[0] * 10 + g.capability[1]
        for who, v in users:
            oldest = OLDEST_ARCH.get(cuda_major(v) or -1)
            if oldest is not None and cc < oldest:
                older = max((m for m, a in OLDEST_ARCH.items() if a <= cc), default=None)
                fix = fix_cuda_torch(f, SUGGESTED_CUDA) if older is not None else "this GPU is older than every supported CUDA toolkit"
                out.append(
                    Finding(
                        ERROR,
                        "cuda-drops-gpu",
                        f"GPU {g.index} {g.name} (sm_{cc}) is not supported by CUDA {v}, used by {who}: CUDA {cuda_major(v)}.x builds for sm_{oldest} and newer",
                        fix + (" and the matching torch_segops build" if who == "torch_segops" or _variant(f) == "cuda" else ""),
                    )
                )
    return out
