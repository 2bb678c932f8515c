"""The test files themselves are sound where their tests cannot run.

tests/kernels/test_cuda.py only runs on a GPU, which CI does not have: a broken decorator, fixture or helper there would
go unseen until the first GPU session (a @parametrize left on a helper once hid 161 GPU tests). So CI
- collects every test file with no error;
- rejects @pytest.mark.parametrize on a function that is not a test;
- runs the bodies of tests/kernels/test_cuda.py on the CPU device with small shapes (its dry run,
  TORCH_SEGOPS_CUDA_TESTS_DEVICE=cpu), and shows with a planted mistake that the dry run catches one.
"""

from __future__ import annotations

import ast
import glob
import os
import re
import shutil
import subprocess
import sys

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
TEST_FILES = sorted(glob.glob(os.path.join(TESTS, "**", "test_*.py"), recursive=True))  # every folder of tests/


def _pytest(args: list[str], cwd: str = REPO, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd,
                          capture_output=True, text=True, env=dict(os.environ, **env), timeout=900)


def test_every_test_file_collects():
    cp = _pytest(["--collect-only", "-q", TESTS])
    out = cp.stdout + cp.stderr
    assert cp.returncode == 0, out[-6000:]
    assert not re.search(r"^ERROR|errors? during collection|fixture '.*' not found", out, re.M), out[-6000:]
    collected = {line.split("::")[0] for line in cp.stdout.splitlines() if "::" in line}
    files = {os.path.relpath(f, REPO) for f in TEST_FILES}
    assert files <= {os.path.relpath(os.path.join(REPO, c), REPO) for c in collected}, sorted(files - collected)


def _parametrized_helpers(path: str) -> list[str]:
    with open(path) as fh:
        tree = ast.parse(fh.read())
    return [fn.name for fn in ast.walk(tree)
            if isinstance(fn, ast.FunctionDef) and not fn.name.startswith("test")
            and any("parametrize" in ast.unparse(d) for d in fn.decorator_list)]


def test_no_parametrize_on_a_helper(tmp_path):
    files = list(TEST_FILES)
    files.append(os.path.join(REPO, "research", "gpu_model", "test_model.py"))  # run through tests/research/test_gpu_model.py
    found = {os.path.relpath(f, REPO): _parametrized_helpers(f) for f in files}
    assert not {f: h for f, h in found.items() if h}, found
    planted = tmp_path / "test_planted.py"
    planted.write_text("import pytest\n\n@pytest.mark.parametrize('n', [1])\ndef _helper(n):\n    return n\n")
    assert _parametrized_helpers(str(planted)) == ["_helper"]


def _dry_run(test_dir: str, *args: str) -> subprocess.CompletedProcess:
    return _pytest([os.path.join(test_dir, "test_cuda.py"), "-q", "-ra", *args], cwd=test_dir,
                   TORCH_SEGOPS_CUDA_TESTS_DEVICE="cpu")


def test_cuda_tests_dry_run_on_cpu():
    cp = _dry_run(os.path.join(TESTS, "kernels"))
    out = cp.stdout + cp.stderr
    assert cp.returncode == 0, out[-8000:]
    m = re.search(r"(\d+) passed(?:, (\d+) skipped)?", out)
    assert m and int(m.group(1)) >= 350, out[-3000:]
    # the only skips are the ones the dry run cannot do (two devices, the CUDA build, asynchronous errors)
    skips = re.findall(r"^SKIPPED \[\d+\] .*?: (.*)$", out, re.M)
    assert len(skips) <= 6 and all(s.startswith("dry run") for s in skips), skips


