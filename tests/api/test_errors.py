"""Bad input raises a clear exception naming the offending argument, for every op.

Device mismatch needs a second real device: it is tested in test_cuda.py (and skipped here with a
reason when no GPU is present); `out` on the wrong device is tested here with the meta device.
"""

from __future__ import annotations

import re

import pytest
import torch

import reference as R
import torch_segops as so

ERRORS = (TypeError, ValueError, RuntimeError)
_ops = torch.ops.torch_segops

# Every reduction-style entry point: (name, fn(src, indptr)), all reducing along dim indptr.dim() - 1.
REDUCERS = {
    **R.public_reducers(),
    **{f"op_segment_{r}": getattr(_ops, f"segment_{r}") for r in ("sum", "mean", "min", "max", "logsumexp", "mul")},
    "op_segment_softmax": _ops.segment_softmax,
}
# (mean of an integer src is pytorch_scatter's truncating integer mean, done by the public wrappers: the
# op itself takes floats only)
FLOAT_ONLY = {"segment_logsumexp_csr", "segment_softmax_csr",
              "op_segment_mean", "op_segment_logsumexp", "op_segment_softmax"}

# gather: src has one row per segment; fn(src, indptr)
GATHERS = {
    "gather_csr": so.gather_csr,
    "gather_csr_size": lambda s, i: so.gather_csr(s, i, size=10),
    "op_gather_csr": lambda s, i: _ops.gather_csr(s, i, -1),
}


def src6():
    return torch.randn(6, 2)


# The function each entry point's errors name: a public function itself; a registered op its family (the kernels
# do not know which public function called them).
def named(fn: str) -> str:
    if fn.startswith("segment_csr_"):
        return "segment_csr"
    if fn in ("op_segment_softmax", "segment_softmax_csr"):
        return "segment_softmax_csr"
    if fn.startswith("op_segment_"):
        return "segment_csr"
    if fn.startswith("gather_csr") or fn == "op_gather_csr":
        return "gather_csr"
    return fn


def whole(fn: str, message: str) -> str:
    """A pattern matching exactly the message "torch_segops.<named(fn)>: <message>"."""
    return "^" + re.escape(f"torch_segops.{named(fn)}: {message}") + "$"


ALL_DTYPES = "torch.float16, torch.bfloat16, torch.float32, torch.float64"


# (id, indptr, message) for bad indptr against src6() (reduction along dim 0 of a (6, 2) src)
BAD_INDPTR = [
    ("float_dtype", torch.tensor([0.0, 2.0, 6.0]), "indptr must be int64 or int32, got torch.float32"),
    ("int16_dtype", torch.tensor([0, 2, 6], dtype=torch.int16), "indptr must be int64 or int32, got torch.int16"),
    ("bool_dtype", torch.tensor([False, True]), "indptr must be int64 or int32, got torch.bool"),
    ("zero_dim", torch.tensor(3), "indptr must have at least one dimension, got a 0-dim tensor"),
    ("non_monotonic", torch.tensor([0, 4, 2, 6]), "indptr must be non-decreasing, got indptr[2] = 2 < indptr[1] = 4"),
    ("non_monotonic_at_end", torch.tensor([0, 2, 6, 5]),
     "indptr must be non-decreasing, got indptr[3] = 5 < indptr[2] = 6"),
    ("negative_start", torch.tensor([-1, 2, 6]), "indptr must start at a non-negative offset, got indptr[0] = -1"),
    ("end_past_src", torch.tensor([0, 2, 7]), "indptr[..., -1] must be <= src.size(dim) = 6, got indptr[2] = 7"),
    ("end_far_past_src", torch.tensor([0, 2, 1 << 40]),
     "indptr[..., -1] must be <= src.size(dim) = 6, got indptr[2] = 1099511627776"),
    ("more_dims_than_src", torch.tensor([[[0, 2, 6]]]),
     "indptr has 3 dims but src only 2; the reduction runs along dim indptr.dim() - 1 of src"),
    ("leading_dim_mismatch", torch.tensor([[0, 1], [0, 2], [0, 1]]),  # src (6, 2): dim0 6 vs 3
     "indptr.size(0) = 3 does not match src.size(0) = 6 (must be equal or 1 to broadcast)"),
]


@pytest.mark.parametrize("bad_id,indptr,message", BAD_INDPTR, ids=[b[0] for b in BAD_INDPTR])
@pytest.mark.parametrize("fn", list(REDUCERS), ids=list(REDUCERS))
def test_bad_indptr(fn, bad_id, indptr, message):
    with pytest.raises(ERRORS, match=whole(fn, message)):
        REDUCERS[fn](src6(), indptr)


