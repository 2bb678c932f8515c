#!/usr/bin/env python3
"""Compile-and-link check of the CUDA variant without a GPU, and what the built library holds.

    python tools/check_cuda_build.py                       # archs 75-real;90-real, checks, sizes, times
    python tools/check_cuda_build.py --archs default       # the default list of cmake/cuda_architectures.txt
    python tools/check_cuda_build.py --inspect path/_C.so --archs "75-real;90-real"   # no build
    python tools/check_cuda_build.py --compare-compression # also build with --compress-mode=none
    python tools/check_cuda_build.py sizes                 # library size per arch list -> benchmarks/results/

Builds torch_segops with TORCH_SEGOPS_WITH_CUDA=ON against the installed (CPU) torch headers in a
temporary directory, then checks the library: every architecture of the configured list is in the
fatbin (SASS for "NN-real", PTX for "NN-virtual", both for "NN"), the fatbin entries are compressed,
and the only undefined symbols are the torch stable C shim, the CUDA runtime and the C/C++ runtime.
The fatbin is read directly from the ELF section (.nv_fatbin); when cuobjdump is found (PATH, next to
nvcc, $CUDA_HOME/bin, or the nvidia-cuda-cuobjdump pip wheel that tools/bootstrap.sh installs), its
--list-elf/--list-ptx listing is checked against the configured list too, and against the parser.
Exit status 1 when a check fails. Importable: tests/test_cuda_build.py uses these functions.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCH_TABLE = os.path.join(REPO, "cmake", "cuda_architectures.txt")
CI_ARCHS = "75-real;90-real"


# ---- toolchain ------------------------------------------------------------------------------------------

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


# ---- build ----------------------------------------------------------------------------------------------

@dataclass
class Build:
    library: str
    archs: str
    configure_s: float
    build_s: float
    cuda_compile_s: float | None  # the .cu alone (from the build's own timing of that step), when measurable
    log: str = ""


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
          jobs: int | None = None) -> Build:
    """Configures and builds the CUDA variant in build_dir. jobs (default build_jobs()) bounds both the build
    steps run at once and nvcc --threads (the architectures of the .cu compiled in parallel)."""
    nvcc = nvcc or find_nvcc()
    if not nvcc:
        raise RuntimeError("nvcc not found (set CUDACXX or CUDA_HOME, or put nvcc on PATH)")
    jobs = jobs or build_jobs()
    env = dict(os.environ)
    env.pop("CUDAARCHS", None)  # the explicit list below is what we check
    t0 = time.perf_counter()
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
                 bp.stdout + bp.stderr)


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


# ---- nvcc's word on the device code: resources per kernel, the warnings-are-errors control ---------------

@dataclass
class KernelResources:
    arch: int
    kernel: str          # demangled (the functor of run_kernel<...> / run_block_kernel<...>)
    registers: int
    stack: int           # bytes stack frame per thread (local memory)
    spill_stores: int    # bytes per thread
    spill_loads: int
    smem: int            # bytes of static shared memory per block


_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(?:sm|compute)_(\d+)\w?'")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def resource_usage(log: str) -> list[KernelResources]:
    """Per kernel and architecture, from ptxas -v / nvcc --resource-usage output (the CUDA build with
    TORCH_SEGOPS_CUDA_RESOURCE_USAGE=ON, as build() configures it)."""
    rows, cur = [], None
    for line in log.splitlines():
        m = _PTXAS_ENTRY.search(line)
        if m:
            cur = KernelResources(int(m.group(2)), m.group(1), 0, 0, 0, 0, 0)
            rows.append(cur)
            continue
        if cur is None:
            continue
        m = _PTXAS_FRAME.search(line)
        if m:
            cur.stack, cur.spill_stores, cur.spill_loads = (int(g) for g in m.groups())
        m = _PTXAS_USED.search(line)
        if m:
            cur.registers, cur.smem = int(m.group(1)), int(m.group(2) or 0)
    filt = shutil.which("c++filt")
    if filt and rows:
        dem = subprocess.run([filt], input="\n".join(r.kernel for r in rows), capture_output=True, text=True).stdout
        for r, d in zip(rows, dem.splitlines()):
            m = re.match(r"void torch_segops::cuda::run_(?:block_)?kernel<(.*)>\(.*\)$", d)
            r.kernel = re.sub(r"torch_segops::(cuda::)?", "", m.group(1) if m else d).strip()
    return rows


def resources_markdown(rows: list[KernelResources]) -> str:
    lines = ["| arch | kernel | registers | stack frame (B) | spill stores / loads (B) | shared (B) |",
             "|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r.arch, -r.stack - r.spill_stores, r.kernel)):
        lines.append(f"| sm_{r.arch} | `{r.kernel}` | {r.registers} | {r.stack} | {r.spill_stores} / {r.spill_loads} "
                     f"| {r.smem} |")
    return "\n".join(lines) + "\n"


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
    """(nvcc, flags) of the build's segment_cuda.cu command without its source, output, dependency file
    and every flag for which drop(flag) is true."""
    cmd = cuda_compile_command(build_dir)
    args, skip = [], False
    for a in cmd[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF"):
            skip = True
            continue
        if a in ("-MD", "-c") or a.endswith("segment_cuda.cu") or drop(a):
            continue
        args.append(a)
    return cmd[0], args


def compile_like_the_build(build_dir: str, source: str, drop: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Compiles `source` (a .cu file) with the build's flags for segment_cuda.cu, leaving out the flags in
    `drop`, into an object next to it."""
    nvcc, args = build_flags(build_dir, lambda a: a in drop)
    return subprocess.run([nvcc, *args, "-c", source, "-o", source + ".o"], capture_output=True, text=True,
                          cwd=build_dir)


