"""CUDA variant checks that need no GPU: nvcc compiles and links it, the library holds what was configured.

- builds torch_segops with TORCH_SEGOPS_WITH_CUDA=ON against the installed (CPU) torch's headers for
  CUDA architectures 75-real;90-real (one build per session, a few minutes on 2 cores) and checks the
  fatbin (every configured SASS/PTX present, compressed), the undefined symbols (torch stable C shim,
  CUDA runtime, C/C++ runtime only), the shared cudart dependency and the build-info strings;
- checks the CMake architecture selection (defaults from cmake/cuda_architectures.txt, CUDAARCHS,
  unsupported architectures) by configuring only;
- compiles the opt-in scatter kernels (scatter_cuda.cu, off in that build) for sm_90 with the build's flags: no
  warning, PTX under its limit, no kernel with a stack frame that is not a spill;
The kernels' host emulation under AddressSanitizer/UBSan is tests/kernels/test_cuda_emulation.py.

Skipped, with the reason shown by `pytest -ra`, when nvcc is absent.
tools/check_cuda_build.py does the same build from the command line and also reports sizes and times.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib

import pytest

import cpp_checks
from tools import check_cuda_build, cuda_build, cuda_fatbin, cuda_linkage, cuda_old_archs, cuda_sizes, ptxas_resources
from tools import cuda_toolchain as toolchain

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

NVCC = toolchain.find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (no CUDA toolkit; set CUDACXX or CUDA_HOME): "
                                                     "CUDA compile checks skipped")
TORCH_DIR = cpp_checks.TORCH_DIR


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc not found")
    work = tmp_path_factory.mktemp("cuda-build")
    # the CPU kernels as the baseline object alone: the other objects are the pip build's and the packages' (docs/ci.md)
    return cuda_build.build(str(work / "build"), toolchain.CI_ARCHS, NVCC, keep_dir=str(work / "nvcc-keep"),
                            extra=["-DTORCH_SEGOPS_CPU_ISAS=baseline"])


def assert_no_nvcc_warning(log: str) -> None:
    assert not re.search(r"warning #?\d*-?D?:|\bwarning\b.*:", log, re.I), \
        [line for line in log.splitlines() if "warning" in line.lower()][:10]


# ---- the built library --------------------------------------------------------------------------------

@needs_nvcc
def test_fatbin_holds_every_configured_arch(built):
    entries = cuda_fatbin.read_fatbin(built.library)
    have = {(e.kind, e.arch) for e in entries}
    assert have == cuda_fatbin.expected_entries(toolchain.CI_ARCHS) == {("elf", 75), ("elf", 90)}, have
    assert not cuda_fatbin.check_fatbin(built.library, toolchain.CI_ARCHS)


@needs_nvcc
def test_missing_arch_is_reported(built):
    problems = cuda_fatbin.check_fatbin(built.library, toolchain.CI_ARCHS + ";120-real;120-virtual")
    assert any("SASS sm_120" in p for p in problems) and any("PTX compute_120" in p for p in problems), problems


@needs_nvcc
def test_fatbin_is_compressed(built):
    entries = cuda_fatbin.read_fatbin(built.library)
    assert entries and all(e.compressed for e in entries), [e.__dict__ for e in entries]
    # the .nv_fatbin section (the entries as stored) is much smaller than the SASS it holds
    assert 0 < cuda_fatbin.fatbin_bytes(built.library) * 3 < sum(e.uncompressed for e in entries)


@needs_nvcc
def test_cuobjdump_lists_every_configured_arch(built):
    """cuobjdump (tools/bootstrap.sh installs the nvidia-cuda-cuobjdump wheel) reads the fatbin: its listing
    (--list-elf, --list-ptx) holds exactly the configured SASS/PTX, as read_fatbin's entries (its resource dump
    and extraction) do. A missing cuobjdump is a setup error here, not a skip."""
    cuobjdump = toolchain.find_cuobjdump(NVCC)
    assert cuobjdump is not None, ("cuobjdump not found on PATH, next to nvcc, in $CUDA_HOME/bin or in the "
                                   "nvidia-cuda-cuobjdump pip wheel: run tools/bootstrap.sh")
    text = "".join(cuda_fatbin.run_cuobjdump(cuobjdump, flag, built.library) for flag in ("--list-elf", "--list-ptx"))
    listed = cuda_fatbin.parse_cuobjdump_listing(text)
    assert listed == {("elf", 75), ("elf", 90)}, listed
    assert not cuda_fatbin.compare_entries(listed, toolchain.CI_ARCHS, "cuobjdump")
    assert listed == {(e.kind, e.arch) for e in cuda_fatbin.read_fatbin(built.library, cuobjdump)}


@needs_nvcc
def test_check_command_fails_when_a_requested_arch_is_missing(built, capsys):
    """The command-line check exits 1 naming the missing arch, 0 otherwise; without cuobjdump it cannot read
    the fatbin and fails saying so."""
    assert check_cuda_build.main(["--inspect", built.library, "--archs", toolchain.CI_ARCHS]) == 0, capsys.readouterr().out
    capsys.readouterr()
    assert check_cuda_build.main(["--inspect", built.library, "--archs", toolchain.CI_ARCHS + ";86-real"]) == 1
    out = capsys.readouterr().out
    assert "PROBLEM: fatbin: missing SASS sm_86" in out, out
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cuda_fatbin, "find_cuobjdump", lambda nvcc: None)
        assert check_cuda_build.main(["--inspect", built.library, "--archs", toolchain.CI_ARCHS]) == 1
    assert "PROBLEM: fatbin not read: cuobjdump not found" in capsys.readouterr().out


# ---- nvcc's word on the device code ----------------------------------------------------------------------

@needs_nvcc
def test_nvcc_prints_no_warning(built):
    """Every nvcc warning is an error in the build (cmake/cuda.cmake); the log holds none that slipped through."""
    assert_no_nvcc_warning(built.log)


@needs_nvcc
def test_a_planted_host_only_call_fails_the_build(built, tmp_path):
    """The control: a __host__ helper called from __host__ __device__ code, as ceil_div once was in
    Partition::search (nvcc warned, then dropped the search loop from the device code). With the build's own
    flags it is an error; without the --Werror flag the same file compiles, with only the warning."""
    planted = tmp_path / "planted.cu"
    planted.write_text(cuda_build.PLANTED_HOST_CALL)
    bdir = os.path.dirname(built.library)
    cp = cuda_build.compile_like_the_build(bdir, str(planted))
    assert cp.returncode != 0, cp.stdout + cp.stderr
    assert "calling a __host__ function from a __host__ __device__ function is not allowed" in cp.stderr, cp.stderr
    flags = [a for a in cuda_build.cuda_compile_command(bdir) if a.startswith("--Werror")]
    assert flags == ["--Werror=all-warnings,cross-execution-space-call"], flags
    lax = cuda_build.compile_like_the_build(bdir, str(planted), drop=tuple(flags))
    assert lax.returncode == 0 and re.search(r"warning #2001[14]-D: calling a __host__ function", lax.stderr), \
        lax.stderr[-3000:]


PLANTED_SM70_ONLY = """
__global__ void planted_nap(unsigned ns) { __nanosleep(ns); }  // nanosleep: sm_70 and newer
"""


def _ptxas12():
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        pytest.skip("the ptxas 12.9 of PyPI's nvidia-cuda-nvcc-cu12 wheel is a linux-x86_64 binary")
    try:
        return os.path.join(cuda_old_archs.nvcc12_wheel_dir(), "nvidia/cuda_nvcc/bin/ptxas")
    except RuntimeError as e:
        pytest.skip(f"no ptxas 12.9 for the pre-Turing check: {e}")


@needs_nvcc
@pytest.mark.parametrize("source", ["segment_cuda.cu", "coo_cuda.cu"])
def test_kernels_assemble_for_the_oldest_nvcc12_arch(built, tmp_path, source):
    """The nvcc 12 rows ship SASS down to sm_50, which nvcc 13 cannot build and no nvcc 12 here can
    (data/compat.yaml): the PTX of each CUDA source (nvcc 13, compute_75, the build's flags: the very PTX the
    build assembled into its sm_75 SASS, kept by nvcc --keep; test_nvcc_prints_no_warning reads that compile's
    log) must assemble for the oldest of those archs with ptxas 12.9, warnings as errors."""
    oldest = cuda_old_archs.oldest_nvcc12_arch()
    assert oldest is not None and oldest < 75, oldest
    ptxas = _ptxas12()
    ptx, cubin = cuda_build.kept_ptx(built.keep_dir, source, 75), tmp_path / f"{source}.sm_{oldest}.cubin"
    with open(ptx) as fh:
        assert re.search(r"^\.target sm_75$", fh.read(), re.M), ptx
    res = cuda_old_archs.assemble_old_arch(ptxas, ptx, oldest, str(cubin))
    assert res.returncode == 0, res.stderr[-3000:]
    assert cubin.read_bytes()[:4] == b"\x7fELF"


@needs_nvcc
def test_an_sm70_instruction_fails_the_old_arch_check(built, tmp_path):
    """The control: __nanosleep (sm_70+) assembles for sm_70 and is refused for sm_60."""
    ptxas = _ptxas12()
    planted = tmp_path / "planted_nap.cu"
    planted.write_text(PLANTED_SM70_ONLY)
    cp = cuda_old_archs.ptx_like_the_build(os.path.dirname(built.library), str(planted), str(tmp_path / "nap.ptx"))
    assert cp.returncode == 0, cp.stderr[-3000:]
    assert cuda_old_archs.assemble_old_arch(ptxas, str(tmp_path / "nap.ptx"), 70, str(tmp_path / "nap70")).returncode == 0
    bad = cuda_old_archs.assemble_old_arch(ptxas, str(tmp_path / "nap.ptx"), 60, str(tmp_path / "nap60"))
    assert bad.returncode != 0 and "nanosleep" in bad.stderr, bad.stderr


def test_sources_do_not_branch_on_the_arch_number():
    """The old-arch check above sees the code that __CUDA_ARCH__ == 750 compiles; a branch on the arch
    number would hide from it what sm_50/60/70 compile."""
    found = []
    for root, _, files in os.walk(os.path.join(REPO, "src", "csrc")):
        for f in files:
            with open(os.path.join(root, f), errors="replace") as fh:
                for n, line in enumerate(fh, 1):
                    if re.search(r"__CUDA_ARCH__\s*[<>=!]|__CUDA_ARCH_LIST__|__CUDA_ARCH_(SPECIFIC|FAMILY_SPECIFIC)__", line):
                        found.append(f"{f}:{n}: {line.strip()}")
    assert not found, found


# ptxas -v of two architectures: each entry's "Function properties" line, then its registers; a non-inlined
# device function's properties come after the entry's and are not the entry's
_PTXAS_LOG = """ptxas info    : Compiling entry function '_Z1kv' for 'sm_75'
ptxas info    : Function properties for _Z1kv
    72 bytes stack frame, 8 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 92 registers, used 1 barriers, 33796 bytes smem, 356 bytes cmem[0]
