"""Diagnose a torch-segops installation: ``python -m torch_segops.doctor [--json]``.

The doctor reports what a user needs to fix an install: the torch_segops binary that is installed
(variant, CUDA version, GPU architectures), the torch build, the GPUs and the NVIDIA driver, and
every mismatch between them with the concrete command that fixes it. Exit status 0 means no
problem was found, 1 means at least one error.

Structure: ``gather_facts()`` reads the machine into a :class:`Facts` record (never raising: each
probe records its own failure); the checks are pure functions ``Facts -> list[Finding]``, so they are
tested by feeding facts. The doctor must work when the compiled library does not load, so nothing
here imports torch or ``torch_segops._library`` at module level.

The numeric facts below (minimum torch, minimum driver per CUDA major) are copies of
``data/compat.yaml``; ``tests/test_environments.py`` checks that they agree.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable

# Stable-ABI target: the binary loads in every torch >= this (data/compat.yaml: stable_abi.min_torch).
MIN_TORCH = "2.10"
# Minimum Linux driver for a CUDA major under minor-version compatibility (data/compat.yaml: cuda[].min_driver_linux).
MIN_DRIVER_LINUX = {12: "525.60.13", 13: "580"}
# Oldest GPU architecture each CUDA major can build for (data/compat.yaml: cuda[].oldest_arch).
OLDEST_ARCH = {12: 50, 13: 75}
# CUDA toolkit a conda / pip user is pointed at when a CUDA build is needed.
SUGGESTED_CUDA = "12.9"
# The pre-CUDA-12 conda package and its last version (data/compat.yaml: cudatoolkit).
CUDATOOLKIT, CUDATOOLKIT_LAST = "cudatoolkit", "11.8"

ERROR, WARNING, OK, INFO = "error", "warning", "ok", "info"


# ---------------------------------------------------------------------------------------------
# facts
# ---------------------------------------------------------------------------------------------
@dataclass
class GPU:
    index: int
    name: str
    capability: tuple[int, int] | None  # (major, minor), None when unknown


@dataclass
class Facts:
    python: str = ""
    platform: str = ""
    in_conda_env: bool = False
    conda_prefix: str | None = None  # the active conda environment (CONDA_PREFIX)
    cudatoolkit: str | None = None  # version of a `cudatoolkit` record in its conda-meta/, if any
    package_version: str | None = None  # torch-segops distribution metadata
    # the compiled library
    library_path: str | None = None
    library_exists: bool = False
    library_error: str | None = None  # why torch.ops.load_library (or locating it) failed
    build_info: dict | None = None  # torch_segops build info (loaded, or read from the file)
    build_info_source: str | None = None  # "loaded" | "file"
    # torch
    torch_version: str | None = None
    torch_error: str | None = None
    torch_cuda_version: str | None = None  # torch.version.cuda, None for a cpu build
    torch_cuda_available: bool | None = None
    torch_cuda_error: str | None = None
    # GPUs and driver, probed without torch (a cpu torch cannot see them)
    gpus: list[GPU] = field(default_factory=list)
    gpu_source: str | None = None  # "libcuda" | "nvidia-smi" | "torch"
    gpu_probe_error: str | None = None
    driver_version: str | None = None  # e.g. "580.65.06"
    driver_cuda_version: str | None = None  # newest CUDA the driver supports, e.g. "13.0"

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        for g in d["gpus"]:
            g["capability"] = list(g["capability"]) if g["capability"] else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Facts":
        d = dict(d)
        gpus = [GPU(g["index"], g["name"], tuple(g["capability"]) if g.get("capability") else None) for g in d.pop("gpus", [])]
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(gpus=gpus, **{k: v for k, v in d.items() if k in known})


@dataclass
class Finding:
    severity: str  # error | warning | ok | info
    code: str  # stable identifier, e.g. "torch-too-old"
    message: str
    fix: str | None = None


# ---------------------------------------------------------------------------------------------
# small pure helpers
# ---------------------------------------------------------------------------------------------
def parse_version(v: str | None) -> tuple[int, ...] | None:
    """Leading numeric components: '2.13.0+cpu' -> (2, 13, 0); '580.65.06' -> (580, 65, 6)."""
    if not v:
        return None
    m = re.match(r"\d+(?:\.\d+)*", v.strip())
    return tuple(int(p) for p in m.group(0).split(".")) if m else None


def version_at_least(v: str | None, minimum: str) -> bool | None:
    pv, pm = parse_version(v), parse_version(minimum)
    if pv is None or pm is None:
        return None
    n = max(len(pv), len(pm))
    return pv + (0,) * (n - len(pv)) >= pm + (0,) * (n - len(pm))


def cuda_major(v: str | None) -> int | None:
    p = parse_version(v)
    return p[0] if p else None


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
    above the GPU's; an "a" entry only on its exact cc), ("ptx", entry) when only PTX of a lower or
    equal cc can be JIT-compiled by the driver, ("none", None) otherwise.
    """
    major, minor = capability
    entries = [e for e in (parse_arch(a) for a in archs) if e is not None]

    def sass_ok(e: ArchEntry) -> bool:
        if e.suffix == "a":
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


