"""Memory-access model of the CUDA kernels: predicted H100 times without a GPU.

    python research/gpu_model/model.py --calibrate          # the calibration: old kernels vs the recorded H100 rows
    python research/gpu_model/model.py                      # the current kernels' predictions next to those rows
    python research/gpu_model/model.py --ops sum --dists uniform --features 1 16   # predictions only
    python research/gpu_model/model.py --markdown out.md    # also write the table as markdown
    python research/gpu_model/model.py --against benchmarks/results/<run>.md   # compare with another measured run

What it does, per benchmark case (the inputs of benchmarks/bench_cuda.py: same distributions, seed and
sizes, 2^26 elements):

1. Traces the kernels. research/gpu_model/trace_kernels.cpp (built here with g++) runs the real
   drivers and kernels of src/csrc/cuda/*.cuh on the CPU and records, for a sample of
   warps, every global load and store (address, bytes, access site). Per launch it reports
   - sector efficiency: useful bytes / (32 x distinct 32-byte sectors) of each warp instruction (the
     k-th execution of an access site by the 32 lanes), and the distinct 128-byte lines of each (L1
     wavefronts);
   - rounds: a lane's loads between two waits (a load whose value is used at once, such as an offset,
     an explicit SEGOPS_TRACE_USE, a store of loaded data) are in flight together; a warp's round is
     classed L1 / L2 / DRAM by the slowest sector it needs (data written by an earlier launch of the op
     that fits in L2: L2);
   - divergence: warp memory instructions and rounds as a SIMT warp runs them (lanes aligned per
     "epoch", an iteration that starts with offset loads; a lane with less work in an epoch idles);
   - the distinct sectors read and written (DRAM traffic);
   - shared memory of block kernels (ReduceFlatBlock): per warp instruction (the k-th access of a site by
     each lane after the same number of loop steps), the bank wavefronts it takes (32 banks of 4 bytes:
     d distinct words in one bank cost d; one word read by many lanes is a broadcast) and the ones it would
     take without conflicts.
2. Resources of the real compiled kernels: `nvcc -cubin -arch=sm_90 -Xptxas -v` of segment_cuda.cu (registers
   per thread, shared memory per block -> resident warps per SM; stack frame and spill bytes per thread) and
   `cuobjdump -sass` of it (static counts of local-memory LDL / STL and global LDG / STG instructions).
3. Time per launch: p-norm of five terms:
   - DRAM = DRAM bytes / COPY_BW;
   - latency (Little's law) = whole waves of resident blocks (a partial last wave costs a whole one) x SIMT
     rounds per warp x (lat_scale x mean load latency of its rounds + round_cycles), at least the longest
     sampled warp's chain;
   - L1 data path = (lsu_cycles x the 128-byte lines of all global and local warp instructions + the
     shared-memory wavefronts) / (SMS x CLOCK); local memory: the kernel's static LDL / STL per LDG / STG
     times its traced warp memory instructions, 32 x (bytes per lane) / 128 lines each;
   - L2 = (L1 misses + stores) x 32 B / L2_BW;
   - issue = warp memory instructions (SIMT) x inst_cycles / (SMS x 4 schedulers x CLOCK).
4. Time of a call: its launches in order (chain): host_s of host work, the host submits one launch every
   SUBMIT_S, a launch starts when the previous one has ended plus launch_s and it has been submitted.
   `--calibrate` traces the kernels measured on the H100 (commit 6bf4532 = the measured 0533d0f plus
   trace hooks, materialised from git under the cache with this tree's tracer; their resources from
   research/gpu_model/results/gpu-model-resources-sm90-6bf4532.json), fits lat_scale, round_cycles, inst_cycles,
   lsu_cycles, p, launch_s and host_s (grid search, squared log error) on the 40 full-size rows of
   benchmarks/results/cuda-h100-2026-11-23.md and reports the leave-one-out errors (each row predicted by
   the fit on the other 39). The constants are below (CALIBRATION); README.md (here) gives the fit. The column
   "bank conflicts" is the predicted time over the time with conflict-free shared-memory accesses, less 1.

Traces are cached in gpu-model/ of the cache folder ($TORCH_SEGOPS_CACHE, default ~/.cache/torch-segops), keyed
by the kernel sources; the first full run takes a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# ---- H100 SXM5 80GB constants ----------------------------------------------------------------------------
SMS = 132  # SMs enabled on H100 SXM5 (NVIDIA H100 whitepaper; chipsandcheese.com "Nvidia's H100: Funny L2")
HBM_PEAK = 3.35e12  # B/s, HBM3 (NVIDIA H100 SXM datasheet)
# B/s, read + write, what dst.copy_(src) reached in the same runs (median "copy GB/s" of the 40 rows of
# benchmarks/results/cuda-h100-2026-11-23.md): the DRAM roof a streaming kernel can reach
COPY_BW = 2.83e12
CLOCK = 1.755e9  # Hz, SM clock under memory-bound load (H100 boost 1.755-1.98 GHz; chipsandcheese.com)
# load-to-use latencies in cycles (fp4-site.pages.dev "GPU memory hierarchy": L1 ~30, L2 ~200, HBM ~600;
# chipsandcheese.com measured similar); scaled by the fitted LAT_SCALE
LAT_L1, LAT_L2, LAT_DRAM = 30.0, 200.0, 600.0
# L1 wavefronts: a warp load or store touching k distinct 128-byte lines takes k L1 tag / data cycles
# (Nsight Compute "wavefronts" of l1tex; one per cycle per SM, 128 B/clk of L1 load bandwidth per SM)
LSU_LINES_PER_CLK = 1.0
# Shared memory: 32 banks of 4 bytes, one wavefront (32 distinct banks, or one word broadcast) per cycle per SM
# (CUDA C++ Programming Guide, "Shared Memory" of compute capability 5.x and later); a warp instruction whose
# lanes touch d distinct words of one bank takes d wavefronts. The tracer counts them.
SMEM_WAVEFRONTS_PER_CLK = 1.0
# Launches: kernels of one stream run one after the other, each after the previous one ends. A launch costs
# launch_s on the GPU (the grid's drain and the next grid's start; fitted) and cannot start before the host has
# submitted it: the host submits one launch every SUBMIT_S (cudaLaunchKernel's host cost: a per-launch overhead in
# the CUDA Programming Guide's CUDA Graphs section, "on the order of microseconds" in modal.com's GPU glossary;
# 2-5 us of dispatch measured around a 24 us kernel, dogacel.github.io 2026-03, B200) after host_s of host work
# before the first one (torch dispatch, plan, workspace; fitted). The measured rows time start event .. end event around
# one call (benchmarks/bench_cuda.py cuda_time), so that chain is in them.
SUBMIT_S = 3e-6
SCHEDULERS_PER_SM = 4  # warp schedulers per SM, one warp instruction issued per cycle each (Hopper SM)
L1_DATA_BYTES = 224 * 1024  # L1 left to data when a kernel uses no shared memory (256 KB L1 + shared per SM)
L2_BW = 5.5e12  # B/s, L2 -> SM bandwidth (chipsandcheese.com measured ~5.5 TB/s on H100 PCIe)
REGS_PER_SM, MAX_WARPS_PER_SM, MAX_BLOCKS_PER_SM, SMEM_PER_SM = 65536, 64, 32, 228 * 1024
THREADS_PER_BLOCK = 256  # segment_cuda.cu kThreads

# Fitted on the 40 rows (python research/gpu_model/model.py --calibrate, 2026-11-25: calibration 5): latency scale,
# cycles per round, per warp memory instruction and per L1 line, p of the p-norm, GPU seconds per launch, host
# seconds before the first launch (0: the 40 large rows cannot tell it from SUBMIT_S; README.md).
CALIBRATION = {"lat_scale": 2.0, "round_cycles": 400, "inst_cycles": 64, "lsu_cycles": 2, "p": 4.0, "launch_s": 2e-6,
               "host_s": 0.0}

# The error the model states for a full-size row (|predicted / measured - 1|), from the leave-one-out
# calibration (README.md); pairs of rows further apart than this must be ordered right.
STATED_ERROR = 0.40

MEASURED = os.path.join(REPO, "benchmarks", "results", "cuda-h100-2026-11-23.md")
RESOURCES = os.path.join(HERE, "results", "gpu-model-resources-sm90.json")
# Where RESOURCES was in the calibration commit's tree
RESOURCES_AT_CALIBRATION = "benchmarks/results/gpu-model-resources-sm90.json"
# The calibration kernels' resources with their stack, spills and SASS local-memory counts (nvcc 13.0 -Xptxas -v
# and cuobjdump -sass of commit 6bf4532's segment_cuda.cu; registers as in the file committed with it)
CALIBRATION_RESOURCES = os.path.join(HERE, "results", "gpu-model-resources-sm90-6bf4532.json")
SOURCES = [*(f"src/csrc/cuda/{f}.cuh" for f in ("device_primitives", "indptr_errors", "chunk_grid", "reduce_kernels",
                                                "short_kernels", "block_kernels", "expand_kernels", "drivers",
                                                "cuda_call", "call_errors")),
           "src/csrc/cuda_plans.h", "src/csrc/index_math.h", "src/csrc/cuda/segment_cuda.cu", "src/csrc/merge_path.h",
           "src/csrc/reduction_policies.h", "src/csrc/reduction_table.h", "research/gpu_model/trace_kernels.cpp",
           "tests/cuda_emulation/block_emulation.h"]
ELEMS = 1 << 26


TRACER_FILES = ["research/gpu_model/trace_kernels.cpp", "tests/cuda_emulation/block_emulation.h"]
KERNEL_SOURCES = [f for f in SOURCES if f not in TRACER_FILES]  # what the saved ptxas resources depend on
# the reducer policies, the registry's rows
POLICIES, TABLE = "src/csrc/reduction_policies.h", "src/csrc/reduction_table.h"
# The kernels measured on the H100 (benchmarks/results/cuda-h100-2026-11-23.md ran commit 0533d0f): commit
# 6bf4532 holds the same kernels plus the trace hooks. --calibrate traces them with this tree's tracer.
CALIBRATION_COMMIT = "6bf4532"


def source_hash(files=SOURCES, root: str = REPO) -> str:
    """A hash of these files under root (the tracer's cache key: any change rebuilds it). One that root lacks counts
    as missing: the calibration commit's tree (--calibrate, materialise) has its kernels in
    cuda/segment_kernels.cuh, from before src/csrc/cuda/ was split into the files SOURCES names."""
    h = hashlib.sha256()
    for f in files:
        path = os.path.join(root, f)
        if not os.path.exists(path):
            h.update(f"missing {f}".encode())
            continue
        with open(path, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()[:16]


# ---- what the saved ptxas resources depend on -------------------------------------------------------------------
# The code of KERNEL_SOURCES, keyed so that a new reduction needs no new resources to keep the others' valid:
# "source_hash" hashes the code every kernel shares (comments, `#include "..."` lines and spacing left out, so a
# renamed header or an edited comment changes nothing; the table's rows left out: a row adds kernels, it changes
# none), "reducer_hashes" each reducer policy of POLICIES (with the policies it names). A saved kernel is current
# when the shared hash and the hashes of the reducers its functor names are; one without saved resources is "not
# measured" (the model says so); a stale one is never used.

def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def code_of(text: str) -> str:
    """C++ source as the compiler sees its tokens: comments, project includes and spacing dropped."""
    text = re.sub(r'"(?:\\.|[^"\\\n])*"|//[^\n]*|/\*.*?\*/',
                  lambda m: m.group(0) if m.group(0).startswith('"') else " ", text, flags=re.S)
    text = re.sub(r'^\s*#\s*include\s*"[^"]*"', "", text, flags=re.M)
    return " ".join(text.split())


def table_code(text: str) -> str:
    """The table's code without the rows of SEGOPS_REDUCTIONS."""
    return re.sub(r"^\s*X\([^()]*\)\s*\\?\s*$", "", text, flags=re.M)


# a reducer policy: `template <...> struct NameOp ... };` or `template <...> using NameOp = ...;` at the top level
POLICY_BLOCK = r"^template <[^>]*> (?:struct (\w+Op)\b.*?^\};|using (\w+Op) = [^;]*;)"


def policy_blocks(text: str) -> tuple[str, dict]:
    """(the policies file without its reducers, {reducer name: its code})."""
    blocks = {}

    def take(m):
        blocks[m.group(1) or m.group(2)] = code_of(m.group(0))
        return ""
    rest = re.sub(POLICY_BLOCK, take, text, flags=re.S | re.M)
    return rest, blocks


def kernel_hashes(root: str = REPO) -> dict:
    """{"source_hash": the shared code's hash, "reducer_hashes": {reducer: hash}} of root's KERNEL_SOURCES."""
    shared, reducers = [], {}
    for f in KERNEL_SOURCES:
        with open(os.path.join(root, f)) as fh:
            text = fh.read()
        if f == POLICIES:
            text, reducers = policy_blocks(text)
        elif f == TABLE:
            text = table_code(text)
        shared.append(code_of(text))

    def closure(name, seen):
        seen.add(name)
        for other in reducers:
            if other not in seen and re.search(rf"\b{other}\b", reducers[name]):
                closure(other, seen)
        return seen
    return {"source_hash": _hash("\n".join(shared)),
            "reducer_hashes": {n: _hash("\n".join(reducers[m] for m in sorted(closure(n, set()))))
                               for n in reducers}}


def reducers_of(kernel: str) -> set:
    """The reducer policies a kernel's functor names (torch_segops::SumOp<float>, ...)."""
    return set(re.findall(r"\b(\w+Op)<", kernel))


def stale_kernels(saved: dict, now: dict) -> list:
    """The saved kernels whose code changed since their resources were measured."""
    if saved.get("source_hash") != now["source_hash"]:
        return sorted(saved["kernels"])
    was, cur = saved.get("reducer_hashes", {}), now["reducer_hashes"]
    return sorted(k for k in saved["kernels"] if any(was.get(r) != cur.get(r) for r in reducers_of(k)))


def unmeasured_reducers(saved: dict, now: dict) -> list:
    """The reducers of the sources with no saved resources (a reduction added since): the model says "not
    measured" for their kernels."""
    return sorted(set(now["reducer_hashes"]) - set(saved.get("reducer_hashes", {})))


def cache_dir() -> str:
    from tools.conda_tools import cache_dir as cache_root
    d = str(cache_root() / "gpu-model")
    os.makedirs(d, exist_ok=True)
    return d


def materialise(commit: str = CALIBRATION_COMMIT) -> str:
    """A source root (under the cache) holding src/csrc and the sm_90 resources of `commit` and this tree's
    tracer (TRACER_FILES): what --calibrate traces."""
    full = subprocess.run(["git", "-C", REPO, "rev-parse", commit], capture_output=True, text=True, check=True)
    root = os.path.join(cache_dir(), f"src-{full.stdout.strip()[:12]}-{source_hash(TRACER_FILES)}")
    if os.path.isdir(root):
        return root
    tmp = f"{root}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    arc = subprocess.run(["git", "-C", REPO, "archive", commit, "src/csrc"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", tmp], input=arc, check=True)
    for f in TRACER_FILES:
        os.makedirs(os.path.dirname(os.path.join(tmp, f)), exist_ok=True)
        shutil.copy(os.path.join(REPO, f), os.path.join(tmp, f))
    res = subprocess.run(["git", "-C", REPO, "show", f"{commit}:{RESOURCES_AT_CALIBRATION}"],
                         capture_output=True, check=True).stdout
    os.makedirs(os.path.dirname(os.path.join(tmp, os.path.relpath(RESOURCES, REPO))), exist_ok=True)
    with open(os.path.join(tmp, os.path.relpath(RESOURCES, REPO)), "wb") as fh:
        fh.write(res)
    os.replace(tmp, root)
    return root