def test_non_monotonic_in_a_later_batch_row():
    src = torch.randn(3, 6)
    indptr = torch.tensor([[0, 2, 6], [0, 2, 6], [0, 3, 1]])
    message = "indptr must be non-decreasing, got indptr[row 2][2] = 1 < indptr[row 2][1] = 3"
    for name, fn in REDUCERS.items():
        with pytest.raises(ERRORS, match=whole(name, message)):
            fn(src, indptr)
    with pytest.raises(ERRORS, match=whole("gather_csr", message)):
        so.gather_csr(torch.randn(3, 2), indptr)


def test_batch_rows_checked_against_their_own_end():
    src = torch.randn(2, 6)
    indptr = torch.tensor([[0, 2, 6], [0, 3, 7]])  # second row ends past src.size(1)
    for name, fn in REDUCERS.items():
        with pytest.raises(ERRORS, match=whole(name, "indptr[..., -1] must be <= src.size(dim) = 6, got "
                                                     "indptr[row 1][2] = 7")):
            fn(src, indptr)


@pytest.mark.parametrize("fn", [f for f in REDUCERS if f.startswith("op_")])
def test_registered_ops_need_one_offset(fn):
    """The registered ops want at least one offset; the public wrappers read an empty indptr as zero
    segments, like pytorch_scatter (tested in test_ops.py)."""
    with pytest.raises(ERRORS, match=whole(fn, "indptr must hold at least one offset (its last dim is empty)")):
        REDUCERS[fn](src6(), torch.zeros(0, dtype=torch.long))


@pytest.mark.parametrize("bad_id,indptr,message", [
    ("float_dtype", torch.tensor([0.0, 2.0, 6.0]), "indptr must be int64 or int32, got torch.float32"),
    ("zero_dim", torch.tensor(2), "indptr must have at least one dimension, got a 0-dim tensor"),
    ("non_monotonic", torch.tensor([0, 4, 2]), "indptr must be non-decreasing, got indptr[2] = 2 < indptr[1] = 4"),
    ("negative_start", torch.tensor([-2, 2, 6]), "indptr must start at a non-negative offset, got indptr[0] = -2"),
    ("more_dims_than_src", torch.tensor([[[0, 2, 6]]]),
     "indptr has 3 dims but src only 2; the reduction runs along dim indptr.dim() - 1 of src"),
], ids=lambda v: v if isinstance(v, str) and " " not in v else None)
@pytest.mark.parametrize("fn", list(GATHERS), ids=list(GATHERS))
def test_gather_bad_indptr(fn, bad_id, indptr, message):
    with pytest.raises(ERRORS, match=whole(fn, message)):
        GATHERS[fn](torch.randn(2, 3), indptr)


@pytest.mark.parametrize("fn", list(GATHERS), ids=list(GATHERS))
@pytest.mark.parametrize("n_src_rows", [2, 4])
def test_gather_src_rows_must_equal_segments(fn, n_src_rows):
    indptr = torch.tensor([0, 2, 5, 6])  # 3 segments
    message = f"src.size(dim) must equal the number of segments indptr.size(-1) - 1 = 3, got {n_src_rows}"
    with pytest.raises(ERRORS, match=whole(fn, message)):
        GATHERS[fn](torch.randn(n_src_rows, 2), indptr)


def test_gather_leading_dim_mismatch():
    with pytest.raises(ERRORS, match=whole("gather_csr", "indptr.size(0) = 2 does not match src.size(0) = 3 "
                                                         "(must be equal or 1 to broadcast)")):
        so.gather_csr(torch.randn(3, 2, 4), torch.tensor([[0, 1, 2], [0, 2, 2]]))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.bool, torch.int8, torch.uint8, torch.int16], ids=str)
@pytest.mark.parametrize("fn", list(REDUCERS) + list(GATHERS))
def test_unsupported_src_dtype(fn, dtype):
    call = REDUCERS.get(fn) or GATHERS[fn]
    rows = 2 if fn in GATHERS else 6
    src = torch.ones(rows, 2).to(dtype)
    supported = f"{ALL_DTYPES}, torch.int32, torch.int64"
    # the public means sum integers then divide (the sum names its dtypes); a complex src reaches the mean kernel
    if fn in FLOAT_ONLY or (fn in ("segment_csr_mean", "segment_mean_csr") and dtype.is_complex):
        supported = f"{ALL_DTYPES} (integer dtypes only for sum, mul, min, max and gather)"
    with pytest.raises(ERRORS, match=whole(fn, f"src has unsupported dtype {dtype}; supported: {supported}")):
        call(src, torch.tensor([0, 2, 6]))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("fn", sorted(FLOAT_ONLY))
def test_integer_src_for_float_only_ops(fn, dtype):
    message = (f"src has unsupported dtype {dtype}; supported: {ALL_DTYPES} (integer dtypes only for sum, mul, min, "
               "max and gather)")
    with pytest.raises(ERRORS, match=whole(fn, message)):
        REDUCERS[fn](torch.ones(6, 2, dtype=dtype), torch.tensor([0, 2, 6]))