ptxas info    : Function properties for _Z6helperv
    24 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z1kv' for 'sm_90'
ptxas info    : Function properties for _Z1kv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 33796 bytes smem, 540 bytes cmem[0]
"""


def test_ptxas_parser_per_arch():
    rows = ptxas_resources.parse_ptxas(_PTXAS_LOG)
    K = ptxas_resources.KernelResources
    assert rows == [K(75, "_Z1kv", 92, 72, 8, 16, 33796), K(90, "_Z1kv", 40, 0, 0, 0, 33796)], rows


def test_retarget_ptx():
    text = "//\n.version 9.0\n.target sm_75\n.address_size 64\n"
    assert cuda_old_archs.retarget_ptx(text, 50, "8.8") == "//\n.version 8.8\n.target sm_50\n.address_size 64\n"
    with pytest.raises(ValueError, match="not a PTX module"):
        cuda_old_archs.retarget_ptx("int main() {}\n", 50, "8.8")


@needs_nvcc
def test_ptxas_resources_per_kernel(built):
    """ptxas's numbers for every kernel and architecture (registers, stack frame, spills, shared memory) are
    read from the build; the F = 1 block kernel's shared memory and the short-segment kernel are among them."""
    rows = ptxas_resources.resource_usage(built.log)
    assert {r.arch for r in rows} == {75, 90}, {r.arch for r in rows}
    kernels = {r.kernel for r in rows}
    for name in ("Partition", "ReduceShort<", "ReduceMain<", "Fixup<", "LevelCarry<", "FinishLongSegments<",
                 "ReduceFlatBlock<", "Expand<", "ValidateKernel"):
        assert any(k.startswith(name) for k in kernels), (name, sorted(kernels)[:20])
    assert all(0 < r.registers <= 255 for r in rows)
    assert any(r.smem > 0 for r in rows if r.kernel.startswith("ReduceFlatBlock<"))
    table = ptxas_resources.resources_markdown(rows)
    assert table.count("\n") == len(rows) + 2


