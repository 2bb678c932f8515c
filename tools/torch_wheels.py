"""PyPI torch wheels as build inputs: download one (without its dependencies) into the kept cache
folder, and unpack only what a build needs (headers, libtorch_cpu, libc10, version.py).

Used by tests/packaging/test_torch_headers.py (CI compiles against the oldest supported torch's headers),
tests/packaging/test_aarch64.py (the linux-aarch64 cross build) and tools/torch_matrix.py. The cache folder is
conda_tools.cache_dir() (``~/.cache/torch-segops`` by default): wheels go to ``wheels/<flavor>/``, the
unpacked trees to ``torch-trees/<wheel name>/torch``. Files already there are not downloaded again,
and no index is asked when the wheel is already in the cache.

pip's find-links folder on this kind of machine holds ``torch 2.13.0+cpu``, which sorts above the plain
version, and its config files add local indexes and a cap: both are ignored for these downloads, as
offline_channel.download_cuda_wheels does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script (python tools/torch_wheels.py): the tools package from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.conda_tools import cache_dir, cache_lock, pypi_only_env  # noqa: E402
from tools.offline_channel import wheel_torch_version  # noqa: E402

# The oldest torch whose stable ABI the library targets (data/compat.yaml stable_abi.min_torch).
OLDEST = "2.10.0"
NEWEST = "2.14.0"  # the newest torch on PyPI that the matrix (tools/torch_matrix.py) covers
# PyPI's Linux x86-64 torch wheels are CUDA builds; which CUDA each minor is built for (the wheel's
# torch/version.py says so too, and download_torch checks it). aarch64 wheels of these minors are +cpu.
X86_CUDA = {"2.10": "12.8", "2.11": "13.0", "2.12": "13.0", "2.13": "13.0", "2.14": "13.0"}
MACHINES = {"x86_64": "manylinux_2_28_x86_64", "aarch64": "manylinux_2_28_aarch64"}
# What a build against the wheel needs: the headers, the library holding the stable C shim
# (libtorch_cpu) and what it links to first (libc10), and the version CMake reads.
BUILD_MEMBERS = ("include/", "lib/libtorch_cpu.so", "lib/libc10.so", "version.py")


class WheelError(RuntimeError):
    """A wheel could not be fetched or read; the message says what happened."""


def run_checked(cmd, **kw) -> subprocess.CompletedProcess:
    """subprocess.run with captured text output; a failure raises RuntimeError with the command and the
    tail of its output."""
    cp = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if cp.returncode != 0:
        raise RuntimeError(f"`{' '.join(map(str, cmd))}` failed ({cp.returncode}):\n{cp.stdout[-4000:]}\n{cp.stderr[-4000:]}")
    return cp


pip_env = pypi_only_env


def flavor(version: str, machine: str = "x86_64") -> str:
    """The cache sub-folder of a torch version's wheels: torch-cu128/torch-cu130 (x86-64), linux-aarch64. Not
    wheels/cu130, which offline_channel.download_cuda_wheels keeps for one torch wheel only."""
    if machine == "aarch64":
        return "linux-aarch64"
    minor = ".".join(version.split(".")[:2])
    if minor not in X86_CUDA:
        raise WheelError(f"torch {version}: the CUDA build of its PyPI wheel is not known (known: {', '.join(X86_CUDA)})")
    return "torch-cu" + X86_CUDA[minor].replace(".", "")


def wheel_dir(version: str, machine: str = "x86_64") -> Path:
    return cache_dir() / "wheels" / flavor(version, machine)


def _cached(dest: Path, version: str, machine: str, py: str) -> Path | None:
    pat = re.compile(rf"^torch-{re.escape(version)}(-\d+)?-{py}-{py}-.*{machine}\.whl$")
    found = sorted(w for w in dest.glob("torch-*.whl") if pat.match(w.name))
    return found[-1] if found else None


@cache_lock("torch-wheels")
def download_torch(version: str = OLDEST, machine: str = "x86_64", python: str = "3.11") -> Path:
    """The torch==version wheel from PyPI for CPython `python` on linux `machine`, without dependencies,
    in wheel_dir(). Checks that the wheel is the build the tables above say (CUDA or +cpu)."""
    if machine not in MACHINES:
        raise WheelError(f"unknown machine {machine!r} (known: {', '.join(MACHINES)})")
    py = "cp" + python.replace(".", "")
    dest = wheel_dir(version, machine)
    dest.mkdir(parents=True, exist_ok=True)
    whl = _cached(dest, version, machine, py)
    if whl is None:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--progress-bar", "off",
               "--platform", MACHINES[machine], "--python-version", python, "--implementation", "cp",
               "--dest", str(dest), f"torch=={version}"]
        cp = subprocess.run(cmd, capture_output=True, text=True, env=pip_env())
        whl = _cached(dest, version, machine, py)
        if cp.returncode != 0 or whl is None:
            raise WheelError(f"could not download torch=={version} for {machine} from PyPI into {dest} "
                             f"(`{' '.join(cmd)}` exited {cp.returncode}):\n{cp.stdout[-2000:]}{cp.stderr[-2000:]}")
    got, cuda = wheel_torch_version(whl)
    want_cuda = None if machine == "aarch64" else X86_CUDA.get(".".join(version.split(".")[:2]))
    if not got.startswith(version) or cuda != want_cuda:
        raise WheelError(f"{whl.name} is torch {got} (CUDA {cuda}); expected {version} with CUDA {want_cuda}")
    return whl


@cache_lock("torch-trees")
def torch_tree(whl: Path, members: tuple[str, ...] = BUILD_MEMBERS) -> Path:
    """The wheel's `torch/` folder, holding only `members` (prefixes below torch/), unpacked once into
    cache_dir()/torch-trees/<wheel>/torch. Usable as -DTORCH_SEGOPS_TORCH_DIR."""
    root = cache_dir() / "torch-trees" / whl.name[:-len(".whl")]
    tree = root / "torch"
    stamp = root / "UNPACKED.json"
    want = {"wheel": whl.name, "size": whl.stat().st_size, "members": list(members)}
    if stamp.exists() and json.loads(stamp.read_text()) == want:
        return tree
    shutil.rmtree(root, ignore_errors=True)
    tree.mkdir(parents=True)
    with zipfile.ZipFile(whl) as z:
        names = [n for n in z.namelist() if n.startswith("torch/") and not n.endswith("/")
                 and n[len("torch/"):].startswith(members)]
        for need in members:
            if not any(n[len("torch/"):].startswith(need) for n in names):
                raise WheelError(f"{whl.name} has no torch/{need}")
        for n in names:
            z.extract(n, root)
    stamp.write_text(json.dumps(want))
    return tree


def target_version_hex(target: str) -> str:
    """TORCH_TARGET_VERSION for MAJOR.MINOR, as CMakeLists.txt computes it."""
    major, minor = (int(x) for x in target.split(".")[:2])
    return hex((major << 56) | (minor << 48))


def own_build_dir(build_dir: Path) -> Path:
    """The source tree of this checkout; a build folder (they live in the cache, shared by every checkout)
    that was configured from another checkout is removed first, or CMake and ninja would build that
    other tree's sources. Returns the source tree."""
    source = Path(__file__).resolve().parents[1]
    cache = Path(build_dir) / "CMakeCache.txt"
    if cache.exists() and f"CMAKE_HOME_DIRECTORY:INTERNAL={source}\n" not in cache.read_text():
        shutil.rmtree(build_dir)
    return source


