"""Regression tests of issue #25's hostile-input pass (the ops; the doctor's are in test_doctor.py).

Calls that would allocate gigabytes run in a child process whose address space is capped a little
above what it holds after importing torch_segops (RLIMIT_AS): there an oversized allocation fails at
once instead of touching the shared machine's memory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import reference as R
import torch_segops as so

ERRORS = (TypeError, ValueError, RuntimeError)
_ops = torch.ops.torch_segops
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")


def run_capped(code: str, headroom_gb: float = 2.0) -> subprocess.CompletedProcess:
    """Run ``code`` (torch, torch_segops as so, R imported) in a child whose address space may grow by
    ``headroom_gb`` past its size after the imports."""
    prelude = textwrap.dedent(f"""
        import re, resource, sys
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        import torch, torch_segops as so, reference as R
        vm = int(re.search(r"VmSize:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024
        cap = vm + int({headroom_gb} * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    """)
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300)


# ---- meta tensors mixed with CPU tensors ---------------------------------------------------------------

SRC = torch.ones(4, 2)
META_INDPTR = torch.tensor([0, 2, 4], device="meta")
META_INDEX = torch.tensor([0, 0, 1, 1], device="meta")
_PLAN = so.scatter_plan(torch.tensor([0, 0, 1, 1]), 2)
META_PLAN = so.ScatterPlan(_PLAN.perm.to("meta"), _PLAN.indptr.to("meta"))

# (call, the argument the error must name)
MIXED_META = {
    "segment_csr": (lambda: so.segment_csr(SRC, META_INDPTR), "indptr"),
    "segment_sum_csr": (lambda: so.segment_sum_csr(SRC, META_INDPTR), "indptr"),
    "segment_mean_csr": (lambda: so.segment_mean_csr(SRC, META_INDPTR), "indptr"),
    "segment_min_csr": (lambda: so.segment_min_csr(SRC, META_INDPTR), "indptr"),
    "segment_max_csr": (lambda: so.segment_max_csr(SRC, META_INDPTR), "indptr"),
    "segment_logsumexp_csr": (lambda: so.segment_logsumexp_csr(SRC, META_INDPTR), "indptr"),
    "segment_softmax_csr": (lambda: so.segment_softmax_csr(SRC, META_INDPTR), "indptr"),
    "gather_csr": (lambda: so.gather_csr(SRC[:2], META_INDPTR), "indptr"),
    "meta_src_gather_csr": (lambda: so.gather_csr(SRC[:2].to("meta"), torch.tensor([0, 2, 4])), "indptr"),
    "segment_coo": (lambda: so.segment_coo(SRC, META_INDEX, dim_size=2), "index"),
    "gather_coo": (lambda: so.gather_coo(SRC, META_INDEX[:3]), "index"),
    "scatter": (lambda: so.scatter(SRC, META_INDEX, 0, dim_size=2), "index"),
    "scatter_mul": (lambda: so.scatter_mul(SRC, META_INDEX, 0, dim_size=2), "index"),
    "segment_csr_mul": (lambda: so.segment_csr(SRC, META_INDPTR, reduce="mul"), "indptr"),
    "scatter_meta_plan": (lambda: so.scatter(SRC, torch.tensor([0, 0, 1, 1]), 0, plan=META_PLAN), "plan.perm"),
    "op_segment_max": (lambda: _ops.segment_max(SRC, META_INDPTR), "indptr"),
    "op_segment_mean": (lambda: _ops.segment_mean(SRC, META_INDPTR), "indptr"),
    "op_segment_mul": (lambda: _ops.segment_mul(SRC, META_INDPTR), "indptr"),
    "op_segment_mul_out": (lambda: _ops.segment_mul_out(SRC, META_INDPTR, torch.empty(2, 2)), "indptr"),
    "op_gather_csr": (lambda: _ops.gather_csr(SRC[:2], META_INDPTR, 4), "indptr"),
    "op_segment_softmax": (lambda: _ops.segment_softmax(SRC, META_INDPTR), "indptr"),
    "op_softmax_backward": (lambda: _ops.segment_softmax_backward(SRC, SRC, META_INDPTR), "indptr"),
    "op_segment_sum_out": (lambda: _ops.segment_sum_out(SRC, META_INDPTR, torch.empty(2, 2)), "indptr"),
    "op_segment_min_out": (lambda: _ops.segment_min_out(SRC, META_INDPTR, torch.empty(2, 2),
                                                        torch.empty(2, 2, dtype=torch.long)), "indptr"),
    "op_gather_csr_out": (lambda: _ops.gather_csr_out(SRC[:2], META_INDPTR, torch.empty(4, 2)), "indptr"),
}


@pytest.mark.parametrize("case", list(MIXED_META))
def test_meta_tensor_mixed_with_cpu_tensors_raises_a_device_mismatch(case):
    call, name = MIXED_META[case]
    with pytest.raises(RuntimeError, match=rf"{name} is on meta but \w+ is on cpu|indptr is on cpu but src is on meta"):
        call()


def test_meta_tensor_mixed_with_cpu_tensors_raises_in_torchscript():
    with pytest.raises(Exception, match="indptr is on meta"):
        torch.jit.script(so.segment_csr)(SRC, META_INDPTR, None, "max")
    with pytest.raises(Exception, match="index is on meta"):
        torch.jit.script(so.segment_coo)(SRC, META_INDEX, None, 2, "sum")
    with pytest.raises(Exception, match="index is on meta"):
        torch.jit.script(so.scatter)(SRC, META_INDEX, 0, None, 2)


def test_meta_only_calls_still_give_shapes():
    src = SRC.to("meta")
    assert so.segment_csr(src, META_INDPTR, reduce="max").shape == (2, 2)
    assert so.segment_csr(src, META_INDPTR, reduce="mul").shape == (2, 2)
    values, arg = so.segment_max_csr(src, META_INDPTR)
    assert values.device.type == "meta" and arg.shape == (2, 2)
    assert so.gather_csr(src[:2], META_INDPTR, size=4).shape == (4, 2)
    assert so.segment_softmax_csr(src, META_INDPTR).shape == (4, 2)
    assert so.segment_coo(src, META_INDEX, dim_size=3).shape == (3, 2)


# ---- Low 1: softmax over many empty segments -------------------------------------------------------------

def test_softmax_with_many_empty_segments_allocates_no_segments_by_features_buffer():
    """400 KB of src and 20,000 empty segments asked for an 8 GB statistics buffer (bare std::bad_alloc)."""
    r = run_capped("""
        x = torch.randn(1, 100000, requires_grad=True)
        indptr = torch.zeros(20001, dtype=torch.long)
        indptr[10000:] = 1  # one non-empty segment: row 0 (over the 100,000 features)
        y = so.segment_softmax_csr(x, indptr)
        y.backward(torch.randn_like(y))
        assert torch.equal(y, torch.ones_like(y)) and bool((x.grad == 0).all())
        print("ok")
    """, headroom_gb=1.0)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


@pytest.mark.parametrize("lead", [(), (3,), (3, 1)], ids=["1d", "batched", "broadcast"])
def test_softmax_with_more_segments_than_rows_matches_the_reference(lead):
    """The non-empty segments alone give every value and gradient (also with batched and broadcast indptr)."""
    gen = torch.Generator().manual_seed(3)
    rows = [0, 0, 0, 3, 3, 5, 5, 5, 5, 9, 9, 9, 10, 10, 10]  # 14 segments over 10 rows
    indptr = torch.tensor(rows)
    if lead == (3,):
        indptr = torch.stack([indptr, torch.tensor([0, 1, 1, 1, 4, 4, 4, 4, 6, 10, 10, 10, 10, 10, 10]),
                              torch.tensor([2] * 15)])
    elif lead == (3, 1):
        indptr = indptr.expand(1, 15)
    src = torch.randn(3, 10, 2, dtype=torch.float64, generator=gen) if lead else torch.randn(10, 2, dtype=torch.float64,
                                                                                              generator=gen)
    R.assert_softmax_close(so.segment_softmax_csr(src, indptr), R.segment_softmax(src, indptr), src, indptr)
    x = src.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: so.segment_softmax_csr(t, indptr), (x,))
    assert torch.autograd.gradgradcheck(lambda t: so.segment_softmax_csr(t, indptr), (x,))


# ---- Low 2 and 3: the index-to-offsets step ---------------------------------------------------------------

def test_index_to_offsets_allocation_failure_names_the_op_and_dim_size():
    r = run_capped("""
        index = torch.tensor([0, 0, 1, 1])
        calls = {"segment_coo": lambda: so.segment_coo(torch.ones(4), index, dim_size=2**38),
                 "scatter": lambda: so.scatter(torch.ones(4), index, 0, dim_size=2**38),
                 "scatter_plan": lambda: so.scatter_plan(index, 2**38)}
        for name, call in calls.items():
            try:
                call()
            except RuntimeError as e:
                print(name, "|", e)
            else:
                print(name, "| no error")
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = dict(line.split(" | ", 1) for line in r.stdout.strip().splitlines())
    assert set(lines) == {"segment_coo", "scatter", "scatter_plan"}
    for name, message in lines.items():
        if name == "scatter_plan":
            assert message.startswith(f"torch_segops.{name}: allocating the CSR offsets"), message
            assert "dim_size = 274877906944" in message and "2199023255560 bytes" in message, message
        else:  # the CPU scatter ops (#38) make no offsets: their refusal names the output's bytes
            assert message.startswith(f"torch_segops.{name}: out of memory: dim_size = 274877906944 needs "
                                      "1099511627776 bytes for the output"), message


def test_a_bad_index_is_reported_before_an_output_too_large_to_allocate():
    """The index is read before an output of dim_size = 2**38 is weighed: its error, not the refusal, comes first."""
    r = run_capped("""
        index = torch.tensor([0, 0, -1, 1])
        calls = {"segment_coo": lambda: so.segment_coo(torch.ones(4), index, dim_size=2**38),
                 "scatter": lambda: so.scatter(torch.ones(4), index, 0, dim_size=2**38),
                 "scatter_max": lambda: so.scatter_max(torch.ones(4), index.int(), 0, dim_size=2**38),
                 "scatter_plan": lambda: so.scatter_plan(index, 2**38)}
        for name, call in calls.items():
            try:
                call()
            except (RuntimeError, ValueError) as e:
                print(name, "|", type(e).__name__, "|", e)
            else:
                print(name, "| no error")
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = dict(line.split(" | ", 1) for line in r.stdout.strip().splitlines())
    assert set(lines) == {"segment_coo", "scatter", "scatter_max", "scatter_plan"}, lines
    for name, message in lines.items():
        # segment_coo finds the step down from 0 to -1 first (its index must be sorted)
        what = "must be sorted" if name == "segment_coo" else "must be non-negative, got index[2] = -1"
        assert message.startswith(f"ValueError | torch_segops.{name}: index ") and what in message, message


def test_int32_index_with_dim_size_past_int32_is_not_reported_as_out_of_range():
    """int32 index, dim_size = 2**31 + 10: the bound wrapped, "index must be < dim_size, got ... = 0"."""
    r = run_capped("""
        try:
            so.segment_coo(torch.ones(4), torch.tensor([0, 0, 1, 3], dtype=torch.int32), dim_size=2**31 + 10)
        except (ValueError, RuntimeError) as e:
            print(type(e).__name__, "|", e)
        try:
            so.segment_coo(torch.ones(4), torch.tensor([-1, 0, 1, 3], dtype=torch.int32), dim_size=2**31 + 10)
        except (ValueError, RuntimeError) as e:
            print(type(e).__name__, "|", e)
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    valid, negative = r.stdout.strip().splitlines()
    # a valid index gets as far as allocating the 2**31 + 11 offsets (which the capped child cannot)
    assert "must be <" not in valid and valid.startswith("RuntimeError | torch_segops.segment_coo: allocating"), valid
    assert "dim_size = 2147483658" in valid or "shape (2147483658)" in valid, valid
    # the index is checked before an output this large is allocated: its error comes first
    assert "ValueError | torch_segops.segment_coo: index must be non-negative, got index[..., 0] = -1" in negative, \
        negative


# ---- Low 4: scatter reports the caller's positions -----------------------------------------------------------

@pytest.mark.parametrize("call,where", [
    (lambda: so.scatter(torch.ones(6), torch.tensor([9, 0, 1, 1, 2, 3]), 0, dim_size=4), r"index\[0\] = 9"),
    (lambda: so.scatter(torch.ones(6), torch.tensor([0, 1, 1, 2, 3, -2]), 0), r"non-negative, got index\[5\] = -2"),
    (lambda: so.scatter(torch.ones(3, 2), torch.tensor([[0, 1], [5, 0], [1, 1]]), 0, dim_size=3),
     r"index\[1, 0\] = 5"),
    (lambda: so.scatter_max(torch.ones(2, 3), torch.tensor([[2, 0, 7]]), 1, dim_size=3), r"index\[0, 2\] = 7"),
    (lambda: so.scatter_plan(torch.tensor([3, 0, 1, 2]), 3), r"index\[0\] = 3"),
], ids=["1d", "negative", "full_index", "dim1", "scatter_plan"])
def test_scatter_reports_the_position_in_the_callers_index(call, where):
    with pytest.raises(ValueError, match=where):
        call()


def test_scatter_reports_the_callers_position_in_torchscript():
    with pytest.raises(Exception, match=r"index\[0\] = 9"):
        torch.jit.script(so.scatter)(torch.ones(6), torch.tensor([9, 0, 1, 1, 2, 3]), 0, None, 4)


# ---- Low 5: gather_csr with an out of too few dims ----------------------------------------------------------

def test_gather_csr_out_with_too_few_dims_names_out_not_size():
    """It said "size must be a non-negative int, got -1" although no size was passed."""
    src, indptr = torch.ones(2, 2), torch.tensor([[0, 1, 2], [0, 2, 2]])
    with pytest.raises(ValueError, match="out has 1 dims, expected src.dim") as info:
        so.gather_csr(src, indptr, out=torch.empty(4))
    assert "-1" not in str(info.value)


# ---- Low 6: argument types -----------------------------------------------------------------------------------

@pytest.mark.parametrize("np_int", [np.int64, np.int32, np.uint8])
def test_numpy_integers_are_accepted_as_sizes_and_dim(np_int):
    src, index = torch.randn(5, 2), torch.tensor([0, 0, 1, 3, 3])
    R.assert_equal(so.scatter(src, index, np_int(0), dim_size=np_int(5)), so.scatter(src, index, 0, dim_size=5), "scatter")
    R.assert_equal(so.segment_coo(src, index, dim_size=np_int(6)), so.segment_coo(src, index, dim_size=6), "segment_coo")
    plan = so.scatter_plan(index, np_int(4))
    assert plan.indptr.shape == (5,)
    R.assert_equal(so.gather_csr(src[:2], torch.tensor([0, 2, 5]), size=np_int(7)),
                   so.gather_csr(src[:2], torch.tensor([0, 2, 5]), size=7), "gather_csr")


@pytest.mark.parametrize("call,match", [
    (lambda: so.scatter(torch.ones(4), torch.zeros(4, dtype=torch.long), 0, dim_size=True), "dim_size.*bool"),
    (lambda: so.segment_coo(torch.ones(4), torch.zeros(4, dtype=torch.long), dim_size=False), "dim_size.*bool"),
    (lambda: so.gather_csr(torch.ones(2), torch.tensor([0, 1, 2]), size=True), "size.*bool"),
    (lambda: so.scatter_plan(torch.zeros(4, dtype=torch.long), True), "dim_size.*bool"),
    (lambda: so.scatter(torch.ones(4), torch.zeros(4, dtype=torch.long), 0.0), "dim must be an int, got 0.0"),
    (lambda: so.scatter(torch.ones(4), torch.zeros(4, dtype=torch.long), None), "dim must be an int, got None"),
    (lambda: so.scatter(torch.ones(4), torch.zeros(4, dtype=torch.long), 0, dim_size=2.0), "dim_size"),
    (lambda: so.scatter(torch.ones(4), torch.zeros(4, dtype=torch.long), 0,
                        plan=(torch.arange(4), torch.tensor([0, 4]))), "plan must be a ScatterPlan"),
], ids=["scatter_bool", "coo_bool", "gather_bool", "plan_bool", "dim_float", "dim_none", "dim_size_float",
        "plan_tuple"])
def test_bool_float_and_none_arguments_and_tuple_plans_are_refused(call, match):
    with pytest.raises(TypeError, match=match):
        call()


def test_scripted_out_dtype_errors_name_the_dtypes():
    """TorchScript formats a dtype as a number: "dtype 6, expected 7"."""
    src, indptr = torch.randn(4, 2), torch.tensor([0, 2, 4])
    with pytest.raises(Exception, match="torch.float64, expected torch.float32"):
        torch.jit.script(so.segment_sum_csr)(src, indptr, torch.empty(2, 2, dtype=torch.float64))
    with pytest.raises(Exception, match="torch.int32, expected torch.float32"):
        torch.jit.script(so.segment_coo)(src, torch.tensor([0, 0, 1, 1]), torch.empty(2, 2, dtype=torch.int32))


# ---- Low 7: byte counts in allocation messages ----------------------------------------------------------------

def test_allocation_message_byte_counts_do_not_overflow():
    """size=2**62 said "0 bytes", 2**63 - 1 "-4 bytes": the count is now computed in floating point."""
    cases = {2**62: "1.84e+19 bytes", 2**63 - 1: "3.69e+19 bytes", 2**40: "4398046511104 bytes"}
    r = run_capped(f"""
        for size in {list(cases)}:
            try:
                so.gather_csr(torch.ones(2), torch.tensor([0, 1, 2]), size=size)
            except RuntimeError as e:
                print(e)
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    for size, bytes_ in cases.items():
        assert f"allocating out of shape ({size}), float32, {bytes_}, on cpu failed" in r.stdout, r.stdout


# ---- Low 9: an empty src still checks the index -----------------------------------------------------------------

@pytest.mark.parametrize("src,index,dim,kwargs,error,match", [
    (torch.ones(0), torch.zeros(0), 0, {}, TypeError, "index must be int64 or int32, got torch.float32"),
    (torch.ones(0, 3), torch.tensor([0.5, 1.0, 2.0]), 1, {}, TypeError, "index must be int64 or int32"),
    (torch.ones(0, 3), torch.tensor([0, -1, 2]), 1, {}, ValueError, r"non-negative, got index\[1\] = -1"),
    (torch.ones(0, 3), torch.tensor([0, 4, 2]), 1, {"dim_size": 3}, ValueError, r"< dim_size = 3, got index\[1\] = 4"),
], ids=["float_1d", "float_broadcast", "negative", "past_dim_size"])
def test_empty_src_still_checks_the_index(src, index, dim, kwargs, error, match):
    with pytest.raises(error, match=match):
        so.scatter(src, index, dim, **kwargs)


# ---- Low 10: no build paths in the library ----------------------------------------------------------------------

def test_built_library_contains_no_absolute_build_paths():
    """__FILE__ in torch's headers and in our sources put this machine's paths into _C.so; CMakeLists.txt
    now maps them for every build (it was done only by the conda recipe)."""
    data = Path(so.build_info()["library"]).read_bytes()
    torch_dir = Path(torch.__file__).resolve().parent
    for path in {str(ROOT), str(torch_dir), str(torch_dir.parent), os.path.realpath(ROOT)}:
        assert path.encode() not in data, f"{path} is embedded in {so.build_info()['library']}"
    # the paths are still there, mapped: torch's header names and ours
    assert b"torch/include/torch/csrc/stable/" in data


# ---- Low 11: out= sharing memory with src through another storage ----------------------------------------------

def test_out_overlapping_src_through_another_storage_gives_the_right_result():
    """Two torch.from_numpy views of one array are two storages over one buffer: the in-place path wrote
    rows of out that it had still to read from src (torch's index_select(out=) does the same)."""
    base = np.arange(12, dtype=np.float32)
    src, out = torch.from_numpy(base[:6]).view(6, 1)[:3], torch.from_numpy(base[2:8]).view(6, 1)
    indptr = torch.tensor([0, 2, 4, 6])
    expected = so.gather_csr(src.clone(), indptr)
    assert so.gather_csr(src, indptr, out=out) is out
    R.assert_equal(out, expected, "gather_csr")

    base = np.arange(12, dtype=np.float32)
    src, out = torch.from_numpy(base).view(6, 2), torch.from_numpy(base[1:5]).view(2, 2)
    indptr = torch.tensor([0, 3, 6])
    expected = so.segment_sum_csr(src.clone(), indptr)
    so.segment_sum_csr(src, indptr, out=out)
    R.assert_equal(out, expected, "segment_sum_csr")
