"""The CPU kernels are compiled once per instruction set (baseline, and avx2 on x86-64) and picked at
run time. The rest of the suite runs the set this machine picks; this file checks the choice and
runs the kernel suites (BASELINE_SUITES) on the baseline set too, which every CPU of the target can run."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

import torch_segops as so

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _isa_in_subprocess(env_value: str | None) -> str:
    env = dict(os.environ)
    env.pop("TORCH_SEGOPS_CPU_ISA", None)
    if env_value is not None:
        env["TORCH_SEGOPS_CPU_ISA"] = env_value
    code = "import torch_segops as so; print(so.build_info()['cpu_isa'])"
    return subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_build_info_names_the_compiled_and_running_sets():
    info = so.build_info()
    assert info["cpu_isas"][0] == "baseline", info["cpu_isas"]
    if platform.machine() in ("x86_64", "AMD64"):
        assert "avx2" in info["cpu_isas"], info["cpu_isas"]
    assert info["cpu_isa"] in info["cpu_isas"]


def test_environment_variable_forces_the_baseline():
    assert _isa_in_subprocess("baseline") == "baseline"
    default = _isa_in_subprocess(None)
    assert default in so.build_info()["cpu_isas"]


def test_avx2_is_picked_where_the_cpu_has_it():
    flags = open("/proc/cpuinfo").read().split() if os.path.exists("/proc/cpuinfo") else []
    needed = {"avx2", "fma", "f16c", "bmi1", "bmi2"}
    if "avx2" not in so.build_info()["cpu_isas"] or not needed <= set(flags):
        pytest.skip("this CPU or build has no avx2 kernel set")
    assert _isa_in_subprocess(None) == "avx2"


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
