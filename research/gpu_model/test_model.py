"""The memory-access model's tracer (trace_kernels.cpp) and the fit helpers of model.py, on small inputs
(no GPU needed). Collected with the test suite through tests/research/test_gpu_model.py."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from research.gpu_model import model as gpu_model

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tracer(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not found")
    old = os.environ.get("TORCH_SEGOPS_CACHE")
    os.environ["TORCH_SEGOPS_CACHE"] = str(tmp_path_factory.mktemp("gpu_model_cache"))
    try:
        yield gpu_model.build_tracer()
    finally:
        if old is None:
            del os.environ["TORCH_SEGOPS_CACHE"]
        else:
            os.environ["TORCH_SEGOPS_CACHE"] = old


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


def bank_count(exe, stride, nbytes):
    cp = subprocess.run([exe, "banks", str(stride), str(nbytes)], capture_output=True, text=True, check=True)
    return json.loads(cp.stdout)


def test_bank_conflicts_of_synthetic_warps(tracer):
    # 32 banks of 4 bytes: consecutive words are conflict-free, a broadcast is one wavefront, 16 words apart is
    # 16 lanes per bank (16 wavefronts), 33 words apart (a padded layout) is conflict-free again
    assert bank_count(tracer, 4, 4) == {"wavefronts": 1, "ideal": 1}
    assert bank_count(tracer, 0, 4) == {"wavefronts": 1, "ideal": 1}
    assert bank_count(tracer, 64, 4) == {"wavefronts": 16, "ideal": 1}
    assert bank_count(tracer, 16, 4) == {"wavefronts": 4, "ideal": 1}
    assert bank_count(tracer, 132, 4) == {"wavefronts": 1, "ideal": 1}
    # 8-byte accesses: half a warp at a time, two wavefronts at best
    assert bank_count(tracer, 8, 8) == {"wavefronts": 2, "ideal": 2}


def flat_counts(exe, tmp_path, dtype, lengths):
    """ReduceFlatBlock's shared-memory (wavefronts, conflict-free wavefronts) on these segment lengths, F = 1 sum"""
    launches = run_trace(exe, tmp_path, "sum", dtype, 1, lengths)
    flat = [l for l in launches if "ReduceFlatBlock" in l["kernel"]]
    assert flat and flat[0]["shared_inst"] > 0
    return flat[0]["shared_wavefronts"], flat[0]["shared_ideal"]


@pytest.fixture(scope="module")
def plain_tracer(tracer):
    # the same kernels with ReduceFlatBlock's plain 16-item layout (the one before 2026-11-25)
    return gpu_model.build_tracer(defines=("SEGOPS_FLAT_PLAIN_LAYOUT",))


def test_flat_block_kernel_bank_conflicts(tracer, tmp_path):
    # The layout's wavefronts over the conflict-free count: one long segment, a run of empty segments, constant
    # 32-row segments (k-NN fan-in), irregular short ones. The plain layout took 7.1x, 8.6x, 1.65x, 2.18x.
    for lengths, lo, hi in (([300000], 1.2, 1.7), ([0] * 200000 + [64], 0.99, 1.2), ([32] * 9000, 1.0, 1.8),
                            ([1, 7, 3, 12, 5, 9] * 4000, 1.0, 2.0)):
        w, ideal = flat_counts(tracer, tmp_path, "float32", lengths)
        assert lo <= w / ideal <= hi, (lengths[:3], w / ideal)