def torch_include() -> str:
    import importlib.util
    spec = importlib.util.find_spec("torch")
    return os.path.join(list(spec.submodule_search_locations)[0], "include")


# ---- tracer ---------------------------------------------------------------------------------------------------

def build_tracer(root: str = REPO, defines: tuple = (), opt: str = "-O2") -> str:
    """The tracer of root's kernels (cached per source hash); defines: extra macros (test_model.py
    builds the plain ReduceFlatBlock layout with SEGOPS_FLAT_PLAIN_LAYOUT to compare against); opt: the
    optimisation (test_model.py builds the calibration commit's tracer at -O0, quicker to compile)."""
    exe = os.path.join(cache_dir(), "-".join(["trace_kernels", source_hash(root=root), *defines,
                                              *([opt] if opt != "-O2" else [])]))
    if not os.path.exists(exe):
        tmp = f"{exe}.{os.getpid()}.tmp"
        cmd = ["g++", "-std=c++17", opt, "-DSEGOPS_TRACE_ACCESSES", *(f"-D{d}" for d in defines), "-isystem", torch_include(),
               "-I", os.path.join(root, "src", "csrc"), "-I", os.path.join(root, "tests", "cuda_emulation"),
               os.path.join(root, "research", "gpu_model", "trace_kernels.cpp"),
               "-o", tmp]
        subprocess.run(cmd, check=True)
        os.replace(tmp, exe)
    return exe


