"""The CPU kernels are compiled once per instruction set, each object as Google Highway's static target of its
flags (baseline, which every CPU of the build's architecture runs: NEON on aarch64; on x86-64 also avx2 and
avx512), and chosen at run time by Highway's CPU detection, or by TORCH_SEGOPS_CPU_ISA. The rest of the suite
runs the set this machine picks; this file checks the choice, runs the kernel suites (BASELINE_SUITES) on the
baseline set too, and checks that every set this CPU runs gives the same results, bit for bit
(tools/cpu_targets.py)."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

import torch_segops as so
from tools import cpu_targets

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
X86 = platform.machine() in ("x86_64", "AMD64")


def _in_subprocess(env_value: str | None, code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("TORCH_SEGOPS_CPU_ISA", None)
    if env_value is not None:
        env["TORCH_SEGOPS_CPU_ISA"] = env_value
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def _isa_in_subprocess(env_value: str | None) -> str:
    cp = _in_subprocess(env_value, "import torch_segops as so; print(so.build_info()['cpu_isa'])")
    assert cp.returncode == 0, cp.stderr[-2000:]
    return cp.stdout.strip()


def cpu_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text() if os.path.exists("/proc/cpuinfo") else ""
    m = re.search(r"^(flags|Features)\s*:(.*)$", text, re.M)
    return set(m.group(2).split()) if m else set()


def test_build_info_names_the_compiled_and_running_sets():
    info = so.build_info()
    assert info["cpu_isas"][0] == "baseline", info["cpu_isas"]
    if X86:
        assert info["cpu_isas"] == ["baseline", "avx2", "avx512"], info["cpu_isas"]
    assert info["cpu_isa"] in info["cpu_isas"]


def test_build_info_names_each_sets_highway_target():
    targets = so.build_info()["cpu_targets"]
    assert list(targets) == so.build_info()["cpu_isas"], targets
    if X86:
        # the baseline: SSE2 from Highway 1.1 on; its 128-bit emulation or (GCC < 12.3) its scalar target before
        assert targets["baseline"] in ("sse2", "emu128", "scalar"), targets
        assert targets["avx2"] == "avx2" and targets["avx512"] == "avx3", targets
    elif platform.machine() in ("aarch64", "arm64"):
        assert targets["baseline"].startswith("neon"), targets


def test_environment_variable_forces_a_set():
    assert _isa_in_subprocess("baseline") == "baseline"
    assert _isa_in_subprocess("BASELINE") == "baseline"
    assert _isa_in_subprocess(None) in so.build_info()["cpu_isas"]


def test_an_invalid_name_is_an_error_naming_the_variable():
    bad = _isa_in_subprocess("avx9000")
    assert bad.startswith("invalid: TORCH_SEGOPS_CPU_ISA=avx9000 names no CPU kernel set of this build"), bad
    assert all(name in bad for name in so.build_info()["cpu_isas"]), bad
    code = ("import torch, torch_segops as so\n"
            "try:\n    so.segment_sum_csr(torch.ones(3), torch.tensor([0, 3]))\n"
            "except RuntimeError as e:\n    print('raised:', e)\n")
    cp = _in_subprocess("avx9000", code)
    assert "raised: " in cp.stdout and "TORCH_SEGOPS_CPU_ISA=avx9000" in cp.stdout, cp.stdout + cp.stderr[-2000:]


def test_the_best_set_this_cpu_runs_is_picked():
    flags = cpu_flags()
    if not X86 or not flags:
        pytest.skip("x86-64 Linux only (/proc/cpuinfo flags)")
    v3 = {"avx2", "fma", "f16c", "bmi1", "bmi2", "pclmulqdq", "aes"}
    if v3 | {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"} <= flags:
        want = "avx512"
    elif v3 <= flags:
        want = "avx2"
    else:
        want = "baseline"
    assert _isa_in_subprocess(None) == want


def test_a_set_this_cpu_lacks_is_refused():
    flags = cpu_flags()
    if not X86 or "avx512f" in flags:
        pytest.skip("needs an x86-64 CPU without AVX-512 (this one runs every set; the refusal's path is the "
                    "same code as the invalid name's, tested above)")
    bad = _isa_in_subprocess("avx512")
    assert bad.startswith("invalid: TORCH_SEGOPS_CPU_ISA=avx512: this CPU cannot run the avx512 kernels"), bad


# The suites that exercise the kernels (the baseline set is the code aarch64 and x86-64 without AVX2 run): the CSR
# ops, COO and scatter, gradients, determinism and the float64 differential.
BASELINE_SUITES = ["api/test_ops.py", "api/test_coo.py", "api/test_scatter.py", "api/test_autograd.py",
                   "kernels/test_determinism.py", "kernels/test_differential.py"]


@pytest.mark.parametrize("suite", BASELINE_SUITES, ids=os.path.basename)
def test_suite_passes_on_the_baseline_kernels(suite):
    # fewer random examples than the first pass, which draws them on the default kernels
    env = dict(os.environ, TORCH_SEGOPS_CPU_ISA="baseline", HYPOTHESIS_PROFILE="second_pass", SEGOPS_DIFF_CASES="6")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", os.path.join(TESTS, suite), "-x", "-q", "-p", "no:cacheprovider"],
        env=env, capture_output=True, text=True, cwd=TESTS)
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout and " failed" not in proc.stdout, tail


def test_every_set_gives_the_same_bits(tmp_path):
    """The corpus of tools/cpu_targets.py (every kernel, every dtype, +-inf, NaN, -0.0, huge and subnormal
    values, int32/int64 indptr) on every set this CPU runs, against the default one: bit for bit (a NaN
    equals any NaN), exp-based results to a tolerance between sets that do and do not fuse multiply-adds.
    Caught: Highway 1.0.3's float16 emulation turning inf and NaN into finite numbers (the baseline), and
    the baseline's one-feature sums in another order than the vector sets' (before Highway)."""
    import torch

    targets = cpu_targets.runnable_targets()
    assert so.build_info()["cpu_isa"] in targets
    default = cpu_targets.run_one(None, None, tmp_path / "default.pt", quick=True)
    ref = torch.load(tmp_path / "default.pt")
    for t in targets:
        if t == default:
            continue
        assert cpu_targets.run_one(None, t, tmp_path / f"{t}.pt", quick=True) == t
        same_fma = (t in cpu_targets.FMA_TARGETS) == (default in cpu_targets.FMA_TARGETS)
        problems = cpu_targets.compare(ref, torch.load(tmp_path / f"{t}.pt"), exact_inexact=same_fma)
        assert not problems, f"{t} vs {default}:\n" + "\n".join(problems[:20])


DAZ_CHECK = """
import torch, torch_segops as so
torch.set_num_threads(1)
cases = []
for F in (1, 16, 32, 64, 100):
    for reduce, other, tiny in (("max", -1.0, 1e-40), ("min", 1.0, -1e-40)):
        src = torch.full((40, F), other)
        src[0] = tiny  # a subnormal (made before the flush mode, which would flush its conversion): wins
        src[7] = 0.0  # equal to it as DAZ compares: not taken
        assert (src[0] != 0).all()
        cases.append((F, reduce, src))
assert torch.set_flush_denormal(True), "no denormals-are-zero mode on this CPU"
for F, reduce, src in cases:
    out, arg = getattr(so, f"segment_{reduce}_csr")(src, torch.tensor([0, 40]))
    assert torch.equal(arg, torch.zeros_like(arg)), (F, reduce, arg)
    held = src.gather(0, arg)
    assert torch.equal(out.view(torch.int32), held.view(torch.int32)), (F, reduce, out.view(torch.int32))
print("ok")
"""


@pytest.mark.skipif(not X86, reason="x86's denormals-are-zero mode (MXCSR.DAZ) is what torch.set_flush_denormal sets")
def test_max_min_write_the_element_at_arg_with_denormals_flushed():
    """Under torch.set_flush_denormal(True) the CPU compares a subnormal as zero and maxps/minps would return
    that zero: the kernels copy the element at the arg row (a blend), so value == src[arg], bit for bit, on
    every set this CPU runs (a review caught maxps(x, m) writing 0 for 1e-40)."""
    for t in cpu_targets.runnable_targets():
        cp = _in_subprocess(t, DAZ_CHECK)
        assert cp.returncode == 0 and cp.stdout.strip() == "ok", (t, cp.stderr[-2000:])