@pytest.mark.parametrize("reduce", ["prod", "SUM", "MUL", "", "logsumexp"])
def test_unknown_reduce(reduce):
    # logsumexp exists as a registered op reduce but not as a segment_csr reduce
    message = f"reduce must be one of 'sum', 'add', 'mean', 'mul', 'min', 'max', got '{reduce}'"
    with pytest.raises(ValueError, match=whole("segment_csr", message)):
        so.segment_csr(src6(), torch.tensor([0, 2, 6]), reduce=reduce)


def test_non_tensor_arguments():
    with pytest.raises(TypeError, match=whole("segment_csr", "src must be a torch.Tensor, got list")):
        so.segment_csr([1.0, 2.0], torch.tensor([0, 2]))
    with pytest.raises(TypeError, match=whole("segment_csr", "indptr must be a torch.Tensor, got list")):
        so.segment_csr(torch.randn(2), [0, 2])
    with pytest.raises(TypeError, match=whole("gather_csr", "indptr must be a torch.Tensor, got list")):
        so.gather_csr(torch.randn(1), [0, 2])


# ---- out= -----------------------------------------------------------------------------------------

OUT_FNS = {
    "segment_csr_sum": lambda s, i, o: so.segment_csr(s, i, out=o, reduce="sum"),
    "segment_csr_mean": lambda s, i, o: so.segment_csr(s, i, out=o, reduce="mean"),
    "segment_csr_max": lambda s, i, o: so.segment_csr(s, i, out=o, reduce="max"),
    "segment_csr_mul": lambda s, i, o: so.segment_csr(s, i, out=o, reduce="mul"),
    "segment_sum_csr": lambda s, i, o: so.segment_sum_csr(s, i, out=o),
    "segment_mean_csr": lambda s, i, o: so.segment_mean_csr(s, i, out=o),
    "segment_min_csr": lambda s, i, o: so.segment_min_csr(s, i, out=o),
    "segment_max_csr": lambda s, i, o: so.segment_max_csr(s, i, out=o),
}
# src (6, 2) with indptr [0, 2, 6]: result (2, 2) float32
BAD_OUT = [
    ("shape_rows", lambda: torch.zeros(3, 2), ValueError, "out has shape [3, 2], expected [2, 2]"),
    ("shape_features", lambda: torch.zeros(2, 3), ValueError, "out has shape [2, 3], expected [2, 2]"),
    ("shape_dims", lambda: torch.zeros(2, 2, 1), ValueError, "out has shape [2, 2, 1], expected [2, 2]"),
    ("dtype_float64", lambda: torch.zeros(2, 2, dtype=torch.float64), TypeError,
     "out has dtype torch.float64, expected torch.float32"),
    ("dtype_int", lambda: torch.zeros(2, 2, dtype=torch.int64), TypeError,
     "out has dtype torch.int64, expected torch.float32"),
    ("device_meta", lambda: torch.zeros(2, 2, device="meta"), ValueError, "out is on meta, expected cpu"),
]


@pytest.mark.parametrize("bad_id,make_out,kind,message", BAD_OUT, ids=[b[0] for b in BAD_OUT])
@pytest.mark.parametrize("fn", list(OUT_FNS))
def test_bad_out(fn, bad_id, make_out, kind, message):
    out = make_out()
    with pytest.raises(kind, match=whole(fn, message)):
        OUT_FNS[fn](src6(), torch.tensor([0, 2, 6]), out)


@pytest.mark.parametrize("bad_id,make_out,message", [
    ("shape_features", lambda: torch.zeros(6, 3), "out has shape [6, 3], expected [6, 2]"),
    ("shape_dims", lambda: torch.zeros(6), "out has 1 dims, expected src.dim() = 2"),
    ("dtype", lambda: torch.zeros(6, 2, dtype=torch.float64), "out has dtype torch.float64, expected torch.float32"),
    ("device_meta", lambda: torch.zeros(6, 2, device="meta"), "out is on meta, expected cpu"),
], ids=lambda v: v if isinstance(v, str) and " " not in v else None)
def test_gather_bad_out(bad_id, make_out, message):
    with pytest.raises(ERRORS, match=whole("gather_csr", message)):
        so.gather_csr(torch.randn(2, 2), torch.tensor([0, 2, 6]), out=make_out())


def test_gather_bad_size():
    with pytest.raises(ValueError, match=whole("gather_csr", "size must be a non-negative int, got -3")):
        so.gather_csr(torch.randn(2, 2), torch.tensor([0, 2, 6]), size=-3)
    with pytest.raises(ValueError, match=whole("gather_csr", "size=7 disagrees with out.size(dim)=6")):
        so.gather_csr(torch.randn(2, 2), torch.tensor([0, 2, 6]), out=torch.zeros(6, 2), size=7)