@needs_nvcc
def test_local_memory_that_issue_37_removed_stays_out(built):
    """ptxas: ReduceShort keeps its segment ends in registers (indexed by constants only; `e[nseg]` gave all 80
    instances a 72-104 byte stack frame, with no spill), and ReduceMain's 16-bit logsumexp at V = 8 holds its
    rows in flight packed (it spilled 32 / 64 bytes with a 40-byte frame)."""
    rows = ptxas_resources.resource_usage(built.log)
    short = [r for r in rows if r.kernel.startswith("ReduceShort<")]
    assert len(short) == 160, len(short)
    framed = [(r.arch, r.kernel, r.stack) for r in short if r.stack and not (r.spill_stores or r.spill_loads)]
    assert not framed, framed
    lse16 = [r for r in rows if r.kernel.startswith("ReduceMain<") and "LogSumExpOp<float>" in r.kernel
             and ("Half" in r.kernel or "BFloat16" in r.kernel) and r.kernel.endswith(", 8>")]
    assert len(lse16) == 8, [r.kernel for r in lse16]
    assert all(r.stack == 0 and r.spill_stores == 0 and r.spill_loads == 0 for r in lse16), \
        [(r.arch, r.kernel, r.stack, r.spill_stores) for r in lse16]


SCATTER_KERNELS = ("ReduceShort<", "ReduceMain<", "ReduceFlatBlock<")  # the kernels that load src through PermLoad
SCATTER_PTX_LIMIT = 64 << 20  # bytes of sm_90 PTX (30 MB on 2026-11-28; 100 MB when ptxas ran past 30 minutes)