def _variant(f: Facts) -> str | None:
    return (f.build_info or {}).get("variant")


def _build_cuda(f: Facts) -> str | None:
    return (f.build_info or {}).get("cuda_version") or None


def _cuda_tag(cuda: str) -> str:
    return "cu" + cuda.replace(".", "")


def fix_cuda_torch(f: Facts, cuda: str = SUGGESTED_CUDA) -> str:
    conda = f'mamba install "pytorch >={MIN_TORCH} cuda{cuda.replace(".", "")}_*" "cuda-version {cuda}.*"'
    pip = f"pip install --force-reinstall 'torch>={MIN_TORCH}' --index-url https://download.pytorch.org/whl/{_cuda_tag(cuda)}"
    return conda if f.in_conda_env else pip


def fix_cuda_segops(f: Facts, cuda: str | None = None) -> str:
    cuda = cuda or f.torch_cuda_version or SUGGESTED_CUDA
    conda = f'mamba install "torch-segops * cuda{cuda.replace(".", "")}_*"'
    source = "TORCH_SEGOPS_WITH_CUDA=1 pip install --no-build-isolation -e .  (from a source checkout)"
    return f"{conda}   or, building from source: {source}" if f.in_conda_env else f"rebuild with CUDA: {source}"


# ---------------------------------------------------------------------------------------------
# checks: pure functions Facts -> [Finding]
# ---------------------------------------------------------------------------------------------
def check_torch(f: Facts) -> list[Finding]:
    if f.torch_version is None:
        fix = f'mamba install "pytorch>={MIN_TORCH}"' if f.in_conda_env else f"pip install 'torch>={MIN_TORCH}'"
        return [Finding(ERROR, "torch-missing", f"torch cannot be imported: {f.torch_error or 'not installed'}", fix)]
    build = f"cuda {f.torch_cuda_version}" if f.torch_cuda_version else "cpu"
    if version_at_least(f.torch_version, MIN_TORCH) is False:
        fix = (
            f'mamba install "pytorch>={MIN_TORCH}"'
            if f.in_conda_env
            else f"pip install --upgrade 'torch>={MIN_TORCH}'" + (f" --index-url https://download.pytorch.org/whl/{_cuda_tag(f.torch_cuda_version)}" if f.torch_cuda_version else "")
        )
        return [
            Finding(
                ERROR,
                "torch-too-old",
                f"torch {f.torch_version} is older than {MIN_TORCH}, the oldest torch whose stable ABI torch_segops targets",
                fix,
            )
        ]
    return [Finding(OK, "torch", f"torch {f.torch_version} ({build} build) >= stable-ABI minimum {MIN_TORCH}")]


def check_library(f: Facts) -> list[Finding]:
    out: list[Finding] = []
    info = f.build_info
    if not f.library_exists:
        fix = "mamba install torch-segops" if f.in_conda_env else "pip install --no-build-isolation .  (or -e . in a source checkout)"
        out.append(Finding(ERROR, "library-missing", f"the compiled library was not found ({f.library_path or 'no path'}): torch_segops is not built or not installed", fix))
        return out
    if f.library_error and f.torch_version is None:
        return out  # cannot be loaded without torch; "torch-missing" says what to do
    if f.library_error:
        hint = None
        if info and info.get("variant") == "cuda" and not f.torch_cuda_version and f.torch_version:
            hint = "this is a CUDA build of torch_segops and torch is a cpu build; see below"
        elif info and f.torch_version and version_at_least(f.torch_version, info.get("torch_target") or MIN_TORCH) is False:
            hint = "torch is older than the binary's stable-ABI target; see below"
        out.append(
            Finding(
                ERROR,
                "library-load",
                f"loading {f.library_path} failed: {f.library_error}" + (f" ({hint})" if hint else ""),
                None if hint else "reinstall torch_segops for this torch: pip install --no-build-isolation --force-reinstall .  (or mamba install --force-reinstall torch-segops)",
            )
        )
    if info:
        target = info.get("torch_target") or MIN_TORCH
        if f.torch_version and version_at_least(f.torch_version, target) is False:
            out.append(
                Finding(
                    ERROR,
                    "torch-below-binary-target",
                    f"this torch_segops binary targets the stable ABI of torch {target}, but torch is {f.torch_version}",
                    f'mamba install "pytorch>={target}"' if f.in_conda_env else f"pip install --upgrade 'torch>={target}'",
                )
            )
        if not f.library_error:
            archs = ",".join(info.get("cuda_archs") or []) or "-"
            cuda = info.get("cuda_version") or "-"
            out.append(Finding(OK, "library", f"torch_segops {info.get('version')} {info.get('variant')} build loaded (CUDA {cuda}, archs {archs})"))
    return out


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