def case_indptr(dist: str, feat: int, elems: int = ELEMS):
    """The benchmark's indptr for this case (benchmarks/bench_cuda.py make_indptr, seed 0)."""
    import torch
    from benchmarks import bench_cuda
    gen = torch.Generator().manual_seed(0)
    rows = max(1, elems // feat)
    return rows, bench_cuda.make_indptr(rows, dist, gen)


def trace(op: str, dtype: str, dist: str, feat: int, elems: int = ELEMS, root: str = REPO) -> list[dict]:
    key = f"{source_hash(root=root)}-{op}-{dtype}-{dist}-{feat}-{elems}"
    path = os.path.join(cache_dir(), key + ".json")
    if os.path.exists(path):
        with open(path) as fh:
            return json.load(fh)
    exe = build_tracer(root)
    rows, indptr = case_indptr(dist, feat, elems)
    ipath = os.path.join(cache_dir(), f"indptr-{dist}-{feat}-{elems}.bin")
    if not os.path.exists(ipath):
        import threading
        tmp = f"{ipath}.{os.getpid()}.{threading.get_ident()}"
        indptr.numpy().tofile(tmp)
        os.replace(tmp, ipath)
    cp = subprocess.run([exe, op, dtype, str(feat), str(rows), ipath], capture_output=True, text=True)
    if cp.returncode != 0:
        raise RuntimeError(f"tracer failed for {key}: {cp.stderr[-2000:]}")
    launches = [json.loads(line) for line in cp.stdout.splitlines() if line.startswith("{")]
    with open(path + ".tmp", "w") as fh:
        json.dump(launches, fh)
    os.replace(path + ".tmp", path)
    return launches


# ---- occupancy from the compiled kernels ------------------------------------------------------------------------

def _norm(name: str) -> str:
    return re.sub(r"\s+", "", name)


def compile_resources(nvcc: str) -> dict:
    """{normalised functor type: {"regs": n, "smem": bytes, "stack": bytes, "spill_st": bytes, "spill_ld": bytes}}
    from ptxas -v of an sm_90 cubin (stack frame and spill bytes per thread: local memory)."""
    out = os.path.join(cache_dir(), "segment_cuda.cubin")
    cmd = [nvcc, "-cubin", "-arch=sm_90", "-O3", "-std=c++17", "--expt-relaxed-constexpr", "-DUSE_CUDA",
           "-DTORCH_SEGOPS_WITH_CUDA", "-DTORCH_TARGET_VERSION=0x020a000000000000",
           "-I", os.path.join(REPO, "src", "csrc"), "-isystem", torch_include(), "-Xptxas", "-v",
           os.path.join(REPO, "src", "csrc", "cuda", "segment_cuda.cu"), "-o", out]
    cp = subprocess.run(cmd, capture_output=True, text=True)
    if cp.returncode != 0:
        raise RuntimeError(cp.stderr[-4000:])
    return resource_table(cp.stderr, disassemble(out, nvcc))


def resource_table(ptxas_log: str, sass: str | None) -> dict:
    """compile_resources' table from the ptxas -v output and the SASS (None: no local instruction counts)."""
    res = parse_ptxas(ptxas_log)
    for mangled, counts in (parse_sass(sass) if sass else {}).items():
        if mangled in res:
            res[mangled].update(counts)
    names = list(res)
    filt = shutil.which("c++filt")
    dem = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    table = {}
    for mangled, d in zip(names, dem):
        m = re.match(r"void torch_segops::cuda::run_(?:block_)?kernel<(.*)>\((.*)\)$", d)
        if m:
            table[_norm(m.group(1))] = res[mangled]
    return table


def parse_ptxas(log: str) -> dict:
    """{mangled entry: {"regs", "smem", "stack", "spill_st", "spill_ld"}} from `ptxas -v` output of one arch
    (tools/ptxas_resources.py reads it)."""
    from tools.ptxas_resources import parse_ptxas as rows
    return {r.kernel: {"regs": r.registers, "smem": r.smem, "stack": r.stack, "spill_st": r.spill_stores,
                       "spill_ld": r.spill_loads} for r in rows(log)}


def disassemble(cubin: str, nvcc: str) -> str | None:
    """cuobjdump -sass of the cubin ($CUOBJDUMP, else where tools/cuda_toolchain.py finds it: PATH, next to nvcc, the
    pip wheel bootstrap installs; it needs nvdisasm beside it), or None."""
    from tools.cuda_toolchain import find_cuobjdump
    exe = os.environ.get("CUOBJDUMP") or find_cuobjdump(nvcc)
    if exe is None:
        print("warning: no cuobjdump: local-memory instructions not counted (the model uses the ptxas sizes only)",
              file=sys.stderr)
        return None
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(exe) + os.pathsep + env.get("PATH", "")
    cp = subprocess.run([exe, "-sass", cubin], capture_output=True, text=True, env=env)
    return cp.stdout if cp.returncode == 0 else None


# an instruction line of cuobjdump -sass (/*0040*/, an optional predicate) that is a local or global load / store
SASS_MEMORY_OP = r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?(LDL|STL|LDG|STG)((?:\.[A-Z0-9_]+)*)"
SASS_WIDTH = {"64": 8, "128": 16, "U8": 1, "S8": 1, "U16": 2, "S16": 2}


def parse_sass(text: str) -> dict:
    """{mangled kernel: {"local_inst", "local_bytes", "global_inst"}}: the static count of local-memory
    instructions (LDL / STL) in each kernel's SASS, their bytes per lane summed, and the static count of
    global ones (LDG / STG)."""
    parts = re.split(r"\n\s*Function : (\S+)\n", text)
    out = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        c = {"local_inst": 0, "local_bytes": 0, "global_inst": 0}
        for op, suffix in re.findall(SASS_MEMORY_OP, body):
            if op in ("LDG", "STG"):
                c["global_inst"] += 1
                continue
            c["local_inst"] += 1
            c["local_bytes"] += next((SASS_WIDTH[x] for x in suffix.split(".") if x in SASS_WIDTH), 4)
        out[name] = c
    return out


def resources(refresh: bool = False, root: str = REPO) -> dict:
    """Kernel resources for the current sources: the committed file when none of its kernels is stale
    (stale_kernels), else a fresh sm_90 compile (needs nvcc), else the committed file less its stale
    kernels. A materialised root (--calibrate): the file committed with its kernels."""
    if root != REPO:
        path = CALIBRATION_RESOURCES
        if not os.path.exists(path):
            path = os.path.join(root, os.path.relpath(RESOURCES, REPO))
        with open(path) as fh:
            return json.load(fh)["kernels"]
    now = kernel_hashes()
    saved, stale = None, set()
    if os.path.exists(RESOURCES):
        with open(RESOURCES) as fh:
            saved = json.load(fh)
        stale = set(stale_kernels(saved, now))
        if not refresh and not stale:
            return saved["kernels"]  # a reducer added since has no kernels here: "not measured"
    want = _hash(json.dumps(now, sort_keys=True))
    cached = os.path.join(cache_dir(), f"resources-{want}.json")
    if os.path.exists(cached) and not refresh:
        with open(cached) as fh:
            return json.load(fh)["kernels"]
    from tools.cuda_toolchain import find_nvcc
    nvcc = find_nvcc()
    if nvcc is None:
        if saved is None:
            raise RuntimeError("no nvcc and no saved kernel resources: cannot compute occupancy")
        print(f"warning: the code of {len(stale)} saved kernels changed and nvcc is absent: they are not measured",
              file=sys.stderr)
        return {k: r for k, r in saved["kernels"].items() if k not in stale}
    data = {**now, "arch": "sm_90", "kernels": compile_resources(nvcc)}
    for path in (cached, RESOURCES):  # the repository copy serves machines without nvcc
        with open(path, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
    return data["kernels"]


def resident_warps(regs: int, smem: int) -> int:
    """Resident warps per SM of a kernel of 256-thread blocks (registers, shared memory, block limits)."""
    warps_per_block = THREADS_PER_BLOCK // 32
    regs_alloc = max(1, math.ceil(regs / 8) * 8) * 32 * warps_per_block  # per block, 8-register granules
    blocks = min(MAX_BLOCKS_PER_SM, REGS_PER_SM // regs_alloc, MAX_WARPS_PER_SM // warps_per_block)
    if smem > 0:
        blocks = min(blocks, SMEM_PER_SM // (smem + 1024))
    return max(1, blocks) * warps_per_block


# ---- time -----------------------------------------------------------------------------------------------------

TERMS = ("dram", "lat", "lsu", "l2", "issue")


def whole_waves(threads: int, warps_sm: int) -> int:
    """Waves of resident blocks a launch takes: a partial last wave costs a whole one (its blocks run the same
    chain of rounds as a full wave's, with fewer of them in flight)."""
    blocks = max(1, math.ceil(threads / THREADS_PER_BLOCK))
    return max(1, math.ceil(blocks / (SMS * max(1, warps_sm // (THREADS_PER_BLOCK // 32)))))


def local_lines(l: dict, r: dict | None) -> float:
    """L1 lines of local memory (stack frame and spills) per sampled warp set, from the kernel's SASS: its local
    instructions per global one (static counts) times the warp's memory instructions (SIMT, traced); a local
    access of w bytes per lane is 32 w / 128 lines (local memory interleaves the lanes' words). Without SASS
    counts: 0."""
    if not r or not r.get("local_inst") or not r.get("global_inst"):
        return 0.0
    per_inst_lines = r["local_bytes"] / r["local_inst"] * 32 / 128
    return l["simt_inst"] * r["local_inst"] / r["global_inst"] * per_inst_lines


def launch_terms(l: dict, res: dict) -> dict:
    """The calibration-free quantities of one launch: seconds of each throughput term and the cycle counts the
    fitted constants scale (see launch_time)."""
    scale = l["warps"] / max(1, l["sampled"])
    r = res.get(_norm(l["kernel"]))
    regs, smem = (r["regs"], r["smem"]) if r else (64, 0)
    warps_sm = resident_warps(regs, smem)
    dram = (l["read_sectors"] + l["written_sectors"]) * 32 * scale
    # the warp's L1 share: the largest simulated capacity <= (L1 less shared memory and the resident threads'
    # local frames) / resident warps
    local_sm = (r.get("stack", 0) + r.get("spill_st", 0) if r else 0) * 32 * warps_sm
    share = max(1, L1_DATA_BYTES - smem * (L1_DATA_BYTES // SMEM_PER_SM) - local_sm) / warps_sm
    c = max([0] + [i for i, cap in enumerate(l["l1_caps"]) if cap <= share])
    rd, mx = l["rounds"][c], l["max_chain"][c]
    n_rd = max(1.0, sum(rd))
    sampled = max(1, l["sampled"])
    # a warp's rounds as the SIMT warp runs them (divergent lanes serialise), each costing the mean load
    # latency of the lock-step rounds' classes
    simt_rounds = l["simt_rounds"] / sampled
    mean_lat = (LAT_L1 * rd[0] + LAT_L2 * rd[1] + LAT_DRAM * rd[2]) / n_rd
    # whole waves of resident blocks one after the other (Little's law); a launch with fewer warps than fit on
    # the GPU takes at least one warp's chain
    waves = whole_waves(l["threads"], warps_sm)
    sh_wf, sh_ideal = l.get("shared_wavefronts", 0.0), l.get("shared_ideal", 0.0)
    # measured: the kernel has saved resources (without, 64 registers and no shared memory are assumed and the
    # case is reported "not measured")
    return dict(kernel=l["kernel"], measured=r is not None, regs=regs, warps_sm=warps_sm, dram=dram, waves=waves,
                stack=r.get("stack", 0) if r else 0, spill=(r.get("spill_st", 0) + r.get("spill_ld", 0)) if r else 0,
                t_dram=dram / COPY_BW,
                t_l2=(l["l1_miss"][c] + l["st_sector"] / 32) * 32 * scale / L2_BW,
                t_lsu=(l["ld_lines"] + l["st_lines"]) * scale / (SMS * LSU_LINES_PER_CLK * CLOCK),
                # local memory (stack, spills): L1 lines like the global ones
                t_local=local_lines(l, r) * scale / (SMS * LSU_LINES_PER_CLK * CLOCK),
                # shared memory: one wavefront per cycle per SM (32 banks x 4 B), through the same L1 data path
                t_smem=sh_wf * scale / (SMS * SMEM_WAVEFRONTS_PER_CLK * CLOCK),
                t_smem_ideal=sh_ideal * scale / (SMS * SMEM_WAVEFRONTS_PER_CLK * CLOCK),
                # cycles: waves x per-warp chain (load latency part, round part); the longest sampled warp
                lat_cyc=waves * simt_rounds * mean_lat, round_cnt=waves * simt_rounds,
                max_lat_cyc=LAT_L1 * mx[0] + LAT_L2 * mx[1] + LAT_DRAM * mx[2], max_round_cnt=sum(mx),
                # warp memory instructions (divergence-aware) per scheduler
                issue_cnt=l["simt_inst"] * scale / (SMS * SCHEDULERS_PER_SM),
                ld_eff=l["ld_useful"] / l["ld_sector"] if l["ld_sector"] else None,
                st_eff=l["st_useful"] / l["st_sector"] if l["st_sector"] else None,
                inflight_sm=warps_sm * (l["round_bytes"] / l["n_rounds"] if l["n_rounds"] else 0.0))


def term_times(lt: dict, cal: dict, smem: str = "t_smem") -> dict:
    """The five terms of one launch in seconds (cal's values may be numpy arrays: one column per calibration).
    Latency: each round of loads costs lat_scale x its load latency (latency under load) plus round_cycles (the
    instructions between two rounds), for the mean warp over the whole waves and for the longest sampled warp.
    L1 data path (LSU): lsu_cycles per 128-byte line of global and local memory a warp instruction touches, plus
    one cycle per shared-memory wavefront (`smem`: "t_smem_ideal" gives the time without bank conflicts).
    Issue: inst_cycles issue cycles per warp memory instruction (the arithmetic around it), 4 schedulers per SM."""
    import numpy as np
    t_lat = np.maximum(cal["lat_scale"] * lt["lat_cyc"] + cal["round_cycles"] * lt["round_cnt"],
                       cal["lat_scale"] * lt["max_lat_cyc"] + cal["round_cycles"] * lt["max_round_cnt"]) / CLOCK
    return dict(dram=lt["t_dram"], lat=t_lat, lsu=cal["lsu_cycles"] * (lt["t_lsu"] + lt["t_local"]) + lt[smem],
                l2=lt["t_l2"], issue=cal["inst_cycles"] * lt["issue_cnt"] / CLOCK)


def pnorm(terms: dict, p):
    return sum(v ** p for v in terms.values()) ** (1 / p)


def launch_time(lt: dict, cal: dict) -> dict:
    """Time of one launch on the GPU: p-norm of the five terms (term_times), without the launch costs (chain)."""
    terms = term_times(lt, cal)
    out = dict(lt)
    no_conflicts = term_times(lt, cal, "t_smem_ideal")
    out.update(t=float(pnorm(terms, cal["p"])), t_no_conflicts=float(pnorm(no_conflicts, cal["p"])),
               **{"t_" + k: float(v) for k, v in terms.items()})
    return out


def chain(times: list, cal: dict):
    """A call's time from its launches' GPU times, in order: host_s of host work, then the host submits a
    launch every SUBMIT_S; launch k starts when the GPU has finished launch k-1 plus launch_s and the host
    has submitted it (works on numpy columns too)."""
    import numpy as np
    gpu, host = 0.0, cal["host_s"]
    for t in times:
        host = host + SUBMIT_S
        gpu = np.maximum(gpu + cal["launch_s"], host) + t
    return gpu


def predict(launches: list[dict], res: dict, cal: dict) -> tuple[float, list[dict]]:
    """The call's time (the launch chain) and each launch's details."""
    parts = [launch_time(launch_terms(l, res), cal) for l in launches]
    return float(chain([p["t"] for p in parts], cal)), parts


def conflict_cost(parts: list[dict], cal: dict) -> float:
    """The call's predicted time over its time without shared-memory bank conflicts, less 1."""
    return chain([p["t"] for p in parts], cal) / chain([p["t_no_conflicts"] for p in parts], cal) - 1


def case_bytes(op: str, dtype: str, dist: str, feat: int, elems: int = ELEMS) -> int:
    """bench_cuda.py's byte count: src + out (+ indptr)."""
    import torch
    rows, indptr = case_indptr(dist, feat, elems)
    es = torch.tensor([], dtype=getattr(torch, dtype)).element_size()
    n_seg = indptr.numel() - 1
    ib = indptr.numel() * 8
    if op == "softmax":
        return 2 * rows * feat * es + ib
    if op == "gather":
        return (n_seg + rows) * feat * es + ib
    return (rows + n_seg) * feat * es + ib + (n_seg * feat * 8 if op == "max" else 0)


# ---- measured tables ----------------------------------------------------------------------------------------

def parse_time(s: str):
    s = s.strip()
    m = re.match(r"^([\d.]+) (ms|us|s)$", s)
    if not m:
        return None
    return float(m.group(1)) * {"ms": 1e-3, "us": 1e-6, "s": 1.0}[m.group(2)]


def measured_rows(path: str = MEASURED) -> list[dict]:
    """The full-size rows of a bench_cuda.py markdown result (the first table with torch_segops times)."""
    rows, header = [], None
    with open(path) as fh:
        for line in fh:
            if not line.startswith("|"):
                if header and rows:
                    break
                header = None if not line.strip() else header
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] == "dist":
                header = cells
                continue
            if header is None or set(cells[0]) <= {"-"}:
                continue
            r = dict(zip(header, cells))
            rows.append(dict(dist=r["dist"], feat=int(r["F"]), dtype=r["dtype"], op=r["op"],
                             t=parse_time(r["torch_segops"]), copy=float(r["copy GB/s"]) * 1e9,
                             pct=float(r["% of copy"].rstrip("%")),
                             segment_reduce=parse_time(r.get("torch.segment_reduce", "-"))))
    return rows


# ---- calibration --------------------------------------------------------------------------------------------

def spearman(a: list[float], b: list[float]) -> float:
    def ranks(x):
        order = sorted(range(len(x)), key=lambda i: x[i])
        r = [0.0] * len(x)
        for k, i in enumerate(order):
            r[i] = k
        return r
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = math.sqrt(sum((x - ma) ** 2 for x in ra))
    vb = math.sqrt(sum((y - mb) ** 2 for y in rb))
    return cov / (va * vb) if va * vb > 0 else float("nan")


def discordant_pairs(pred: list[float], meas: list[float], tol: float = 0.0) -> tuple[int, int]:
    """Pairs ordered differently by the model and the measurement (pairs closer than tol in measurement:
    skipped), and the pairs compared."""
    bad = total = 0
    for i in range(len(pred)):
        for j in range(i + 1, len(pred)):
            if abs(math.log(meas[i] / meas[j])) <= tol:
                continue
            total += 1
            if (pred[i] - pred[j]) * (meas[i] - meas[j]) < 0:
                bad += 1
    return bad, total


FIT_GRID = {"lat_scale": [1.0, 1.5, 2.0, 2.5, 3.0, 4.0], "round_cycles": [0, 100, 200, 400, 600, 800],
            "inst_cycles": [0, 16, 32, 64, 128], "lsu_cycles": [1, 2, 4, 8], "p": [1.5, 2.0, 3.0, 4.0, 8.0],
            "launch_s": [0.0, 1e-6, 2e-6, 4e-6], "host_s": [0.0, 5e-6, 10e-6, 20e-6]}


def grid_predictions(traces: list[list[dict]], res: dict, grid: dict = FIT_GRID):
    """(calibrations, times[row, calibration]) over the whole grid (numpy)."""
    import itertools
    import numpy as np
    cals = [dict(zip(grid, v)) for v in itertools.product(*grid.values())]
    col = {k: np.array([c[k] for c in cals], dtype=float) for k in grid}
    times = np.zeros((len(traces), len(cals)))
    for i, tr in enumerate(traces):
        launch_cols = [pnorm(term_times(launch_terms(l, res), col), col["p"]) for l in tr]
        times[i] = chain(launch_cols, col)
    return cals, times


def fit_index(times, meas: list[float], rows=None) -> int:
    """The grid calibration minimising the squared log error over `rows` (default: all)."""
    import numpy as np
    rows = list(range(len(meas))) if rows is None else rows
    err = (np.log(times[rows]) - np.log(np.array(meas)[rows])[:, None]) ** 2
    return int(err.sum(axis=0).argmin())


def leave_one_out(times, meas: list[float]) -> list[float]:
    """Each row predicted by the calibration fitted on the other rows."""
    return [float(times[i, fit_index(times, meas, [j for j in range(len(meas)) if j != i])])
            for i in range(len(meas))]


def error_summary(preds: list[float], meas: list[float], tol: float) -> str:
    errs = [abs(p / m - 1) for p, m in zip(preds, meas)]
    bad, tot = discordant_pairs(preds, meas)
    bad10, tot10 = discordant_pairs(preds, meas, math.log(1.10))
    badt, tott = discordant_pairs(preds, meas, math.log(1 + tol))
    # the widest measured gap between two rows the model orders the other way
    gap = max([abs(math.log(meas[i] / meas[j])) for i in range(len(meas)) for j in range(i + 1, len(meas))
               if (preds[i] - preds[j]) * (meas[i] - meas[j]) < 0] + [0.0])
    errs_sorted = sorted(errs)
    p90 = errs_sorted[min(len(errs) - 1, int(math.ceil(0.9 * len(errs))) - 1)]
    return (f"mean |error| {100 * sum(errs) / len(errs):.0f}%, max {100 * max(errs):.0f}%, rows within 25%: "
            f"{sum(e <= 0.25 for e in errs)}/{len(errs)}; Spearman {spearman(preds, meas):.3f}; pairs ordered "
            f"differently {bad}/{tot} (of pairs > 10% apart when measured: {bad10}/{tot10}; > {100 * tol:.0f}% "
            f"apart: {badt}/{tott}); every pair more than {100 * (math.exp(gap) - 1):.0f}% apart ordered right; "
            f"90th percentile of |error| {100 * p90:.0f}%")


# ---- main -----------------------------------------------------------------------------------------------------

def fmt_t(t: float) -> str:
    return f"{t * 1e3:.3f} ms" if t >= 1e-3 else f"{t * 1e6:.1f} us"


def short_kernel(name: str) -> str:
    name = name.replace("torch_segops::cuda::", "").replace("torch_segops::", "").replace("c10::", "")
    return name if len(name) < 70 else name[:67] + "..."


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", nargs="+", default=None, help="sum mean max logsumexp softmax gather")
    ap.add_argument("--dists", nargs="+", default=["uniform", "power-law", "few-huge"])
    ap.add_argument("--features", nargs="+", type=int, default=[1, 16, 64, 256])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--against", default=MEASURED, help="measured bench_cuda.py markdown to compare with")
    ap.add_argument("--fit", action="store_true", help="refit the calibration constants on the measured rows")
    ap.add_argument("--calibrate", action="store_true",
                    help=f"trace the kernels of commit {CALIBRATION_COMMIT} (the ones measured) with this tree's "
                         "tracer, fit on the measured rows, print the fit and its leave-one-out errors")
    ap.add_argument("--kernels", action="store_true", help="per-launch details")
    ap.add_argument("--refresh-resources", action="store_true", help="recompile for ptxas -v even if cached")
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--elems", type=int, default=ELEMS, help="elements per input (bench_cuda.py: 2^26, --quick 2^22)")
    a = ap.parse_args(argv)

    root = REPO
    if a.calibrate:
        root = materialise()
        a.fit = True
        print(f"calibration: kernels of {CALIBRATION_COMMIT} in {root}")
    meas = {(r["dist"], r["feat"], r["dtype"], r["op"]): r for r in measured_rows(a.against)} if a.against else {}
    ops = a.ops or (sorted({k[3] for k in meas}) if meas else ["sum", "softmax"])
    cases = [(op, dt, d, f) for d in a.dists for f in a.features for dt in a.dtypes for op in ops]
    if a.calibrate:
        cases = [c for c in cases if (c[2], c[3], c[1], c[0]) in meas]
    res = resources(a.refresh_resources, root)
    build_tracer(root)
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        traces = list(pool.map(lambda c: trace(*c, elems=a.elems, root=root), cases))

    cal = dict(CALIBRATION)
    with_meas = [i for i, c in enumerate(cases) if (c[2], c[3], c[1], c[0]) in meas]
    mt = [meas[(cases[i][2], cases[i][3], cases[i][1], cases[i][0])]["t"] for i in with_meas]
    loo = None
    if a.fit and with_meas:
        cals, times = grid_predictions([traces[i] for i in with_meas], res)
        cal = cals[fit_index(times, mt)]
        loo = leave_one_out(times, mt)
        print(f"fitted calibration: {cal}")

    head = ["dist", "F", "dtype", "op", "predicted", "% of copy (pred.)", "measured", "% of copy (meas.)", "error",
            "vs torch.segment_reduce (pred.)", "ld sector eff.", "bytes in flight / SM", "bound by",
            "launches", "bank conflicts (pred. cost)"]
    if loo:
        head.insert(9, "error (leave-one-out)")
    lines = []
    preds, ms = [], []
    for c, tr in zip(cases, traces):
        op, dt, d, f = c
        t, parts = predict(tr, res, cal)
        nb = case_bytes(op, dt, d, f, a.elems)
        m = meas.get((d, f, dt, op))
        main_k = max(parts, key=lambda p: p["t"])
        bound = max(TERMS, key=lambda k: main_k["t_" + k])
        srt = m["segment_reduce"] if m else None
        eff = sum(p["ld_eff"] * p["dram"] for p in parts if p["ld_eff"]) / max(1, sum(p["dram"] for p in parts if p["ld_eff"]))
        unmeasured = sorted({short_kernel(p["kernel"]) for p in parts if not p["measured"]})
        if unmeasured:
            print(f"{op} {dt} {d} F={f}: not measured (no saved resources for {', '.join(unmeasured)})")
            continue
        row = [d, str(f), dt, op, fmt_t(t), f"{100 * nb / t / COPY_BW:.0f}%",
               fmt_t(m["t"]) if m else "-", f"{m['pct']:.0f}%" if m else "-",
               f"{100 * (t / m['t'] - 1):+.0f}%" if m else "-",
               f"{srt / t:.2f}x" if srt else "-", f"{100 * eff:.0f}%",
               f"{main_k['inflight_sm'] / 1024:.1f} KiB", {"lat": "latency", "lsu": "L1 wavefronts"}.get(bound, bound),
               str(len(parts)), f"{100 * conflict_cost(parts, cal):.1f}%"]
        if loo:
            row.insert(9, f"{100 * (loo[len(preds)] / m['t'] - 1):+.0f}%" if m else "-")
        lines.append(row)
        if m:
            preds.append(t)
            ms.append(m["t"])
        if a.kernels:
            for p in parts:
                print(f"    {short_kernel(p['kernel'])}: {fmt_t(p['t'])} (" +
                      ", ".join(f"{k} {fmt_t(p['t_' + k])}" for k in TERMS) +
                      f"; shared {fmt_t(p['t_smem'])}, without bank conflicts {fmt_t(p['t_smem_ideal'])}, "
                      f"local {fmt_t(p['t_local'])}), regs {p['regs']}, stack {p['stack']} B, spills {p['spill']} B, "
                      f"{p['warps_sm']} warps/SM, {p['waves']} waves, "
                      f"ld eff {100 * (p['ld_eff'] or 0):.0f}%, st eff {100 * (p['st_eff'] or 0):.0f}%, "
                      f"in flight {p['inflight_sm'] / 1024:.1f} KiB/SM")
    widths = [max(len(h), *(len(r[i]) for r in lines)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for r in lines:
        print("  ".join(x.ljust(w) for x, w in zip(r, widths)))
    summary = ""
    if preds:
        summary = f"calibration {cal}; {len(preds)} measured rows: {error_summary(preds, ms, STATED_ERROR)}"
        if loo:
            summary += f"\nleave-one-out (each row predicted by the fit on the other rows): {error_summary(loo, ms, STATED_ERROR)}"
        print(summary)
    if a.markdown:
        with open(a.markdown, "w") as fh:
            fh.write("| " + " | ".join(head) + " |\n|" + "|".join("---" for _ in head) + "|\n")
            for r in lines:
                fh.write("| " + " | ".join(r) + " |\n")
            if summary:
                fh.write("\n" + summary.replace("\n", "\n\n") + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, REPO)  # run as a script: the repository's benchmarks and tools packages
    sys.exit(main())
