"""Building the CUDA variant with CMake (cmake configure + build, timed) and compiling a single .cu file
with the build's own nvcc flags (compile_commands.json): how the checks reproduce what the build does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

if __package__ in (None, ""):  # run as a script: the tools package from the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tools.cuda_toolchain import CI_ARCHS, REPO, find_nvcc  # noqa: E402


@dataclass
class Build:
    library: str
    archs: str
    configure_s: float
    build_s: float
    cuda_compile_s: float | None  # the .cu alone (from the build's own timing of that step), when measurable
    log: str = ""
    keep_dir: str | None = None  # nvcc's intermediates (--keep): <source>.compute_NN.ptx is the PTX ptxas assembled


def kept_ptx(keep_dir: str, source: str, arch: int) -> str:
    """The PTX nvcc made of `source` (a .cu file name) for compute_<arch> in a build with --keep."""
    return os.path.join(keep_dir, f"{os.path.splitext(os.path.basename(source))[0]}.compute_{arch}.ptx")


def configure(build_dir: str, nvcc: str, archs: str | None, extra: list[str] | None = None,
              env: dict | None = None) -> subprocess.CompletedProcess:
    """cmake configure of the CUDA variant; archs None leaves the choice to CMake/CUDAARCHS/defaults."""
    cmd = ["cmake", "-S", REPO, "-B", build_dir, "-DTORCH_SEGOPS_WITH_CUDA=ON", f"-DCMAKE_CUDA_COMPILER={nvcc}",
           "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", "-DTORCH_SEGOPS_CUDA_RESOURCE_USAGE=ON"]
    if shutil.which("ninja"):
        cmd += ["-G", "Ninja"]
    if archs is not None:
        cmd.append(f"-DCMAKE_CUDA_ARCHITECTURES={archs}")
    cmd += extra or []
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def build_jobs() -> int:
    """Parallel jobs for a build: $CMAKE_BUILD_PARALLEL_LEVEL, else $MAX_JOBS, else the CPU count."""
    for var in ("CMAKE_BUILD_PARALLEL_LEVEL", "MAX_JOBS"):
        if os.environ.get(var, "").isdigit() and int(os.environ[var]) > 0:
            return int(os.environ[var])
    return os.cpu_count() or 2


def build(build_dir: str, archs: str = CI_ARCHS, nvcc: str | None = None, extra: list[str] | None = None,
          jobs: int | None = None, keep_dir: str | None = None) -> Build:
    """Configures and builds the CUDA variant in build_dir. jobs (default build_jobs()) bounds both the build
    steps run at once and nvcc --threads (the architectures of the .cu compiled in parallel). keep_dir: nvcc
    keeps its intermediate files there (--keep; the library is the same)."""
    nvcc = nvcc or find_nvcc()
    if not nvcc:
        raise RuntimeError("nvcc not found (set CUDACXX or CUDA_HOME, or put nvcc on PATH)")
    jobs = jobs or build_jobs()
    env = dict(os.environ)
    env.pop("CUDAARCHS", None)  # the explicit list below is what we check
    t0 = time.perf_counter()
    if keep_dir:
        os.makedirs(keep_dir, exist_ok=True)
        extra = [f"-DCMAKE_CUDA_FLAGS=--keep --keep-dir={keep_dir}"] + (extra or [])
    cp = configure(build_dir, nvcc, archs, [f"-DTORCH_SEGOPS_NVCC_THREADS={jobs}"] + (extra or []), env)
    t1 = time.perf_counter()
    if cp.returncode != 0:
        raise RuntimeError(f"cmake configure failed:\n{cp.stdout}\n{cp.stderr}")
    tb = time.perf_counter()
    bp = subprocess.run(["cmake", "--build", build_dir, "--parallel", str(jobs)],
                        capture_output=True, text=True, env=env)
    t2 = time.perf_counter()
    if bp.returncode != 0:
        raise RuntimeError(f"build failed:\n{bp.stdout[-20000:]}\n{bp.stderr[-20000:]}")
    lib = os.path.join(build_dir, "_C.so")
    return Build(lib, archs, t1 - t0, t2 - tb, _ninja_step_seconds(build_dir, "segment_cuda.cu.o"),
                 bp.stdout + bp.stderr, keep_dir)


def _ninja_step_seconds(build_dir: str, output_suffix: str) -> float | None:
    """Wall time of one build step from Ninja's log (None with other generators)."""
    log = os.path.join(build_dir, ".ninja_log")
    if not os.path.exists(log):
        return None
    best = None
    with open(log) as fh:
        for line in fh:
            parts = line.split("\t")
            if len(parts) >= 4 and parts[3].endswith(output_suffix):
                best = (int(parts[1]) - int(parts[0])) / 1000.0
    return best


# A __host__ function called from __host__ __device__ code is a mere warning to nvcc (#20011-D), and the call is
# dropped from the device code: how Partition's search once compiled to nothing. The planted twin of that bug
# (a host-only helper in a __host__ __device__ member of a kernel functor, launched through a template kernel).
PLANTED_HOST_CALL = """#include "cuda/drivers.cuh"
namespace torch_segops { namespace cuda {
inline int64_t planted_host_only(int64_t a, int64_t b) { return (a + b - 1) / b; }
struct PlantedSearch {
  int64_t* p;
  SEGOPS_HD void operator()(int64_t tid) const { p[tid] = planted_host_only(p[tid], 8); }
};
template <class K> __global__ void planted_launch(const K k, int64_t n) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tid < n) k(tid);
}
template __global__ void planted_launch<PlantedSearch>(const PlantedSearch, int64_t);
}}
"""


def cuda_compile_command(build_dir: str) -> list[str]:
    """The build's own nvcc command line for segment_cuda.cu (compile_commands.json), as a list."""
    import shlex
    with open(os.path.join(build_dir, "compile_commands.json")) as fh:
        entries = json.load(fh)
    cmd = next(e["command"] for e in entries if e["file"].endswith("segment_cuda.cu"))
    return shlex.split(cmd)


def build_flags(build_dir: str, drop) -> tuple[str, list[str]]:
    """(nvcc, flags) of the build's segment_cuda.cu command without its source, output, dependency file,
    --keep (a one-off compile does not write into the build's intermediates) and every flag for which drop(flag)
    is true."""
    cmd = cuda_compile_command(build_dir)
    args, skip = [], False
    for a in cmd[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF"):
            skip = True
            continue
        if a in ("-MD", "-c", "--keep") or a.startswith("--keep-dir=") or a.endswith("segment_cuda.cu") or drop(a):
            continue
        args.append(a)
    return cmd[0], args


def compile_like_the_build(build_dir: str, source: str, drop: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Compiles `source` (a .cu file) with the build's flags for segment_cuda.cu, leaving out the flags in
    `drop`, into an object next to it."""
    nvcc, args = build_flags(build_dir, lambda a: a in drop)
    return subprocess.run([nvcc, *args, "-c", source, "-o", source + ".o"], capture_output=True, text=True,
                          cwd=build_dir)
