"""Where the CUDA tools are and what they support: nvcc and cuobjdump found on this machine, nvcc's version
and architectures, and the default architecture list of cmake/cuda_architectures.txt for that version."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCH_TABLE = os.path.join(REPO, "cmake", "cuda_architectures.txt")
CI_ARCHS = "75-real;90-real"


def find_nvcc() -> str | None:
    """nvcc from $CUDACXX, $CUDA_HOME/$CUDA_PATH, PATH, or /usr/local/cuda (None if absent)."""
    cands = [os.environ.get("CUDACXX")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            cands.append(os.path.join(os.environ[var], "bin", "nvcc"))
    cands += [shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.realpath(c) if os.path.basename(c) == "nvcc" else c
    return None


def nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"release (\d+\.\d+)", out)
    if not m:
        raise RuntimeError(f"cannot read the version of {nvcc}:\n{out}")
    return m.group(1)


def nvcc_full_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else nvcc_version(nvcc)


def nvcc_supported_archs(nvcc: str) -> set[int]:
    out = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True, check=True).stdout
    return {int(x) for x in re.findall(r"compute_(\d+)", out)}


def _wheel_bin_dirs() -> list[str]:
    """bin/ folders of NVIDIA's pip wheels (nvidia-cuda-cuobjdump installs nvidia/cu13/bin/cuobjdump for CUDA
    13, nvidia/cuda_cuobjdump/bin/cuobjdump for CUDA 12) in this Python's site-packages."""
    try:
        import importlib.util
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    dirs = []
    for root in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("cu13", "cuda_cuobjdump", "cu12"):
            d = os.path.join(root, sub, "bin")
            if os.path.isdir(d):
                dirs.append(d)
    return dirs


def find_cuobjdump(nvcc: str | None) -> str | None:
    """cuobjdump from PATH, next to nvcc, $CUDA_HOME/$CUDA_PATH, or the nvidia-cuda-cuobjdump pip wheel
    (tools/bootstrap.sh installs it) (None if absent)."""
    cands = [shutil.which("cuobjdump")]
    if nvcc:
        cands.append(os.path.join(os.path.dirname(nvcc), "cuobjdump"))
    cands += [os.path.join(os.environ[v], "bin", "cuobjdump") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    cands += [os.path.join(d, "cuobjdump") for d in _wheel_bin_dirs()]
    return next((c for c in cands if c and os.path.isfile(c) and os.access(c, os.X_OK)), None)


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def arch_table(path: str = ARCH_TABLE) -> list[tuple[str, str]]:
    """Rows (min nvcc version, CMake arch list) of cmake/cuda_architectures.txt."""
    rows = []
    with open(path) as fh:
        for line in fh:
            m = re.match(r"^(\d+\.\d+)\s+(\S+)\s*$", line)
            if m:
                rows.append((m.group(1), m.group(2)))
    return rows


def default_archs(version: str, path: str = ARCH_TABLE) -> str | None:
    """The default CMake arch list for this nvcc version (the rule of cmake/cuda_architectures.cmake)."""
    best = None
    for min_v, archs in arch_table(path):
        if _vkey(version) >= _vkey(min_v) and (best is None or _vkey(min_v) > _vkey(best[0])):
            best = (min_v, archs)
    return best[1] if best else None