def build_library(build_dir: Path, torch_dir: Path, *, cuda_archs: str | None = None, target: str = "2.10",
                  no_undefined: bool = True, defines: dict | None = None, env: dict | None = None,
                  jobs: int | None = None, optimize: bool = True) -> tuple[Path, str, float]:
    """Configures and builds _C.so with CMake against the torch tree `torch_dir` (headers, libtorch_cpu),
    with stable-ABI target `target`; with `cuda_archs` the CUDA sources too (nvcc found as
    cuda_toolchain finds it; without libtorch_cuda in the tree CMake links its stub). no_undefined
    links with -Wl,--no-undefined: every symbol the library uses must then be defined by the libraries it
    links (libtorch_cpu of that torch, the stub, cudart, the C/C++ runtime). optimize=False compiles the
    host code at -O0 and the device code with nvcc -Ofc=max (a compile-and-link check: the same sources,
    preprocessor and front ends, in a fraction of the time; -DNDEBUG kept). Returns (library, log, s).
    Raises RuntimeError with the build's output when it fails."""
    import time
    from tools.cuda_build import build_jobs
    from tools.cuda_toolchain import find_nvcc
    jobs = jobs or build_jobs()
    d = {"TORCH_SEGOPS_TORCH_DIR": str(torch_dir), "TORCH_SEGOPS_TORCH_TARGET": target,
         "CMAKE_BUILD_TYPE": "Release"}
    if no_undefined:
        d["CMAKE_SHARED_LINKER_FLAGS"] = "-Wl,--no-undefined"
    if not optimize:
        d.update(TORCH_SEGOPS_CXX_OPT="-O0", CMAKE_CXX_FLAGS_RELEASE="-DNDEBUG")
    if cuda_archs:
        nvcc = find_nvcc()
        if not nvcc:
            raise RuntimeError("nvcc not found (set CUDACXX or CUDA_HOME, or put nvcc on PATH)")
        d.update(TORCH_SEGOPS_WITH_CUDA="ON", CMAKE_CUDA_COMPILER=nvcc, CMAKE_CUDA_ARCHITECTURES=cuda_archs,
                 TORCH_SEGOPS_NVCC_THREADS=str(jobs))
        if not optimize:
            d.update(CMAKE_CUDA_FLAGS="-Ofc=max", CMAKE_CUDA_FLAGS_RELEASE="-DNDEBUG")
    d.update(defines or {})
    source = own_build_dir(build_dir)
    cmd = ["cmake", "-S", str(source), "-B", str(build_dir)]
    if shutil.which("ninja"):
        cmd += ["-G", "Ninja"]
    cmd += [f"-D{k}={v}" for k, v in d.items()]
    env = dict(env or os.environ)
    env.pop("CUDAARCHS", None)
    t0 = time.perf_counter()
    log = ""
    for step in (cmd, ["cmake", "--build", str(build_dir), "--parallel", str(jobs)]):
        cp = subprocess.run(step, capture_output=True, text=True, env=env)
        log += f"$ {' '.join(step)}\n{cp.stdout}{cp.stderr}"
        if cp.returncode != 0:
            raise RuntimeError(f"`{' '.join(step)}` failed ({cp.returncode}):\n{log[-20000:]}")
    return Path(build_dir) / "_C.so", log, time.perf_counter() - t0


def oldest_torch_dir(machine: str = "x86_64") -> Path:
    """The unpacked build tree of the oldest supported torch for `machine` (downloaded on first use)."""
    return torch_tree(download_torch(OLDEST, machine))


if __name__ == "__main__":
    for m in sys.argv[1:] or ["x86_64"]:
        print(oldest_torch_dir(m))
