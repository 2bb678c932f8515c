"""The pre-Turing rows (nvcc 12 only), checked without nvcc 12. No nvcc 12 can be installed here (data/compat.yaml,
pytorch_conda_forge_archs.nvcc12_here), but PyPI's nvidia-cuda-nvcc-cu12 wheel has ptxas 12.9. So the kernels'
PTX, made by nvcc 13 for compute_75, is retargeted and assembled for an old arch by that ptxas: every
instruction, register and shared-memory limit is checked for sm_50/60/70; code under `#if __CUDA_ARCH__ < 750`
is not (the front end saw 750)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

if __package__ in (None, ""):  # run as a script: the tools package from the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tools.conda_tools import cache_dir, cache_lock  # noqa: E402
from tools.cuda_build import build_flags  # noqa: E402
from tools.cuda_toolchain import ARCH_TABLE, _vkey, arch_table  # noqa: E402

NVCC12_WHEEL = "nvidia-cuda-nvcc-cu12==12.9.86"
PTX_ISA_OF_PTXAS = {"12.9": "8.8"}  # the newest PTX ISA a ptxas accepts (PTX ISA docs, release history)


@cache_lock("nvcc12-wheel")
def nvcc12_wheel_dir(download: bool = True) -> str:
    """host_config.h and ptxas of the nvidia-cuda-nvcc-cu12 12.9.86 wheel, unpacked into the cache folder
    (the wheel downloaded once with pip). Raises RuntimeError saying why when it cannot."""
    import zipfile
    dest = str(cache_dir() / "nvcc-12.9.86")
    members = ["nvidia/cuda_nvcc/include/crt/host_config.h", "nvidia/cuda_nvcc/bin/ptxas"]
    if all(os.path.exists(os.path.join(dest, m)) for m in members):
        return dest
    wheels = str(cache_dir() / "wheels")
    os.makedirs(wheels, exist_ok=True)
    have = [f for f in os.listdir(wheels) if f.startswith("nvidia_cuda_nvcc_cu12-12.9.86-") and f.endswith(".whl")]
    if not have:
        if not download:
            raise RuntimeError(f"{NVCC12_WHEEL} is not in {wheels}")
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", wheels,
                            NVCC12_WHEEL], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"could not download {NVCC12_WHEEL}: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
        have = [f for f in os.listdir(wheels) if f.startswith("nvidia_cuda_nvcc_cu12-12.9.86-") and f.endswith(".whl")]
    with zipfile.ZipFile(os.path.join(wheels, have[0])) as z:
        for m in members:
            z.extract(m, dest)
    os.chmod(os.path.join(dest, members[1]), 0o755)
    return dest


def oldest_nvcc12_arch(path: str = ARCH_TABLE) -> int | None:
    """The oldest SASS of the rows for nvcc 12 (None when no such row has one)."""
    olds = [int(a.split("-")[0]) for v, archs in arch_table(path) if _vkey(v)[0] == 12
            for a in archs.split(";") if a.endswith("-real") and a.split("-")[0].isdigit()]
    return min(olds) if olds else None


def ptx_like_the_build(build_dir: str, source: str, out: str, arch: int = 75) -> subprocess.CompletedProcess:
    """PTX of `source` for compute_<arch> with the build's flags (its --generate-code and output dropped)."""
    nvcc, args = build_flags(build_dir, lambda a: a == "--resource-usage" or a.startswith(
        ("--generate-code", "--compress-mode", "--threads")))
    return subprocess.run([nvcc, *args, f"-arch=compute_{arch}", "-ptx", source, "-o", out],
                          capture_output=True, text=True, cwd=build_dir)


def retarget_ptx(text: str, sm: int, isa: str) -> str:
    """PTX text with its .version set to `isa` and its .target to sm_<sm>; ValueError if either is missing."""
    out, n_version = re.subn(r"^\.version \d+\.\d+$", f".version {isa}", text, count=1, flags=re.M)
    out, n_target = re.subn(r"^\.target sm_\d+[af]?$", f".target sm_{sm}", out, count=1, flags=re.M)
    if not (n_version and n_target):
        raise ValueError("not a PTX module: no `.version X.Y` and `.target sm_NN` lines")
    return out


def assemble_old_arch(ptxas: str, ptx: str, sm: int, out: str) -> subprocess.CompletedProcess:
    """ptxas (warnings are errors) of a retargeted PTX file for sm_<sm>."""
    version = re.search(r"release (\d+\.\d+)", subprocess.run([ptxas, "--version"], capture_output=True,
                                                                text=True, check=True).stdout)
    if not version or version.group(1) not in PTX_ISA_OF_PTXAS:
        raise RuntimeError(f"unknown ptxas version at {ptxas}: add it to PTX_ISA_OF_PTXAS")
    with open(ptx) as fh:
        text = retarget_ptx(fh.read(), sm, PTX_ISA_OF_PTXAS[version.group(1)])
    retargeted = f"{out}.sm_{sm}.ptx"
    with open(retargeted, "w") as fh:
        fh.write(text)
    return subprocess.run([ptxas, f"-arch=sm_{sm}", "-O3", "-Werror", retargeted, "-o", out],
                          capture_output=True, text=True)