def sweep_cases(step):
    for n in range(0, 65, step):  # constant lengths (k-NN fan-in, padded batches)
        yield f"constant {n}", [n] * (60000 // max(n, 1) if n else 50000) + [1]
    for n in (80, 128, 255, 300):
        yield f"constant {n}", [n] * (300000 // n)
    for k in (1, 5, 16, 32, 63):  # alternating empty and k-row segments
        yield f"0/{k}", [0, k] * (120000 // (k + 1))
    gen = torch.Generator().manual_seed(0)
    for lo, hi in ((0, 20), (0, 64), (20, 80), (60, 300)):
        yield f"uniform {lo}-{hi}", torch.randint(lo, hi + 1, (200000 // (hi + 1),), generator=gen).tolist()
    yield "one long", [300000]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_flat_block_layout_never_worse_than_plain(tracer, plain_tracer, tmp_path, dtype):
    # The layout was chosen over these cases (README.md, "ReduceFlatBlock's shared-memory layout"): in none
    # may it take more shared-memory wavefronts than the plain 16-item layout (constant 31 rows: 0.9% more,
    # within the 2% allowed; 0.18x-0.99x elsewhere)
    worse = []
    for name, lengths in sweep_cases(1 if dtype == "float32" else 4):
        new, old = flat_counts(tracer, tmp_path, dtype, lengths)[0], flat_counts(plain_tracer, tmp_path, dtype, lengths)[0]
        if new > 1.02 * old:
            worse.append((name, new / old))
    assert not worse, worse


def test_flat_block_plain_layout_for_8_byte_rows(tracer, plain_tracer, tmp_path):
    # 8-byte accumulators (float64, int64) keep the plain layout with 8 items (no layout tried was as good at
    # every segment length): lanes 16 words apart on one long segment, 2 wavefronts per 16 lanes at best
    w, ideal = flat_counts(tracer, tmp_path, "float64", [300000])
    assert 3.0 <= w / ideal <= 4.5 and (w, ideal) == flat_counts(plain_tracer, tmp_path, "float64", [300000])


def test_whole_waves_and_launch_chain():
    # 528 blocks at 3 per SM on 132 SMs: 1.33 waves take 2
    assert gpu_model.whole_waves(528 * 256, 3 * 8) == 2
    assert gpu_model.whole_waves(396 * 256, 3 * 8) == 1
    assert gpu_model.whole_waves(1, 64) == 1
    cal = dict(gpu_model.CALIBRATION, launch_s=1e-6, host_s=10e-6)
    sub = gpu_model.SUBMIT_S
    # a long launch: host work and one submission, then the GPU times and launch costs add up
    assert gpu_model.chain([100e-6], cal) == pytest.approx(10e-6 + sub + 100e-6)
    assert gpu_model.chain([100e-6, 50e-6], cal) == pytest.approx(10e-6 + sub + 100e-6 + 1e-6 + 50e-6)
    # tiny launches wait for the host's submissions
    assert gpu_model.chain([0.1e-6] * 4, cal) == pytest.approx(10e-6 + 4 * sub + 0.1e-6)


def test_ptxas_and_sass_parsers():
    log = """ptxas info    : Compiling entry function '_Z1kv' for 'sm_90'
ptxas info    : Function properties for _Z1kv
    72 bytes stack frame, 8 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 92 registers, used 1 barriers, 33796 bytes smem
ptxas info    : Function properties for _Z6helperv
    24 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""
    assert gpu_model.parse_ptxas(log) == {"_Z1kv": {"regs": 92, "smem": 33796, "stack": 72, "spill_st": 8,
                                                    "spill_ld": 16}}
    sass = """
        Function : _Z1kv
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0020*/               @P0 STL.64 [R1+0x8], R6 ;
        /*0030*/                   LDL R9, [R1+0x10] ;
        /*0040*/                   STG.E [R2.64], R9 ;
"""
    assert gpu_model.parse_sass(sass) == {"_Z1kv": {"local_inst": 2, "local_bytes": 12, "global_inst": 2}}
    launch = {"simt_inst": 100.0}
    r = {"local_inst": 2, "local_bytes": 12, "global_inst": 2}
    assert gpu_model.local_lines(launch, r) == pytest.approx(100.0 * 6 * 32 / 128)
    assert gpu_model.local_lines(launch, {"regs": 32}) == 0.0


def test_saved_resources_are_those_of_the_kernels():
    """The committed ptxas resources (used where nvcc is absent) belong to the kernel sources as they are: no saved
    kernel is stale. A reducer added since has none (the model reports its kernels "not measured")."""
    with open(gpu_model.RESOURCES) as fh:
        saved = json.load(fh)
    stale = gpu_model.stale_kernels(saved, gpu_model.kernel_hashes())
    assert not stale, (
        f"{len(stale)} kernels changed (e.g. {stale[0]}): run `python research/gpu_model/model.py "
        "--refresh-resources` and commit " + os.path.relpath(gpu_model.RESOURCES, gpu_model.REPO))


def _sources_copy(tmp_path, edit=None):
    """KERNEL_SOURCES under tmp_path; edit(path, text) -> text changes one file's text."""
    for f in gpu_model.KERNEL_SOURCES:
        with open(os.path.join(gpu_model.REPO, f)) as fh:
            text = fh.read()
        os.makedirs(os.path.dirname(tmp_path / f), exist_ok=True)
        (tmp_path / f).write_text(edit(f, text) if edit else text)
    return gpu_model.kernel_hashes(str(tmp_path))


def test_kernel_hashes_see_code_not_names_or_rows(tmp_path):
    """Which saved kernels a change makes stale: a comment or a renamed header none; a new reduction (its policy and
    its row) none, its kernels "not measured"; a reducer's code its kernels (and those of reducers built on it);
    shared kernel code all of them."""
    now = gpu_model.kernel_hashes()
    saved = {**now, "kernels": {"ReduceFlat<torch_segops::SumOp<float>,float,1>": {},
                                "ReduceFlat<torch_segops::MeanOp<float>,float,1>": {},
                                "ReduceFlat<torch_segops::ArgExtremumOp<float,true>,float,1>": {},
                                "Expand<torch_segops::cuda::GatherFn<float>,1>": {}}}
    policies, table = os.path.basename(gpu_model.POLICIES), os.path.basename(gpu_model.TABLE)

    def renamed(f, text):
        text = text.replace(f'#include "{policies}"', '#include "renamed_policies.h"')
        return text.replace("namespace torch_segops {", "// a comment that names no kernel\nnamespace torch_segops {")
    assert _sources_copy(tmp_path / "renamed", renamed) == now

    def added(f, text):
        if f == gpu_model.POLICIES:
            text = text.replace("template <typename A> struct LogSumExpOp",
                                "template <typename A> struct NewOp : SumOp<A> {\n};\n\ntemplate <typename A> struct LogSumExpOp")
        if f == gpu_model.TABLE:
            text = text.replace("  X(Sum,", '  X(New, "new", NewOp, false, true)                     \\\n  X(Sum,')
        return text
    with_new = _sources_copy(tmp_path / "added", added)
    assert with_new != now
    assert gpu_model.stale_kernels(saved, with_new) == []
    assert gpu_model.unmeasured_reducers(saved, with_new) == ["NewOp"]

    def sum_changed(f, text):
        return text.replace("s.v += x;", "s.v = s.v + x;") if f == gpu_model.POLICIES else text
    assert gpu_model.stale_kernels(saved, _sources_copy(tmp_path / "sum", sum_changed)) == [
        "ReduceFlat<torch_segops::MeanOp<float>,float,1>", "ReduceFlat<torch_segops::SumOp<float>,float,1>"]

    def shared_changed(f, text):
        return text.replace("namespace torch_segops {", "namespace torch_segops {\nint x;", 1) if f.endswith("drivers.cuh") else text
    assert gpu_model.stale_kernels(saved, _sources_copy(tmp_path / "shared", shared_changed)) == sorted(saved["kernels"])


def test_unmeasured_kernel_is_reported_not_guessed():
    """A launch of a kernel without saved resources is marked unmeasured (main prints "not measured" for its case)."""
    launch = {"kernel": "ReduceFlat<torch_segops::NewOp<float>,float,1>", "warps": 8, "sampled": 8, "threads": 256,
              "read_sectors": 0, "written_sectors": 0, "l1_caps": [0], "rounds": [[0, 0, 0]], "max_chain": [[0, 0, 0]],
              "simt_rounds": 0, "l1_miss": [0], "st_sector": 0, "ld_lines": 0, "st_lines": 0, "simt_inst": 0,
              "ld_useful": 0, "ld_sector": 0, "st_useful": 0, "round_bytes": 0, "n_rounds": 0}
    assert gpu_model.launch_terms(launch, {})["measured"] is False
    assert gpu_model.launch_terms(launch, {launch["kernel"]: {"regs": 32, "smem": 0}})["measured"] is True


def test_calibrate_traces_the_measured_kernels(tmp_path, monkeypatch):
    """--calibrate: the kernels measured on the H100 (CALIBRATION_COMMIT, materialised from git) traced with this
    tree's tracer, with their saved resources. It broke when src/csrc/cuda/ was split: the tree's source hash read
    files the old tree lacks, and the tracer included cuda/drivers.cuh and softmax's state statistics."""
    if shutil.which("g++") is None or shutil.which("git") is None:
        pytest.skip("g++ or git not found")
    have = subprocess.run(["git", "-C", gpu_model.REPO, "cat-file", "-e", f"{gpu_model.CALIBRATION_COMMIT}^{{commit}}"],
                          capture_output=True)
    if have.returncode != 0:
        pytest.skip(f"commit {gpu_model.CALIBRATION_COMMIT} not in this clone (shallow?)")
    monkeypatch.setenv("TORCH_SEGOPS_CACHE", str(tmp_path))
    root = gpu_model.materialise()
    assert os.path.exists(os.path.join(root, "src", "csrc", "cuda", "segment_kernels.cuh"))
    assert not os.path.exists(os.path.join(root, "src", "csrc", "cuda", "drivers.cuh"))
    res = gpu_model.resources(root=root)
    assert res and all(r["regs"] > 0 for r in res.values())
    exe = gpu_model.build_tracer(root, opt="-O0")
    for op in ("sum", "softmax"):
        launches = run_trace(exe, tmp_path, op, "float32", 16, [8] * 256 + [2000])
        assert launches and all(l["sampled"] > 0 for l in launches), op
        t, parts = gpu_model.predict(launches, res, gpu_model.CALIBRATION)
        assert t > 0 and len(parts) == len(launches)
