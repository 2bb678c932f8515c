"""The memory-access model's tracer (tests/cuda_emulation/trace_kernels.cpp) and the fit helpers of
benchmarks/gpu_model.py, on small inputs (no GPU needed)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

torch = pytest.importorskip("torch")
gpu_model = pytest.importorskip("gpu_model")


@pytest.fixture(scope="module")
def tracer(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not found")
    old = os.environ.get("GPU_MODEL_CACHE")
    os.environ["GPU_MODEL_CACHE"] = str(tmp_path_factory.mktemp("gpu_model_cache"))
    try:
        yield gpu_model.build_tracer()
    finally:
        if old is None:
            del os.environ["GPU_MODEL_CACHE"]
        else:
            os.environ["GPU_MODEL_CACHE"] = old


def run_trace(exe, tmp_path, op, dtype, feat, lengths):
    indptr = torch.tensor([0] + lengths, dtype=torch.long).cumsum(0)
    path = tmp_path / "indptr.bin"
    indptr.numpy().tofile(path)
    cp = subprocess.run([exe, op, dtype, str(feat), str(int(indptr[-1])), str(path)], capture_output=True,
                        text=True, check=True)
    return [json.loads(line) for line in cp.stdout.splitlines() if line.startswith("{")]


def test_trace_counts_lines_and_divergence(tracer, tmp_path):
    # F = 64 float32 rows: a warp's 16-byte loads of one row cover two 128-byte lines
    ls = run_trace(tracer, tmp_path, "sum", "float32", 64, [8] * 4096)
    assert ls and all(l["sampled"] > 0 for l in ls)
    for l in ls:
        assert l["ld_lines"] <= l["ld_sector"] / 32 and l["simt_inst"] >= l["ld_inst"] + l["st_inst"] - 1e-9
    main = [l for l in ls if "ReduceShort" in l["kernel"] or "ReduceMain" in l["kernel"]]
    assert main and all(l["simt_rounds"] >= l["n_rounds"] > 0 and l["lane_acc"] > 0 for l in main)
    # every launch and the model's time of it
    t, parts = gpu_model.predict(ls, {}, gpu_model.CALIBRATION)
    assert t > 0 and all(p["t"] >= max(p["t_" + k] for k in gpu_model.TERMS) * 0.999 for p in parts)


def test_fit_and_leave_one_out():
    import numpy as np
    times = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])
    meas = [2.0, 4.0, 6.0]
    assert gpu_model.fit_index(times, meas) == 1
    assert gpu_model.leave_one_out(times, meas) == [2.0, 4.0, 6.0]
    assert gpu_model.discordant_pairs([1, 2, 3], [1, 3, 2]) == (1, 3)
    assert gpu_model.discordant_pairs([1, 2, 3], [1, 3, 2.9], 0.1) == (0, 2)