@pytest.fixture(scope="module")
def scatter_sm90(tmp_path_factory):
    """scatter_cuda.cu, the opt-in scatter kernels (TORCH_SEGOPS_CUDA_SCATTER, off in `built`), compiled with the
    build's own flags (a configure of its own: no wait for `built`) for sm_90 alone, in two steps so that a PTX
    blown up again fails before ptxas takes half an hour: (front end's log, PTX bytes, ptxas's log, resources)."""
    if NVCC is None:
        pytest.skip("nvcc not found")
    bdir = str(tmp_path_factory.mktemp("scatter-sm90"))
    cp = cuda_build.configure(bdir, NVCC, "90-real", ["-DTORCH_SEGOPS_CPU_ISAS=baseline"])
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    source, ptx = os.path.join(REPO, "src", "csrc", "cuda", "scatter_cuda.cu"), os.path.join(bdir, "scatter.ptx")
    front = cuda_old_archs.ptx_like_the_build(bdir, source, ptx, arch=90)
    assert front.returncode == 0, (front.stdout + front.stderr)[-5000:]
    size = os.path.getsize(ptx)
    assert size < SCATTER_PTX_LIMIT, f"scatter_cuda.cu's sm_90 PTX is {size >> 20} MiB (docs/cuda.md, 'Scatter')"
    back = subprocess.run([NVCC, "-cubin", "-arch=sm_90", "--resource-usage", "--Werror=all-warnings", ptx, "-o",
                           os.path.join(bdir, "scatter.cubin")], capture_output=True, text=True, cwd=bdir)
    log = back.stdout + back.stderr
    assert back.returncode == 0, log[-5000:]
    return front.stdout + front.stderr, size, log, ptxas_resources.resource_usage(log)