def check_variant(f: Facts) -> list[Finding]:
    variant, info = _variant(f), f.build_info
    if info is None or f.torch_version is None:
        return []
    out: list[Finding] = []
    if variant == "cpu" and f.gpus and f.torch_cuda_version:
        out.append(
            Finding(
                ERROR,
                "cpu-segops-with-cuda-torch",
                f"torch_segops is the cpu build, but this machine has a GPU and torch is a CUDA {f.torch_cuda_version} build: CUDA tensors will not be supported",
                fix_cuda_segops(f),
            )
        )
    elif variant == "cpu" and f.torch_cuda_version and not f.gpus:
        out.append(Finding(INFO, "cpu-segops-no-gpu", "torch_segops is the cpu build; torch is a CUDA build but no GPU was found here (fine on a login node)"))
    if variant == "cuda":
        if not f.torch_cuda_version:
            out.append(
                Finding(
                    ERROR,
                    "cuda-segops-with-cpu-torch",
                    f"torch_segops is a CUDA {_build_cuda(f)} build but torch {f.torch_version} is a cpu build",
                    fix_cuda_torch(f, _build_cuda(f) or SUGGESTED_CUDA) + "   or install the cpu build of torch_segops",
                )
            )
        elif cuda_major(f.torch_cuda_version) != cuda_major(_build_cuda(f)):
            out.append(
                Finding(
                    ERROR,
                    "cuda-major-mismatch",
                    f"torch_segops was built with CUDA {_build_cuda(f)} but torch uses CUDA {f.torch_cuda_version}: different CUDA majors",
                    fix_cuda_segops(f, f.torch_cuda_version),
                )
            )
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


def check_cudatoolkit(f: Facts) -> list[Finding]:
    if not f.cudatoolkit:
        return []
    prefix = f.conda_prefix or "the active environment"
    return [
        Finding(
            WARNING,
            "cudatoolkit",
            f"{prefix} has cudatoolkit {f.cudatoolkit}: the pre-CUDA-12 conda package (CUDA <= {CUDATOOLKIT_LAST}). "
            "No pytorch >= 2.10 build uses it; CUDA 12 and 13 come as cuda-version + cuda-* packages",
            f"conda remove -p {f.conda_prefix or '$CONDA_PREFIX'} cudatoolkit, then install the CUDA build with its "
            f"toolkit version: conda install -c conda-forge torch-segops \"cuda-version={SUGGESTED_CUDA}\" "
            "(or recreate the environment from environments/cuda-*.yml)",
        )
    ]


def find_cudatoolkit(conda_prefix: str | None) -> str | None:
    """The version of the `cudatoolkit` package recorded in conda_prefix/conda-meta, or None."""
    if not conda_prefix:
        return None
    meta = os.path.join(conda_prefix, "conda-meta")
    try:
        names = sorted(os.listdir(meta))
    except OSError:
        return None
    for name in names:
        if not (name.startswith(CUDATOOLKIT + "-") and name.endswith(".json")):
            continue
        try:
            with open(os.path.join(meta, name)) as fh:
                rec = json.load(fh)
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and rec.get("name") == CUDATOOLKIT:  # not cudatoolkit-dev & co.
            return str(rec.get("version") or "unknown version")
    return None


CHECKS: list[Callable[[Facts], list[Finding]]] = [check_torch, check_library, check_torch_vs_gpu, check_driver, check_variant, check_gpu_vs_cuda, check_arch, check_cudatoolkit]


def diagnose(f: Facts) -> list[Finding]:
    findings: list[Finding] = []
    for check in CHECKS:
        findings.extend(check(f))
    return findings


def has_errors(findings: list[Finding]) -> bool:
    return any(x.severity == ERROR for x in findings)


# ---------------------------------------------------------------------------------------------
# gathering facts from the real machine (each probe records its own failure, none raises)
# ---------------------------------------------------------------------------------------------
def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".strip()