# ---- the pre-Turing rows (nvcc 12 only) -------------------------------------------------------------------
# No nvcc 12 can be installed here (data/compat.yaml, pytorch_conda_forge_archs.nvcc12_here), but PyPI's
# nvidia-cuda-nvcc-cu12 wheel has ptxas 12.9. So the kernels' PTX, made by nvcc 13 for compute_75, is
# assembled for an old arch by that ptxas: every instruction, register and shared-memory limit is checked
# for sm_50/60/70; code under `#if __CUDA_ARCH__ < 750` is not (the front end saw 750).

NVCC12_WHEEL = "nvidia-cuda-nvcc-cu12==12.9.86"
PTX_ISA_OF_PTXAS = {"12.9": "8.8"}  # the newest PTX ISA a ptxas accepts (PTX ISA docs, release history)


def cache_root() -> str:
    return os.environ.get("TORCH_SEGOPS_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "torch-segops")


def nvcc12_wheel_dir(download: bool = True) -> str:
    """host_config.h and ptxas of the nvidia-cuda-nvcc-cu12 12.9.86 wheel, unpacked into the cache folder
    (the wheel downloaded once with pip). Raises RuntimeError saying why when it cannot."""
    import zipfile
    dest = os.path.join(cache_root(), "nvcc-12.9.86")
    members = ["nvidia/cuda_nvcc/include/crt/host_config.h", "nvidia/cuda_nvcc/bin/ptxas"]
    if all(os.path.exists(os.path.join(dest, m)) for m in members):
        return dest
    wheels = os.path.join(cache_root(), "wheels")
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


# ---- what the library holds -----------------------------------------------------------------------------

def elf_sections(data: bytes) -> dict[str, tuple[int, int]]:
    """name -> (file offset, size) of an ELF64 little-endian file's sections."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not an ELF64 little-endian file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    stroff = hdrs[shstrndx][4]
    out = {}
    for name, _typ, _flags, _addr, off, size in hdrs:
        end = data.index(b"\0", stroff + name)
        out[data[stroff + name:end].decode()] = (off, size)
    return out


@dataclass
class FatbinEntry:
    kind: str           # "elf" (SASS) or "ptx"
    arch: int           # e.g. 90
    size: int           # bytes stored (compressed if compressed)
    uncompressed: int   # bytes after decompression (== size when not compressed)
    flags: int
    compressed: bool


FATBIN_MAGIC = 0xBA55ED50
# Entry flags (reverse-engineered, stable across CUDA 11-13): 0x2000 = LZ4 compression (-compress-all,
# nvcc < 12.8 default), 0x8000 = the newer --compress-mode compression.
FLAG_COMPRESSED = 0x2000 | 0x8000


def read_fatbin(path: str) -> list[FatbinEntry]:
    """Entries of the .nv_fatbin section of a shared library (empty list if it has none)."""
    with open(path, "rb") as fh:
        data = fh.read()
    secs = elf_sections(data)
    if ".nv_fatbin" not in secs:
        return []
    off, size = secs[".nv_fatbin"]
    entries: list[FatbinEntry] = []
    pos, end = off, off + size
    while pos + 16 <= end:
        magic, _version, hsize, fsize = struct.unpack_from("<IHHQ", data, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned; skip padding
            continue
        e, stop = pos + hsize, pos + hsize + fsize
        while e + 64 <= stop:
            kind, _unk, ehsize, payload = struct.unpack_from("<HHIQ", data, e)
            comp_size, = struct.unpack_from("<I", data, e + 0x10)
            arch, = struct.unpack_from("<I", data, e + 0x1C)
            flags, = struct.unpack_from("<Q", data, e + 0x28)
            uncompressed, = struct.unpack_from("<Q", data, e + 0x38) if ehsize >= 0x40 else (0,)
            compressed = bool(flags & FLAG_COMPRESSED) and uncompressed > 0
            entries.append(FatbinEntry(
                kind={1: "ptx", 2: "elf"}.get(kind, f"kind{kind}"), arch=arch,
                size=comp_size or payload, uncompressed=uncompressed if compressed else (comp_size or payload),
                flags=flags, compressed=compressed))
            e += ehsize + payload
        pos = (stop + 7) // 8 * 8
    return entries


def expected_entries(archs: str) -> set[tuple[str, int]]:
    """(kind, arch) pairs a CMake CUDA_ARCHITECTURES list must produce."""
    want = set()
    for a in [x for x in re.split(r"[;,]", archs) if x]:
        m = re.match(r"^(\d+)[af]?(?:-(real|virtual))?$", a)
        if not m:
            raise ValueError(f"cannot check CUDA architecture entry {a!r}")
        num, what = int(m.group(1)), m.group(2)
        if what in (None, "real"):
            want.add(("elf", num))
        if what in (None, "virtual"):
            want.add(("ptx", num))
    return want


def check_fatbin(path: str, archs: str) -> list[str]:
    entries = read_fatbin(path)
    if not entries:
        return [f"{path} holds no CUDA fatbin (.nv_fatbin section missing or empty)"]
    problems = compare_entries({(e.kind, e.arch) for e in entries}, archs, "fatbin")
    for e in entries:
        if not e.compressed:
            problems.append(f"{e.kind} sm_{e.arch} is not compressed (flags {e.flags:#x})")
    return problems


# cuobjdump --list-elf / --list-ptx lines: "ELF file    1: _C.1.sm_75.cubin", "PTX file    1: _C.3.sm_120.ptx"
# (PTX is named sm_NN too; older toolkits wrote compute_NN). The a/f suffix (sm_90a) keeps the number.
_LISTING_LINE = re.compile(r"^(ELF|PTX) file\s+\d+:\s+\S*?\.(?:sm|compute)_(\d+)[af]?\.(cubin|ptx)\s*$")


def parse_cuobjdump_listing(text: str) -> set[tuple[str, int]]:
    """(kind, arch) pairs of cuobjdump --list-elf and/or --list-ptx output ("elf" = SASS, "ptx")."""
    have = set()
    for line in text.splitlines():
        m = _LISTING_LINE.match(line.strip())
        if m:
            have.add(("elf" if m.group(1) == "ELF" else "ptx", int(m.group(2))))
    return have


def _entry_name(kind: str, arch: int) -> str:
    return f"SASS sm_{arch}" if kind == "elf" else f"PTX compute_{arch}"


def compare_entries(have: set[tuple[str, int]], archs: str, source: str) -> list[str]:
    """Problems of a library whose fatbin holds `have` (from `source`) for the CMake arch list `archs`: every
    configured SASS/PTX must be there, and nothing else. Empty list: it matches."""
    want = expected_entries(archs)
    problems = [f"{source}: missing {_entry_name(k, a)} (configured: {archs})" for k, a in sorted(want - have)]
    problems += [f"{source}: unexpected {_entry_name(k, a)} (configured: {archs})" for k, a in sorted(have - want)]
    return problems


def cuobjdump_listing(cuobjdump: str, path: str) -> set[tuple[str, int]]:
    """What cuobjdump --list-elf and --list-ptx list in `path` (raises if cuobjdump fails)."""
    text = ""
    for flag in ("--list-elf", "--list-ptx"):
        cp = subprocess.run([cuobjdump, flag, path], capture_output=True, text=True)
        # a library without PTX: exit 0 and "cuobjdump info : No PTX file found" on stderr
        if cp.returncode != 0:
            raise RuntimeError(f"{cuobjdump} {flag} {path} failed ({cp.returncode}):\n{cp.stdout}{cp.stderr}")
        text += cp.stdout
    return parse_cuobjdump_listing(text)


def cuobjdump_sass(cuobjdump: str, path: str, arch: int) -> dict[str, str]:
    """The SASS of every kernel of `path` for sm_`arch`: mangled name -> disassembly. cuobjdump runs nvdisasm,
    which the nvidia-cuda-nvdisasm wheel puts next to the wheel's cuobjdump (tools/bootstrap.sh)."""
    tools = os.path.dirname(cuobjdump)
    env = dict(os.environ, PATH=tools + os.pathsep + os.environ.get("PATH", ""))
    if os.path.exists(os.path.join(tools, "nvdisasm")):
        env["NVDISASM_PATH"] = tools
    cp = subprocess.run([cuobjdump, "-sass", "-arch", f"sm_{arch}", path], capture_output=True, text=True, env=env)
    if cp.returncode != 0:
        raise RuntimeError(f"{cuobjdump} -sass {path} failed ({cp.returncode}): {cp.stderr[-2000:]}")
    parts = re.split(r"\n\s*Function : ", cp.stdout)[1:]
    return {p.split("\n", 1)[0].strip(): p for p in parts}


# Undefined dynamic symbols a CUDA build may have: the torch stable C shim (libtorch_cpu/libtorch_cuda,
# bound when torch has loaded them), the CUDA runtime (versioned libcudart.so.N), the C/C++ runtime.
ALLOWED_UNVERSIONED = re.compile(r"^(aoti_torch_\w+|torch_\w+|__gmon_start__|_ITM_\w+|__cxa_finalize)$")
ALLOWED_VERSIONS = re.compile(r"^(GLIBC|GLIBCXX|CXXABI|GCC|libcudart\.so)")


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


def inspect(path: str, archs: str) -> dict:
    """Everything the checks report about a built library."""
    entries = read_fatbin(path)
    with open(path, "rb") as fh:
        secs = elf_sections(fh.read())
    problems = check_fatbin(path, archs) + check_symbols(path) + check_needed(path)
    cuobjdump = find_cuobjdump(find_nvcc())
    cross = None
    if cuobjdump:
        listed = cuobjdump_listing(cuobjdump, path)
        cross = sorted(f"{k}:{a}" for k, a in listed)
        problems += compare_entries(listed, archs, "cuobjdump")
        if listed != {(e.kind, e.arch) for e in entries}:
            problems.append(f"cuobjdump lists {sorted(listed)} but the fatbin parser found "
                            f"{sorted((e.kind, e.arch) for e in entries)}")
    return {
        "library": path,
        "archs": archs,
        "size_bytes": os.path.getsize(path),
        "fatbin_bytes": secs.get(".nv_fatbin", (0, 0))[1],
        "entries": [e.__dict__ for e in entries],
        "needed": needed_libraries(path),
        "cuobjdump": cross,
        "problems": problems,
    }


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def library_sizes(path: str) -> dict:
    """Bytes of the library, of its .nv_fatbin section, and of the fatbin entries as stored / uncompressed."""
    entries = read_fatbin(path)
    with open(path, "rb") as fh:
        fatbin = elf_sections(fh.read()).get(".nv_fatbin", (0, 0))[1]
    return {"size_bytes": os.path.getsize(path), "fatbin_bytes": fatbin, "entries": len(entries),
            "stored_bytes": sum(e.size for e in entries), "uncompressed_bytes": sum(e.uncompressed for e in entries)}


# ---- library size per arch list (`sizes`) ----------------------------------------------------------------

# (arch list or "default", TORCH_SEGOPS_CUDA_COMPRESS), cheapest first so that a cut-short run still reports.
SIZE_CONFIGS = [("90-real", "size"), (CI_ARCHS, "size"), (CI_ARCHS, "none"), ("default", "size"), ("default", "none")]


def nvcc_full_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else nvcc_version(nvcc)


def torch_headers_version() -> str:
    """Version of the torch headers the build uses (torch/headeronly/version.h of the installed torch)."""
    import importlib.util
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "not found"
    path = os.path.join(list(spec.submodule_search_locations)[0], "include", "torch", "headeronly", "version.h")
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError:
        return "not found"
    parts = [re.search(rf"#define TORCH_VERSION_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else "unknown"


def git_commit() -> str:
    """Short HEAD commit, with "+ uncommitted changes" when src/ or cmake/ differ from it."""
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "src", "cmake", "CMakeLists.txt"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" + uncommitted changes" if dirty else "")


def _kib_mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.0f} KiB ({n / 2**20:.2f} MiB)"


def sizes_markdown(meta: dict, rows: list[dict]) -> str:
    """The size table. rows: {archs, compress, and either the library_sizes() keys plus build_s and
    cuda_compile_s, or note (why it was not measured)}."""
    lines = [
        f"# CUDA library size per architecture list ({meta['date']})",
        "",
        f"`python tools/check_cuda_build.py sizes` on {meta['machine']}; nvcc {meta['nvcc']}, torch headers "
        f"{meta['torch']}, commit {meta['commit']}. Builds of `_C.so` (CPU + CUDA sources, Release) with "
        f"{meta['jobs']} build job(s) and `nvcc --threads={meta['jobs']}`; the build time is the whole "
        "`cmake --build` (the CUDA source alone in brackets), not counting configure. Sizes: the library "
        "file, its `.nv_fatbin` section, and the SASS/PTX entries as stored and after decompression.",
        "",
        "| arch list | fatbin compression | library | .nv_fatbin | entries (stored / uncompressed) | build time |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        head = f"| `{r['archs']}` | {r['compress']} |"
        if "note" in r:
            lines.append(f"{head} {r['note']} | | | |")
            continue
        cu = f" ({r['cuda_compile_s']:.0f} s)" if r.get("cuda_compile_s") else ""
        lines.append(f"{head} {_kib_mib(r['size_bytes'])} | {_kib_mib(r['fatbin_bytes'])} | "
                     f"{r['entries']} ({r['stored_bytes'] / 1024:,.0f} / {r['uncompressed_bytes'] / 1024:,.0f} KiB)"
                     f" | {r['build_s']:.0f} s{cu} |")
    lines += ["", *meta.get("notes", [])]
    return "\n".join(lines).rstrip() + "\n"


def sizes_command(out_path: str, nvcc: str, configs: list[tuple[str, str]]) -> int:
    """Builds the CUDA library for each (archs, compression) and writes the table to out_path, rewritten
    after every build so that a run cut short keeps what it measured."""
    import datetime
    import platform
    version = nvcc_version(nvcc)
    meta = {"date": datetime.date.today().isoformat(), "nvcc": f"{nvcc_full_version(nvcc)} ({nvcc})",
            "torch": torch_headers_version(), "commit": git_commit(), "jobs": build_jobs(),
            "machine": f"{platform.machine()} Linux, {os.cpu_count()} CPUs (no GPU needed)",
            "notes": [f"`default` = the row of `cmake/cuda_architectures.txt` for nvcc {version}: "
                      f"`{default_archs(version)}`."]}
    rows = [{"archs": default_archs(version) if a == "default" else a, "compress": c,
             "note": "not measured (run cut short)"} for a, c in configs]
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    for i, row in enumerate(rows):
        print(f"[{i + 1}/{len(rows)}] archs {row['archs']}, compression {row['compress']}", flush=True)
        with tempfile.TemporaryDirectory(prefix="segops-cuda-size-") as tmp:
            try:
                b = build(os.path.join(tmp, "build"), row["archs"], nvcc,
                          extra=[f"-DTORCH_SEGOPS_CUDA_COMPRESS={row['compress']}"])
            except RuntimeError as e:
                row["note"] = "build failed"
                print(str(e)[-3000:], file=sys.stderr)
            else:
                del row["note"]
                row.update(library_sizes(b.library), build_s=b.build_s, cuda_compile_s=b.cuda_compile_s)
                print(f"  {_kib_mib(row['size_bytes'])}, build {b.build_s:.0f} s", flush=True)
        with open(out_path, "w") as fh:
            fh.write(sizes_markdown(meta, rows))
    print(f"wrote {out_path}")
    return 0 if all("note" not in r for r in rows) else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", nargs="?", choices=("check", "sizes"), default="check",
                   help="check (default): build and check one arch list; sizes: library size per arch list")
    p.add_argument("--out", help="sizes: the markdown file (default "
                                 "benchmarks/results/cuda-library-size-<date>.md)")
    p.add_argument("--configs", nargs="+", metavar="ARCHS:COMPRESS",
                   help="sizes: what to build, e.g. '90-real:size' 'default:none' (default: "
                        + " ".join(f"'{a}:{c}'" for a, c in SIZE_CONFIGS) + ")")
    p.add_argument("--archs", default=CI_ARCHS,
                   help=f"CMake CUDA architecture list, or 'default' for this nvcc's row (default {CI_ARCHS})")
    p.add_argument("--build-dir", help="build here (kept) instead of a temporary directory")
    p.add_argument("--inspect", metavar="SO", help="only inspect an existing library (no build)")
    p.add_argument("--compare-compression", action="store_true",
                   help="also build with TORCH_SEGOPS_CUDA_COMPRESS=none and report both sizes")
    p.add_argument("--json", metavar="FILE", help="write the report as JSON")
    p.add_argument("--resources", metavar="FILE", help="write ptxas's resources per kernel (registers, stack frame, "
                                                        "spills, shared memory) as a markdown table")
    args = p.parse_args(argv)

    nvcc = find_nvcc()
    if args.command == "sizes":
        if not nvcc:
            print("nvcc not found (set CUDACXX or CUDA_HOME)", file=sys.stderr)
            return 2
        import datetime
        out = args.out or os.path.join(REPO, "benchmarks", "results",
                                       f"cuda-library-size-{datetime.date.today().isoformat()}.md")
        configs = [tuple(c.rsplit(":", 1)) for c in args.configs] if args.configs else SIZE_CONFIGS
        return sizes_command(out, nvcc, configs)
    archs = args.archs
    if archs == "default":
        if not nvcc:
            print("nvcc not found", file=sys.stderr)
            return 2
        archs = default_archs(nvcc_version(nvcc)) or ""
    if args.inspect:
        report = inspect(args.inspect, archs)
    else:
        if not nvcc:
            print("SKIP: nvcc not found (set CUDACXX or CUDA_HOME); nothing was checked", file=sys.stderr)
            return 2
        print(f"nvcc {nvcc_version(nvcc)} ({nvcc}); archs {archs}", flush=True)
        with tempfile.TemporaryDirectory(prefix="segops-cuda-") as tmp:
            bdir = args.build_dir or os.path.join(tmp, "build")
            b = build(bdir, archs, nvcc)
            report = inspect(b.library, archs)
            report.update(configure_s=round(b.configure_s, 1), build_s=round(b.build_s, 1),
                          cuda_compile_s=round(b.cuda_compile_s, 1) if b.cuda_compile_s else None,
                          resources=[r.__dict__ for r in resource_usage(b.log)])
            if args.compare_compression:
                nb = build(os.path.join(tmp, "build-uncompressed"), archs, nvcc,
                           extra=["-DTORCH_SEGOPS_CUDA_COMPRESS=none"])
                sizes = library_sizes(nb.library)
                report["uncompressed_size_bytes"] = sizes["size_bytes"]
                report["uncompressed_fatbin_bytes"] = sizes["fatbin_bytes"]
    print(f"library: {report['library']}  size {_mib(report['size_bytes'])}, fatbin {_mib(report['fatbin_bytes'])}")
    if report.get("resources"):
        res = [KernelResources(**r) for r in report["resources"]]
        local = [r for r in res if r.stack or r.spill_stores or r.spill_loads]
        print(f"ptxas: {len(res)} kernels; {len(local)} use local memory (stack frame / spills, bytes per thread):")
        for r in sorted(local, key=lambda r: (-r.spill_stores, -r.stack, r.arch))[:12]:
            print(f"  sm_{r.arch} {r.kernel[:110]}: {r.registers} regs, stack {r.stack}, spills {r.spill_stores}/{r.spill_loads}")
        if args.resources:
            with open(args.resources, "w") as fh:
                fh.write(resources_markdown(res))
    if "build_s" in report:
        print(f"configure {report['configure_s']} s, build {report['build_s']} s"
              + (f" (CUDA source alone {report['cuda_compile_s']} s)" if report.get("cuda_compile_s") else ""))
    if "uncompressed_size_bytes" in report:
        print(f"without fatbin compression: size {_mib(report['uncompressed_size_bytes'])}, "
              f"fatbin {_mib(report['uncompressed_fatbin_bytes'])}")
    for e in report["entries"]:
        print(f"  {e['kind']:3s} {e['arch']:4d}  {e['size']:>9d} bytes"
              + (f" (compressed from {e['uncompressed']})" if e["compressed"] else " (not compressed)"))
    print(f"NEEDED: {', '.join(report['needed'])}")
    if report["cuobjdump"] is not None:
        print(f"cuobjdump lists: {report['cuobjdump']}")
    else:
        print("WARNING: cuobjdump not found (PATH, next to nvcc, $CUDA_HOME/bin, or the nvidia-cuda-cuobjdump "
              "pip wheel that tools/bootstrap.sh installs): the fatbin parser's result was not cross-checked")
    for prob in report["problems"]:
        print(f"PROBLEM: {prob}")
    print("OK" if not report["problems"] else f"{len(report['problems'])} problem(s)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    return 0 if not report["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