def test_cuda_dry_run_catches_a_parametrize_on_a_helper(tmp_path):
    """The control: test_cuda.py with the mistake of 2e50fca planted back (the test's parametrize moved onto
    the helper above it) fails its dry run."""
    for f in ("conftest.py", "reference.py"):
        shutil.copy(os.path.join(TESTS, f), tmp_path / f)
    with open(os.path.join(TESTS, "kernels", "test_cuda.py")) as fh:
        src = fh.read()
    deco = '@pytest.mark.parametrize("dtype", R.FLOAT_DTYPES, ids=str)\n@pytest.mark.parametrize("name", list(REDUCES))\n'
    assert src.count(deco) == 1 and "def _cut_indptr" in src
    src = src.replace(deco, "").replace("def _cut_indptr", deco + "def _cut_indptr")
    (tmp_path / "test_cuda.py").write_text(src)
    cp = _pytest([str(tmp_path / "test_cuda.py"), "-q", "-ra", "-k", "large and merge-F16 and not short-segments"],
                 cwd=str(tmp_path), TORCH_SEGOPS_CUDA_TESTS_DEVICE="cpu", PYTHONPATH=TESTS)  # cpp_checks: the repository's
    out = cp.stdout + cp.stderr
    assert cp.returncode != 0 and "fixture 'name' not found" in out, out[-4000:]


# ---- the GPU check command, which only a GPU machine runs ---------------------------------------------------

def test_gpu_check_script_parses_and_documents_its_stages():
    script = os.path.join(REPO, "tools", "gpu_check.sh")
    cp = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    with open(script) as fh:
        text = fh.read()
    documented = set(re.search(r"stages: ([a-z ]+)\n", text).group(1).split())
    handled = set(re.findall(r"^  ([a-z]+)\)", text, re.M))
    assert documented == handled, (documented, handled)
    assert {"memcheck", "racecheck", "synccheck", "initcheck"} <= set(re.search(r"SAN_TOOLS:-([a-z ]+)}", text).group(1).split())


def test_gpu_check_lease_plan_dry_run(tmp_path):
    """The lease plan of tools/gpu_check.sh run blind without a GPU (GPU_CHECK_DRY=1): a stage that runs past its
    time limit is cut and said to be, memcheck is left out, the benchmark is not started with too little time
    left, and the results file comes back under $OUT with the summary."""
    env = dict(os.environ, GPU_CHECK_DRY="1", PYTHON=sys.executable, LOGS=str(tmp_path / "logs"),
               OUT=str(tmp_path / "out"), TESTS_S="1", BENCH_MIN_S="100000")
    cp = subprocess.run(["bash", os.path.join(REPO, "tools", "gpu_check.sh")], env=env, capture_output=True,
                        text=True, timeout=300)
    assert cp.returncode == 1, cp.stdout[-3000:] + cp.stderr[-3000:]  # a stage was cut short
    md = (tmp_path / "out" / "gpu-check.md").read_text()
    assert md.startswith("# GPU check (") and "no GPU (dry run)" in md, md[:2000]
    assert "- tests: CUT SHORT after 1 s" in md and "- memcheck: not run (dry run" in md, md[:2000]
    assert re.search(r"- bench: not run \(-?\d+ s left, less than 100000 s\)", md), md[:2000]
    assert (tmp_path / "out" / "gpu_check.tar.gz").stat().st_size > 0


def test_kernel_times_table_from_profiler_names():
    """benchmarks/cuda_kernel_times.py's parts that need no GPU: kernel names as torch.profiler reports them,
    and the table."""
    from benchmarks import cuda_kernel_times as K

    name = ("void torch_segops::cuda::run_kernel<torch_segops::cuda::Fixup<torch_segops::SumOp<float>, float, 4> >"
            "(torch_segops::cuda::Fixup<torch_segops::SumOp<float>, float, 4>, long)")
    assert K.short_name(name) == "Fixup"
    assert K.short_name("void torch_segops::cuda::run_block_kernel<torch_segops::cuda::ReduceFlatBlock<x> >(x)") \
        == "ReduceFlatBlock"
    row = {"op": "sum", "dist": "uniform", "feat": 16, "plan": "short", "ran": ["short"], "total_us": 130.0,
           "kernels": [("ReduceShort", 1.0, 120.0, 120 / 130), ("Fixup", 1.0, 10.0, 10 / 130)]}
    table = K.markdown([row], "synthetic")
    assert "| sum | uniform | 16 | short (short) | 130.0 | ReduceShort 1 x 120.0 (92%); Fixup 1 x 10.0 (8%) |" in table
    assert set(K.PLAN_SPECS) == {"short", "merge", "block"} and all(c[3] in K.PLAN_SPECS for c in K.CASES)