@needs_nvcc
@pytest.mark.xdist_group("cuda-scatter-sm90")
def test_scatter_kernels_compile_without_a_warning(scatter_sm90):
    """The scatter kernels are built by the recipes only on request, so CI compiles them here: nvcc prints no
    warning (each is an error: it would have stopped the compile), the PTX stays under its limit (the fixture), and
    every reduction kernel that reads src through the order is there, for each reducer and dtype."""
    front, _, back, rows = scatter_sm90
    for log in (front, back):
        assert_no_nvcc_warning(log)
    for name in SCATTER_KERNELS:
        kernels = {r.kernel for r in rows if r.kernel.startswith(name) and "PermLoad" in r.kernel}
        assert len(kernels) >= 32, (name, sorted(kernels)[:5])


@needs_nvcc
@pytest.mark.xdist_group("cuda-scatter-sm90")
def test_scatter_loads_keep_no_object_in_local_memory(scatter_sm90):
    """PermLoad reads a batch's row of the order from a table (BatchRows), not through BatchMap::offset: inlined,
    its 64-bit divisions took ptxas past 30 minutes an architecture; out of line, the call put the load object on
    the stack of every kernel (a 248-808 byte frame without a spill). A frame without spills is such an object
    (the rule issue 37 set for ReduceShort); frames with spills are register pressure, reported by
    tools/check_cuda_build.py --resources."""
    rows = scatter_sm90[3]
    scatter = [r for r in rows if "PermLoad" in r.kernel]
    assert scatter, "no PermLoad kernel in ptxas's output"
    framed = [(r.kernel[:90], r.stack) for r in scatter if r.stack and not (r.spill_stores or r.spill_loads)]
    assert not framed, framed


@needs_nvcc
def test_partition_search_is_in_the_device_code(built):
    """The regression test of the dropped search: Partition's SASS (sm_90) holds the 8-ary search's loads (7
    probes a round plus indptr[0] and indptr[S]), not the 2 loads the kernel had when nvcc dropped the loop."""
    cuobjdump = toolchain.find_cuobjdump(NVCC)
    assert cuobjdump is not None, "cuobjdump not found: run tools/bootstrap.sh"
    funcs = cuda_fatbin.cuobjdump_sass(cuobjdump, built.library, 90)
    part = [sass for name, sass in funcs.items() if "9Partition" in name]
    assert len(part) == 1, sorted(funcs)[:40]
    loads = len(re.findall(r"\bLDG\.", part[0]))
    assert loads >= 9, f"run_kernel<Partition> has {loads} global loads"
    # and the search's 7 probes issue together: no branch between the loads of one round (a branch per probe
    # once let nvcc put a probe's load behind the previous probe's test)
    body = part[0].split("\n")
    ldg = [i for i, line in enumerate(body) if "LDG." in line]
    loop = ldg[-7:]
    assert not any("BRA" in body[i] for i in range(loop[0], loop[-1])), "a branch between the search's probes"