def test_error_leaves_out_untouched():
    out = torch.full((2, 2), 7.0)
    with pytest.raises(ERRORS, match=whole("segment_sum_csr", "indptr must be non-decreasing, got indptr[2] = 2 < "
                                                              "indptr[1] = 4")):
        so.segment_sum_csr(src6(), torch.tensor([0, 4, 2]), out=out)
    assert bool((out == 7.0).all())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine (device mismatch needs two devices)")
def test_device_mismatch():
    src = torch.randn(6, 2, device="cuda")
    for fn in REDUCERS.values():
        with pytest.raises(ERRORS, match="indptr"):
            fn(src, torch.tensor([0, 2, 6]))
        with pytest.raises(ERRORS, match="indptr"):
            fn(src.cpu(), torch.tensor([0, 2, 6], device="cuda"))
    for fn in GATHERS.values():
        with pytest.raises(ERRORS, match="indptr"):
            fn(torch.randn(2, 2, device="cuda"), torch.tensor([0, 2, 6]))


def test_check_errors_on_cpu_tensors():
    """CPU ops raise in the call; check_errors() (the CUDA ops' asynchronous check point) then has nothing
    to report, and an error raised on the CPU is not reported a second time there."""
    src = torch.randn(6, 2)
    with pytest.raises(RuntimeError, match=whole("segment_sum_csr", "indptr must be non-decreasing, got indptr[2] = 2 "
                                                                    "< indptr[1] = 4")):
        so.segment_sum_csr(src, torch.tensor([0, 4, 2, 6]))
    assert so.check_errors() is None
    R.assert_equal(so.segment_sum_csr(src, torch.tensor([0, 2, 6])), torch.stack([src[:2].sum(0), src[2:].sum(0)]),
                   "after check_errors")


_OUT_SRC, _OUT_INDPTR = torch.randn(6, 2), torch.tensor([0, 2, 6])
_BAD_OUT_OPS = {
    "reduce-shape": lambda: torch.ops.torch_segops.segment_sum_out(_OUT_SRC, _OUT_INDPTR, torch.empty(3, 2)),
    "reduce-dtype": lambda: torch.ops.torch_segops.segment_mean_out(
        _OUT_SRC, _OUT_INDPTR, torch.empty(2, 2, dtype=torch.float64)),
    "reduce-strided": lambda: torch.ops.torch_segops.segment_logsumexp_out(_OUT_SRC, _OUT_INDPTR, torch.empty(2, 2).t()),
    "mul-shape": lambda: torch.ops.torch_segops.segment_mul_out(_OUT_SRC, _OUT_INDPTR, torch.empty(2, 3)),
    "arg-shape": lambda: torch.ops.torch_segops.segment_max_out(
        _OUT_SRC, _OUT_INDPTR, torch.empty(2, 2), torch.empty(0, dtype=torch.long)),
    "arg-dtype": lambda: torch.ops.torch_segops.segment_min_out(
        _OUT_SRC, _OUT_INDPTR, torch.empty(2, 2), torch.empty(2, 2, dtype=torch.int32)),
    "gather-dims": lambda: torch.ops.torch_segops.gather_csr_out(_OUT_SRC[:2], _OUT_INDPTR, torch.empty(6)),
    "gather-rows": lambda: torch.ops.torch_segops.gather_csr_out(_OUT_SRC[:2], _OUT_INDPTR, torch.empty(5, 2)),
    "gather-width": lambda: torch.ops.torch_segops.gather_csr_out(_OUT_SRC[:2], _OUT_INDPTR, torch.empty(6, 3)),
}


_BAD_OUT_MESSAGES = {
    "reduce-shape": "out has shape [3, 2], expected [2, 2]",
    "reduce-dtype": "out has dtype torch.float64, expected torch.float32",
    "reduce-strided": "out must be contiguous",
    "mul-shape": "out has shape [2, 3], expected [2, 2]",
    "arg-shape": "arg has shape [0], expected [2, 2]",
    "arg-dtype": "arg has dtype torch.int32, expected torch.int64",
    "gather-dims": "out must have as many dims as src (2)",
    "gather-rows": "indptr[..., -1] must be <= out.size(dim) = 5, got indptr[2] = 6",
    "gather-width": "out has shape [6, 3], expected [6, 2]",
}


@pytest.mark.parametrize("case", list(_BAD_OUT_OPS))
def test_out_ops_reject_a_mismatched_output(case):
    """The out= ops, called directly (the wrappers check first): a clear error naming the tensor."""
    family = "gather_csr" if case.startswith("gather") else "segment_csr"
    with pytest.raises(ERRORS, match=whole(family, _BAD_OUT_MESSAGES[case])):
        _BAD_OUT_OPS[case]()