def _find_library_path() -> str | None:
    override = os.environ.get("TORCH_SEGOPS_LIBRARY")
    if override:
        return override
    try:
        spec = importlib.util.find_spec("torch_segops._C")
        if spec is not None and spec.origin:
            return spec.origin
    except Exception:
        pass
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_C.so")


def read_build_info_from_file(path: str) -> dict | None:
    """The build-info JSON is one string literal in the binary: read it without loading the library."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    start = data.find(b'{"version": "')
    if start < 0:
        return None
    end = data.find(b"}", start)
    try:
        info = json.loads(data[start : end + 1].decode())
    except (ValueError, UnicodeDecodeError):
        return None
    archs = info.get("cuda_archs") or ""
    info["cuda_archs"] = [a for a in archs.replace(",", ";").split(";") if a] if isinstance(archs, str) else list(archs)
    info["cuda_version"] = info.get("cuda_version") or None
    return info


def _probe_libcuda(f: Facts) -> bool:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        f.gpu_probe_error = f"libcuda.so.1 not loadable ({e})"
        return False
    v = ctypes.c_int(0)
    if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value:
        f.driver_cuda_version = f"{v.value // 1000}.{(v.value % 1000) // 10}"
    rc = lib.cuInit(0)
    if rc != 0:
        f.gpu_probe_error = f"cuInit failed with CUresult {rc}" + (" (no CUDA device)" if rc == 100 else " (stub libcuda, no driver)" if rc == 34 else "")
        return rc == 100  # a working driver that sees no device is an answer
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return False
    for i in range(count.value):
        dev = ctypes.c_int(0)
        if lib.cuDeviceGet(ctypes.byref(dev), i) != 0:
            continue
        name = ctypes.create_string_buffer(256)
        lib.cuDeviceGetName(name, 256, dev)
        ma, mi = ctypes.c_int(-1), ctypes.c_int(-1)
        lib.cuDeviceGetAttribute(ctypes.byref(ma), 75, dev)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        lib.cuDeviceGetAttribute(ctypes.byref(mi), 76, dev)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
        cap = (ma.value, mi.value) if ma.value >= 0 and mi.value >= 0 else None
        f.gpus.append(GPU(i, name.value.decode(errors="replace"), cap))
    f.gpu_source = "libcuda"
    return True


def parse_nvidia_smi(stdout: str) -> tuple[list[GPU], str | None]:
    """Parse `nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv,noheader`."""
    gpus: list[GPU] = []
    driver = None
    for line in stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            continue
        cap = tuple(int(x) for x in parts[2].split(".")) if re.fullmatch(r"\d+\.\d+", parts[2]) else None
        gpus.append(GPU(int(parts[0]) if parts[0].isdigit() else len(gpus), parts[1], cap))
        driver = driver or (parts[3] if parse_version(parts[3]) else None)
    return gpus, driver


def parse_nvrm_version(text: str) -> str | None:
    """The driver version from /proc/driver/nvidia/version ("NVRM version: ... Kernel Module  580.65.06  ...")."""
    m = re.search(r"NVRM version:.*?\s(\d{3,}\.\d+(?:\.\d+)?)\s", text)
    return m.group(1) if m else None


def _probe_nvidia_smi(f: Facts) -> None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,name,compute_cap,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        )
    except Exception as e:
        f.gpu_probe_error = (f.gpu_probe_error or "") + f"; nvidia-smi failed ({_err(e)})"
        return
    if out.returncode != 0:
        return
    gpus, driver = parse_nvidia_smi(out.stdout)
    f.driver_version = f.driver_version or driver
    if gpus and not f.gpus:
        f.gpus, f.gpu_source = gpus, "nvidia-smi"


def _probe_driver_version(f: Facts) -> None:
    try:
        with open("/proc/driver/nvidia/version") as fh:
            f.driver_version = parse_nvrm_version(fh.read())
    except OSError:
        return


def gather_facts() -> Facts:
    f = Facts(python=sys.version.split()[0], platform=platform.platform())
    f.in_conda_env = os.path.isdir(os.path.join(sys.prefix, "conda-meta"))
    f.conda_prefix = os.environ.get("CONDA_PREFIX") or (sys.prefix if f.in_conda_env else None)
    f.cudatoolkit = find_cudatoolkit(f.conda_prefix)
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            f.package_version = version("torch-segops")
        except PackageNotFoundError:
            f.package_version = None
    except Exception:
        pass

    # torch
    torch = None
    try:
        import torch  # noqa: F811

        f.torch_version = str(torch.__version__)
        f.torch_cuda_version = getattr(torch.version, "cuda", None)
    except BaseException as e:  # a broken torch can raise anything, even SystemExit from a C extension
        f.torch_error = _err(e)
        torch = None

    # GPUs and driver, independent of torch
    _probe_driver_version(f)
    try:
        if not _probe_libcuda(f):
            _probe_nvidia_smi(f)
    except Exception as e:
        f.gpu_probe_error = _err(e)
    if torch is not None and f.torch_cuda_version:
        try:
            f.torch_cuda_available = bool(torch.cuda.is_available())
            if f.torch_cuda_available and not f.gpus:
                for i in range(torch.cuda.device_count()):
                    f.gpus.append(GPU(i, torch.cuda.get_device_name(i), tuple(torch.cuda.get_device_capability(i))))
                f.gpu_source = "torch"
        except Exception as e:
            f.torch_cuda_available, f.torch_cuda_error = False, _err(e)

    # the compiled library: load it the way torch_segops does, else read its build info from the file
    f.library_path = _find_library_path()
    if torch is not None:
        try:
            from torch_segops import _library

            f.library_path = _library.library_path()
            f.build_info = dict(_library.build_info())
            f.build_info_source = "loaded"
        except BaseException as e:
            f.library_error = _err(e)
    else:
        f.library_error = "not loaded: torch cannot be imported"
    f.library_exists = bool(f.library_path) and os.path.exists(f.library_path)
    if f.build_info is None and f.library_exists:
        f.build_info = read_build_info_from_file(f.library_path)
        f.build_info_source = "file" if f.build_info else None
    if not f.library_exists:
        f.library_error = None  # reported as "library-missing"
    return f


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def render(f: Facts, findings: list[Finding]) -> str:
    info = f.build_info or {}
    lines = ["torch-segops doctor", ""]
    if info:
        src = "" if f.build_info_source == "loaded" else "  (read from the file, not loaded)"
        lines.append(f"  torch_segops  {info.get('version')}  variant={info.get('variant')}  CUDA={info.get('cuda_version') or '-'}  archs={';'.join(info.get('cuda_archs') or []) or '-'}{src}")
        lines.append(f"                built against torch headers {info.get('torch_headers') or '?'}, stable-ABI target {info.get('torch_target') or '?'}, compiler {info.get('cxx_compiler') or '?'}")
    else:
        lines.append(f"  torch_segops  {f.package_version or '?'} (no build info)")
    lines.append(f"                library {f.library_path or '-'}")
    if f.torch_version:
        lines.append(f"  torch         {f.torch_version}  build={'cuda ' + f.torch_cuda_version if f.torch_cuda_version else 'cpu'}" + (f"  cuda available={f.torch_cuda_available}" if f.torch_cuda_version else ""))
    else:
        lines.append(f"  torch         not importable ({f.torch_error})")
    lines.append(f"  python        {f.python}  ({'conda env' if f.in_conda_env else 'not a conda env'}: {sys.prefix})")
    if f.gpus:
        for g in f.gpus:
            cc = f"{g.capability[0]}.{g.capability[1]}" if g.capability else "?"
            lines.append(f"  GPU {g.index}         {g.name}  compute capability {cc}")
    else:
        lines.append(f"  GPU           none found{' (' + f.gpu_probe_error + ')' if f.gpu_probe_error else ''}")
    if f.driver_version or f.driver_cuda_version:
        lines.append(f"  driver        {f.driver_version or '?'}  (supports CUDA {f.driver_cuda_version or '?'})")
    lines.append("")
    tags = {ERROR: "ERROR", WARNING: "WARN ", OK: "ok   ", INFO: "info "}
    for x in findings:
        lines.append(f"  [{tags.get(x.severity, x.severity)}] {x.message}")
        if x.fix:
            lines.append(f"          fix: {x.fix}")
    n_err = sum(x.severity == ERROR for x in findings)
    n_warn = sum(x.severity == WARNING for x in findings)
    lines.append("")
    lines.append("no problems found" if not n_err and not n_warn else f"{n_err} error(s), {n_warn} warning(s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="torch-segops-doctor", description="Diagnose a torch-segops installation.")
    p.add_argument("--json", action="store_true", help="print facts and findings as JSON")
    args = p.parse_args(argv)
    facts = gather_facts()
    findings = diagnose(facts)
    if args.json:
        print(json.dumps({"ok": not has_errors(findings), "facts": facts.to_dict(), "findings": [dataclasses.asdict(x) for x in findings]}, indent=2))
    else:
        print(render(facts, findings))
    return 1 if has_errors(findings) else 0


if __name__ == "__main__":
    sys.exit(main())