def _load_runs(sass: str) -> list[int]:
    """Lengths of the runs of global loads (LDG) with no branch between them, longest first."""
    body = [line for line in sass.split("\n") if re.search(r"/\*[0-9a-f]{4}\*/", line)]
    runs, cur = [], 0
    for line in body:
        if re.search(r"\bBRA\b", line):
            runs.append(cur)
            cur = 0
        elif "LDG." in line:
            cur += 1
    return sorted(runs + [cur], reverse=True)


@needs_nvcc
def test_expand_searches_issue_their_probes_together(built):
    """Issue #37 item 5: Expand finds its chunk's two merge-path coordinates with 8-ary searches, 7 probes of
    indptr a round with no branch between them (sm_90 SASS: two runs of 7 loads), where two binary searches took
    one dependent load per round (at most 2 loads between branches). This does not show that the 7 loads
    overlap: on sm_90 nvcc 13.0 uses a probe's value before it issues the third load (review, 2026-11-27)."""
    cuobjdump = toolchain.find_cuobjdump(NVCC)
    assert cuobjdump is not None, "cuobjdump not found: run tools/bootstrap.sh"
    funcs = cuda_fatbin.cuobjdump_sass(cuobjdump, built.library, 90)
    expand = [sass for name, sass in funcs.items() if "6ExpandINS0_8GatherFnIfEELi4E" in name]
    assert len(expand) == 1, sorted(funcs)[:40]
    assert _load_runs(expand[0])[:2] == [7, 7], _load_runs(expand[0])[:6]


# cuobjdump 13.x output for a library built for 75-real;90a-real;120-virtual (format of the real tool)
_LIST_ELF = "ELF file    1: _C.1.sm_75.cubin\nELF file    2: _C.2.sm_90a.cubin\n"
_LIST_PTX = "PTX file    1: _C.1.sm_120.ptx\n"


def test_cuobjdump_listing_parser():
    assert cuda_fatbin.parse_cuobjdump_listing(_LIST_ELF + _LIST_PTX) == {("elf", 75), ("elf", 90), ("ptx", 120)}
    # older toolkits name PTX compute_NN; cuobjdump's "no PTX" note lists nothing
    assert cuda_fatbin.parse_cuobjdump_listing("PTX file    3: x.3.compute_86.ptx\n") == {("ptx", 86)}
    assert cuda_fatbin.parse_cuobjdump_listing(
        "cuobjdump info    : No PTX file found to extract from '_C.so'.  You may try with -all option.") == set()


# cuobjdump 13.2 --dump-resource-usage and --extract-elf all --extract-ptx all of a library built for
# 75-real;90 with --compress-mode=size, its PTX left uncompressed (format of the real tool)
def _dump_header(kind: str, arch: str, compressed: bool) -> str:
    return (f"\nFatbin {kind} code:\n================\narch = {arch}\ncode version = [1,8]\nhost = linux\n"
            "compile_size = 64bit\n" + ("compressed\n" if compressed else ""))


_RES_USAGE = (_dump_header("elf", "sm_75", True) + "\nResource usage:\n Common:\n  GLOBAL:0\n Function _Z1kPfi:\n"
              "  REG:8 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:364 TEXTURE:0 SURFACE:0 SAMPLER:0\n"
              + _dump_header("elf", "sm_90a", True) + "\nResource usage:\n Function compressed:\n"
              "  REG:8 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:540 TEXTURE:0 SURFACE:0 SAMPLER:0\n"
              + _dump_header("ptx", "sm_90", False) + "ptxasOptions = \n")
_EXTRACTED = """Extracting ELF file    1: libk.1.sm_75.cubin
Extracting ELF file    2: libk.2.sm_90a.cubin
Extracting PTX file and ptxas options    1: libk.1.sm_90.ptx -arch=sm_90 
"""


def test_cuobjdump_dump_and_extraction_parsers():
    assert cuda_fatbin.parse_dump_headers(_RES_USAGE) == [("elf", 75, True), ("elf", 90, True), ("ptx", 90, False)]
    assert cuda_fatbin.listed_files(_EXTRACTED) == [("elf", 75, "libk.1.sm_75.cubin"), ("elf", 90, "libk.2.sm_90a.cubin"),
                                                    ("ptx", 90, "libk.1.sm_90.ptx")]
    assert cuda_fatbin.parse_cuobjdump_listing(_EXTRACTED) == {("elf", 75), ("elf", 90), ("ptx", 90)}


def test_listing_without_a_requested_arch_fails():
    listed = cuda_fatbin.parse_cuobjdump_listing(_LIST_ELF + _LIST_PTX)
    assert cuda_fatbin.compare_entries(listed, "75-real;90a-real;120-virtual", "cuobjdump") == []
    # sm_90 SASS and compute_120 PTX requested, the listing lacks both
    no_90 = cuda_fatbin.parse_cuobjdump_listing("ELF file    1: _C.1.sm_75.cubin\n")
    assert cuda_fatbin.compare_entries(no_90, "75-real;90-real;120-virtual", "cuobjdump") == [
        "cuobjdump: missing SASS sm_90 (configured: 75-real;90-real;120-virtual)",
        "cuobjdump: missing PTX compute_120 (configured: 75-real;90-real;120-virtual)",
    ]
    # "90" (no suffix) asks for both SASS and PTX: SASS alone is not enough; an extra arch is reported too
    assert cuda_fatbin.compare_entries({("elf", 90), ("elf", 80)}, "90", "x") == [
        "x: missing PTX compute_90 (configured: 90)", "x: unexpected SASS sm_80 (configured: 90)"]


@needs_nvcc
def test_only_expected_undefined_symbols(built):
    assert not cuda_linkage.check_symbols(built.library)
    syms = dict(cuda_linkage.undefined_symbols(built.library))
    assert "aoti_torch_get_current_cuda_stream" in syms  # the stream comes from the CUDA shim
    assert any(v.startswith("libcudart.so") for v in syms.values())


@needs_nvcc
@pytest.mark.skipif(TORCH_DIR is None, reason="torch not installed")
def test_shim_symbols_outside_libtorch_cpu_are_the_cuda_ones(built):
    """Every torch shim symbol we use is exported by libtorch_cpu, except the CUDA stream getter, which
    libtorch_cuda exports (the real library when the build torch has it; against a CPU torch, as here, a stub
    of the same soname, so that _C.so still lists libtorch_cuda.so as NEEDED)."""
    lib_cpu = os.path.join(TORCH_DIR, "lib", "libtorch_cpu.so")
    out = subprocess.run(["nm", "-D", "--defined-only", lib_cpu], capture_output=True, text=True, check=True).stdout
    defined = {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}
    shim = {s for s, v in cuda_linkage.undefined_symbols(built.library) if not v and re.match(r"^(aoti_torch_|torch_)", s)}
    assert shim - defined == {"aoti_torch_get_current_cuda_stream"}


@needs_nvcc
def test_links_cuda_runtime_shared_not_driver(built):
    assert not cuda_linkage.check_needed(built.library), cuda_linkage.needed_libraries(built.library)


@needs_nvcc
def test_build_info_says_cuda(built):
    with open(built.library, "rb") as fh:
        data = fh.read()
    version = toolchain.nvcc_version(NVCC)
    assert b'"variant": "cuda"' in data
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as fh:  # a plain CMake build reads it too
        assert f'"version": "{tomllib.load(fh)["project"]["version"]}"'.encode() in data
    assert f'"cuda_version": "{version}"'.encode() in data
    assert f'"cuda_archs": "{toolchain.CI_ARCHS}"'.encode() in data


def test_size_table_rendering():
    """`check_cuda_build.py sizes` output (its builds are not run in CI): measured and unmeasured rows."""
    meta = dict(date="2026-11-22", machine="x86_64 Linux, 2 CPUs", nvcc="13.0.88", torch="2.13.0",
                commit="abc1234", jobs=1, notes=["`default` = ..."])
    rows = [dict(archs="90-real", compress="size", size_bytes=3 * 2**20, fatbin_bytes=2**20, entries=1,
                 uncompressed_bytes=5 * 2**20, build_s=123.4, cuda_compile_s=100.2),
            dict(archs="75-real;90-real", compress="none", note="not measured (run cut short)")]
    text = cuda_sizes.sizes_markdown(meta, rows)
    assert "nvcc 13.0.88, torch headers 2.13.0, commit abc1234" in text
    assert "| `90-real` | size | 3,072 KiB (3.00 MiB) | 1,024 KiB (1.00 MiB) | 1 (5,120 KiB) " \
           "| 123 s (100 s) |" in text, text
    assert "| `75-real;90-real` | none | not measured (run cut short) |" in text


# ---- architecture selection -----------------------------------------------------------------------------

def test_arch_table_is_well_formed():
    rows = toolchain.arch_table()
    assert rows, "cmake/cuda_architectures.txt has no rows"
    for min_v, archs in rows:
        entries = archs.split(";")
        nums = [int(re.match(r"^(\d+)", a).group(1)) for a in entries]
        assert all(re.match(r"^\d+-(real|virtual)$", a) for a in entries), archs
        assert nums == sorted(nums), f"{min_v}: not sorted"
        assert entries[-1] == f"{max(nums)}-virtual", f"{min_v}: PTX for the newest arch must come last"
        # pytorch's oldest SASS per CUDA major (data/compat.yaml): Maxwell for 12.x, Turing for 13.x
        assert min(nums) == (75 if toolchain._vkey(min_v) >= (13, 0) else 50), f"{min_v}: oldest arch {min(nums)}"
        if toolchain._vkey(min_v) >= (13, 0):
            assert 101 not in nums, "CUDA 13 renamed sm_101 to sm_110"
    assert toolchain.default_archs("11.8") is None
    assert "100-real" not in toolchain.default_archs("12.4") and "120-real" in toolchain.default_archs("12.9")
    assert "110-real" in toolchain.default_archs("13.0") and toolchain.default_archs("13.2") == toolchain.default_archs("13.0")


@needs_nvcc
def test_default_archs_are_supported_by_this_nvcc():
    version = toolchain.nvcc_version(NVCC)
    archs = toolchain.default_archs(version)
    assert archs, f"no default arch row for nvcc {version}"
    supported = toolchain.nvcc_supported_archs(NVCC)
    missing = {int(a.split("-")[0]) for a in archs.split(";")} - supported
    assert not missing, f"nvcc {version} lacks {missing} from the default list {archs}"


def _cache_value(build_dir, name):
    with open(os.path.join(build_dir, "CMakeCache.txt")) as fh:
        for line in fh:
            if line.startswith(name + ":"):
                return line.split("=", 1)[1].strip()
    return None


@needs_nvcc
@pytest.mark.parametrize("how", ["default", "CUDAARCHS", "cmake-define", "unsupported"])
def test_cmake_arch_selection(tmp_path, how):
    env = dict(os.environ)
    env.pop("CUDAARCHS", None)
    archs = None
    if how == "CUDAARCHS":
        env["CUDAARCHS"] = "80-real;86-virtual"
    elif how == "cmake-define":
        archs = "89-real"
    elif how == "unsupported":
        archs = "35-real"
    cp = cuda_build.configure(str(tmp_path), NVCC, archs, env=env)
    if how == "unsupported":
        assert cp.returncode != 0
        assert "'35-real'" in cp.stderr and "is not supported by" in cp.stderr, cp.stderr[-3000:]
        return
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    expected = {"default": toolchain.default_archs(toolchain.nvcc_version(NVCC)), "CUDAARCHS": "80-real;86-virtual",
                "cmake-define": "89-real"}[how]
    assert _cache_value(str(tmp_path), "CMAKE_CUDA_ARCHITECTURES") == expected
    assert f"architectures {expected} (from" in cp.stdout
