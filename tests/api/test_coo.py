"""The COO segment functions (segment_coo, segment_*_coo, gather_coo) against the plain-PyTorch
reference (a counting conversion to CSR offsets, then the loop reference), pytorch_scatter's
documented behaviour (written from its documentation: out= reduces into what out holds; output size
dim_size or max(index) + 1; broadcasting of index), gradients, errors, opcheck and torch.compile."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import reference as R
import torch_segops as so

ERRORS = (TypeError, ValueError, RuntimeError)
REDUCES = ("sum", "add", "mean", "mul", "min", "max")
NAMED = {"sum": so.segment_sum_coo, "add": so.segment_add_coo, "mean": so.segment_mean_coo,
         "min": so.segment_min_coo, "max": so.segment_max_coo,
         # pytorch_scatter has no segment_mul_coo: segment_coo's reduce="mul" stands in
         "mul": lambda src, index, out=None, dim_size=None: so.segment_coo(src, index, out, dim_size, "mul")}


@st.composite
def coo_cases(draw, dtypes=R.ALL_DTYPES):
    """src, a sorted index (leading dims 1 to broadcast, or per batch), dim_size None or >= max + 1."""
    dtype = draw(st.sampled_from(dtypes))
    n_lead = draw(st.integers(0, 2))
    batch = [draw(st.integers(0, 3)) for _ in range(n_lead)]
    lead = [1 if draw(st.booleans()) else b for b in batch]
    n_rows = draw(st.integers(0, 30))
    n_seg = draw(st.integers(1, 8))
    feat = draw(st.sampled_from([(), (1,), (3,), (2, 3), (17,)]))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    index = torch.randint(0, n_seg, (*lead, n_rows), generator=g).sort(-1).values
    index = index.to(draw(st.sampled_from([torch.int64, torch.int32])))
    dim_size = draw(st.sampled_from([None, n_seg, n_seg + 2]))
    layout = draw(st.sampled_from(R.LAYOUTS))
    src = R.make_src([*batch, n_rows, *feat], n_lead, dtype, layout, g, ties=draw(st.booleans()))
    return {"src": src, "index": index, "dim_size": dim_size,
            "desc": f"{dtype} batch={batch} index={tuple(index.shape)} feat={feat} dim_size={dim_size} {layout} seed={seed}"}


def _reference(src, index, dim_size, reduce):
    indptr = R.coo_to_indptr(index, src, dim_size)
    return indptr, R.segment(src, indptr, reduce)


@given(case=coo_cases(), reduce=st.sampled_from(REDUCES))
def test_segment_coo_matches_reference(case, reduce):
    src, index, dim_size = case["src"], case["index"], case["dim_size"]
    if reduce == "mul":
        src = R.near_one(src)
    indptr, (expected, expected_arg) = _reference(src, index, dim_size, reduce)
    got = so.segment_coo(src, index, dim_size=dim_size, reduce=reduce)
    R.assert_reduction_close(got, expected, src, indptr, reduce, what=f"segment_coo {reduce} {case['desc']}")
    named = NAMED[reduce](src, index, dim_size=dim_size)
    if reduce in ("min", "max"):
        R.assert_equal(named[0], expected, f"values {case['desc']}")
        R.assert_equal(named[1], expected_arg, f"arg {case['desc']}")
    else:
        R.assert_reduction_close(named, expected, src, indptr, reduce, what=case["desc"])


@given(case=coo_cases())
def test_gather_coo_matches_reference(case):
    index = case["index"]
    dim = index.dim() - 1
    n_seg = int(index.max()) + 1 if index.numel() else 0
    shape = list(case["src"].shape)
    shape[dim] = n_seg + 1
    src = R.make_values(shape, case["src"].dtype, torch.Generator().manual_seed(1))
    R.assert_equal(so.gather_coo(src, index), R.gather_coo(src, index), f"gather_coo {case['desc']}")


def test_documented_example_broadcasts_index():
    """pytorch_scatter's documentation example: src (10, 6, 64), index [[0, 0, 1, 1, 1, 2]] (broadcast
    over the first and last dims) -> (10, 3, 64)."""
    src = torch.randn(10, 6, 64)
    index = torch.tensor([0, 0, 1, 1, 1, 2]).view(1, -1)
    out = so.segment_coo(src, index, reduce="sum")
    assert out.shape == (10, 3, 64)
    expected = torch.stack([src[:, :2].sum(1), src[:, 2:5].sum(1), src[:, 5:].sum(1)], 1)
    torch.testing.assert_close(out, expected)
    assert so.gather_coo(out, index).shape == (10, 6, 64)


def test_output_size_is_dim_size_or_max_plus_one():
    src = torch.ones(5, 2)
    index = torch.tensor([0, 0, 2, 2, 2])
    assert so.segment_coo(src, index).tolist() == [[2, 2], [0, 0], [3, 3]]
    assert so.segment_coo(src, index, dim_size=5).tolist() == [[2, 2], [0, 0], [3, 3], [0, 0], [0, 0]]
    assert so.segment_coo(src[:0], index[:0]).shape == (0, 2)
    values, arg = so.segment_max_coo(src, index, dim_size=4)
    assert arg.tolist() == [[0, 0], [5, 5], [2, 2], [5, 5]], "ties: first position; empty: src.size(dim)"


def test_a_size_one_last_dim_broadcasts():
    src = torch.arange(6.0).view(3, 2)
    assert so.segment_coo(src, torch.tensor([1]), reduce="sum").tolist() == [[0, 0], [6, 9]]


@pytest.mark.parametrize("reduce", ["sum", "mean", "mul", "min", "max"])
def test_zero_elements(reduce):
    """pytorch_scatter: src (0, 0, 0, 16), an empty index and dim_size 0 give (0, 0, 0, 16); backward works."""
    x = torch.randn(0, 0, 0, 16, requires_grad=True)
    out = so.segment_coo(x, torch.tensor([], dtype=torch.long), dim_size=0, reduce=reduce)
    assert out.shape == (0, 0, 0, 16)
    out.backward(torch.randn_like(out))
    assert x.grad.shape == x.shape


# ---- out=: reduced into what out holds ----------------------------------------------------------

def test_out_sum_accumulates():
    src = torch.tensor([1.0, 2.0, 3.0, 4.0])
    index = torch.tensor([0, 0, 2, 2])
    out = R.reduce_into(so.segment_coo, src, index, [10.0, 20.0, 30.0], [13.0, 20.0, 37.0])
    so.segment_add_coo(src, index, out=out)  # again: accumulates again
    assert out.tolist() == [16.0, 20.0, 44.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int64], ids=str)
def test_out_mul_multiplies_into_out(dtype):
    src = torch.tensor([2, 3, 0, 5, -4], dtype=dtype)
    index = torch.tensor([0, 0, 2, 2, 3])
    out = R.reduce_into(so.segment_coo, src, index, [10, 20, 30, 2], [60, 20, 0, -8], reduce="mul")
    assert out.dtype == dtype
    assert so.segment_coo(src, index, dim_size=5, reduce="mul").tolist() == [6, 1, 0, -4, 1], "empty: 1"


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_out_mean_divides_out_plus_sum_by_the_count(dtype):
    src = torch.tensor([1, 2, 3, 4, -9], dtype=dtype)
    index = torch.tensor([0, 0, 2, 2, 3])
    out = torch.tensor([10, 20, 30, 2], dtype=dtype)
    so.segment_mean_coo(src, index, out=out)
    if dtype.is_floating_point:
        assert out.tolist() == [6.5, 20.0, 18.5, -7.0]
    else:  # integer division truncates toward zero: -7 / 1, 37 / 2 -> 18
        assert out.tolist() == [6, 20, 18, -7]


@pytest.mark.parametrize("reduce", ["min", "max"])
def test_out_min_max_keep_out_where_it_wins(reduce):
    src = torch.tensor([[1.0], [5.0], [3.0], [3.0], [7.0]])
    index = torch.tensor([0, 0, 1, 1, 3])
    out = torch.tensor([[4.0], [3.0], [-2.0], [9.0]])
    values, arg = NAMED[reduce](src, index, out=out)
    assert values is out
    if reduce == "max":  # seg 0: 5 beats 4; seg 1: 3 ties out's 3 (out wins); seg 2 empty; seg 3: 7 < 9
        assert out.flatten().tolist() == [5.0, 3.0, -2.0, 9.0]
        assert arg.flatten().tolist() == [1, 5, 5, 5]
    else:  # seg 0: 1 beats 4; seg 1: tie kept from out; seg 2 empty; seg 3: 7 beats 9
        assert out.flatten().tolist() == [1.0, 3.0, -2.0, 7.0]
        assert arg.flatten().tolist() == [0, 5, 5, 4]


def test_out_gives_the_output_size_and_gather_overwrites():
    src = torch.ones(3, 2)
    index = torch.tensor([0, 1, 1])
    out = torch.zeros(4, 2)
    so.segment_sum_coo(src, index, out=out)
    assert out.tolist() == [[1, 1], [2, 2], [0, 0], [0, 0]]
    gout = torch.full((3, 2), 7.0)
    vals = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert so.gather_coo(vals, index, out=gout) is gout
    assert gout.tolist() == [[1, 2], [3, 4], [3, 4]]


# ---- gradients ------------------------------------------------------------------------------------

GRAD_INDEX = torch.tensor([[0, 0, 2, 2, 2, 3, 5]])


@pytest.mark.parametrize("reduce", ["sum", "mean", "min", "max"])
def test_gradcheck_segment_coo(reduce):

    x = R.distinct_values((2, 7, 3)).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: so.segment_coo(t, GRAD_INDEX, dim_size=7, reduce=reduce), (x,),
                                     eps=1e-6, atol=1e-8)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_gradcheck_segment_coo_into_out(reduce):

    x = R.distinct_values((2, 7, 3)).requires_grad_()
    base = R.distinct_values((2, 6, 3), seed=1) / 3 + 0.01  # never equal to a value of x (a tie has no derivative)

    def fn(t):
        return so.segment_coo(t, GRAD_INDEX, out=base.clone(), reduce=reduce)

    assert torch.autograd.gradcheck(fn, (x,), eps=1e-6, atol=1e-8)


def test_gradcheck_gather_coo():

    x = R.distinct_values((2, 6, 3)).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: so.gather_coo(t, GRAD_INDEX), (x,), eps=1e-6, atol=1e-8)


# ---- errors ---------------------------------------------------------------------------------------

COO_FNS = {
    "segment_coo": lambda s, i, **k: so.segment_coo(s, i, **k),
    "segment_max_coo": lambda s, i, **k: so.segment_max_coo(s, i, **k),
    "segment_mean_coo": lambda s, i, **k: so.segment_mean_coo(s, i, **k),
}


@pytest.mark.parametrize("fn", list(COO_FNS))
@pytest.mark.parametrize("bad_id,index,kwargs,match", [
    ("unsorted", torch.tensor([0, 2, 1, 3]), {}, "sorted"),
    ("unsorted_in_batch", torch.tensor([[0, 1, 1, 3], [0, 3, 2, 3]]), {}, "sorted"),
    ("negative", torch.tensor([-1, 0, 1, 1]), {}, "non-negative"),
    ("past_dim_size", torch.tensor([0, 1, 1, 4]), {"dim_size": 4}, "dim_size"),
    ("float_index", torch.tensor([0.0, 1.0, 1.0, 2.0]), {}, "index"),
    ("zero_dim_index", torch.tensor(1), {}, "index"),
    ("too_many_dims", torch.zeros(1, 1, 4, dtype=torch.long), {}, "index"),
    ("wrong_length", torch.tensor([0, 1, 2]), {}, "index"),
    ("negative_dim_size", torch.tensor([0, 1, 1, 2]), {"dim_size": -2}, "dim_size"),
    ("out_dims", torch.tensor([0, 1, 1, 2]), {"out": torch.zeros(3)}, "out"),
    ("out_dtype", torch.tensor([0, 1, 1, 2]), {"out": torch.zeros(3, 2, dtype=torch.float64)}, "out"),
    ("out_vs_dim_size", torch.tensor([0, 1, 1, 2]), {"out": torch.zeros(3, 2), "dim_size": 5}, "dim_size"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_input(fn, bad_id, index, kwargs, match):
    src = torch.randn(4, 2) if bad_id != "unsorted_in_batch" else torch.randn(2, 4)
    with pytest.raises(ERRORS, match=match):
        COO_FNS[fn](src, index, **kwargs)


def test_gather_coo_bad_input():
    with pytest.raises(ERRORS, match="index"):
        so.gather_coo(torch.randn(3, 2), torch.tensor([0, 2, 3]))  # 3 >= src.size(0)
    with pytest.raises(ERRORS, match="sorted"):
        so.gather_coo(torch.randn(3, 2), torch.tensor([0, 2, 1]))
    with pytest.raises(ERRORS, match="out"):
        so.gather_coo(torch.randn(3, 2), torch.tensor([0, 2, 2]), out=torch.zeros(4, 2))


def test_error_leaves_out_untouched():
    out = torch.full((3, 2), 7.0)
    with pytest.raises(ERRORS, match="sorted"):
        so.segment_sum_coo(torch.randn(4, 2), torch.tensor([0, 2, 1, 2]), out=out)
    assert bool((out == 7.0).all())


# ---- opcheck and torch.compile --------------------------------------------------------------------

@pytest.mark.parametrize("size", [6, 9, -1])
@pytest.mark.parametrize("index", [torch.tensor([0, 0, 2, 2, 2, 5]), torch.tensor([[0, 1, 1], [2, 2, 5]]).int(),
                                   torch.zeros(0, dtype=torch.long)], ids=["1d", "2d_int32", "empty"])
def test_opcheck_index_to_indptr(index, size):
    if index.numel() == 0 and size == -1:
        size = 0
    torch.library.opcheck(torch.ops.torch_segops.index_to_indptr.default, (index, size, True))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("dim_size", [7, None], ids=["dim_size", "from_index"])
@pytest.mark.parametrize("fn", ["segment_coo_sum", "segment_coo_mean", "segment_coo_mul", "segment_max_coo",
                                "gather_coo"])
def test_compile_fullgraph(fn, dim_size, backend):
    calls = {
        "segment_coo_mul": lambda s, i: so.segment_coo(s * 2, i, dim_size=dim_size, reduce="mul"),
        "segment_coo_sum": lambda s, i: so.segment_coo(s * 2, i, dim_size=dim_size),
        "segment_coo_mean": lambda s, i: so.segment_coo(s * 2, i, dim_size=dim_size, reduce="mean"),
        "segment_max_coo": lambda s, i: so.segment_max_coo(s * 2, i, dim_size=dim_size)[0],
        "gather_coo": lambda s, i: so.gather_coo(s * 2, i),
    }
    R.compile_and_compare(calls[fn], (torch.randn(2, 7, 3, dtype=torch.float64), GRAD_INDEX), backend)


# ---- the native index-to-offsets pass (cpu/coo_cpu.cpp) ---------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("lead", [(), (3,), (2, 2)], ids=["1d", "batched", "two_lead_dims"])
@pytest.mark.parametrize("n,targets,extra", [(0, 0, 0), (0, 0, 3), (1, 1, 0), (200_000, 500, 7), (5000, 20_000, 0)],
                         ids=["empty", "empty_dim_size_3", "one", "long_rows", "many_empty_targets"])
def test_index_to_indptr_matches_counting(dtype, lead, n, targets, extra):
    g = torch.Generator().manual_seed(n + targets)
    index = torch.randint(0, max(targets, 1), (*lead, n), generator=g).sort(-1).values.to(dtype)
    src = torch.zeros(*lead, n)
    for size in (targets + extra, -1):
        expected = R.coo_to_indptr(index, src, None if size == -1 else size)
        actual = torch.ops.torch_segops.index_to_indptr(index, size, True)
        assert actual.dtype == torch.int64
        R.assert_equal(actual, expected, f"size {size}")


def test_index_to_indptr_dim_size_zero_and_unsorted_without_check():
    assert torch.ops.torch_segops.index_to_indptr(torch.zeros(0, dtype=torch.long), 0, True).tolist() == [0]
    # check_sorted=False is a promise; an unsorted index still gets the true counts (entries < i)
    unsorted = torch.tensor([[3, 0, 2, 0], [1, 1, 0, 2]])
    R.assert_equal(torch.ops.torch_segops.index_to_indptr(unsorted, 5, False),
                   R.coo_to_indptr(unsorted.sort(-1).values, torch.zeros(2, 4), 5), "unsorted rows")


@pytest.mark.parametrize("bad,size,message", [
    ([[0, 1, 1], [2, 1, 3]], 4, r"index\[..., 1\] = 1 < index\[..., 0\] = 2 \(in row 1 of the flattened"),
    ([[0, 1, 1], [2, 3, -1]], -1, r"sorted .*index\[..., 2\] = -1 < index\[..., 1\] = 3 \(in row 1"),
    ([[0, 1, 1], [-2, 3, 3]], 4, r"non-negative, got index\[..., 0\] = -2 \(row 1\)"),
    ([[0, 1, 9], [0, 3, 5]], 4, r"< dim_size = 4, got index\[..., 2\] = 9 \(row 0\)"),
], ids=["unsorted_in_row_1", "decrease_before_negative", "negative", "past_dim_size"])
def test_segment_coo_names_the_first_bad_position(bad, size, message):
    index = torch.tensor(bad)
    for dtype in (torch.int64, torch.int32):
        with pytest.raises(ValueError, match="torch_segops.segment_coo: index must .*" + message):
            so.segment_coo(torch.ones(2, 3), index.to(dtype), dim_size=None if size == -1 else size)


def test_dim_size_read_from_an_index_holding_the_int64_maximum_is_refused():
    """dim_size = max(index) + 1 does not exist for an index holding the int64 maximum: a ValueError naming index and
    dim_size (it overflowed into dim_size = -2**63 once), from every function that reads the size from the index."""
    big = torch.tensor([0, 2**63 - 1])
    calls = {"segment_coo": lambda: so.segment_coo(torch.ones(2), big),
             "scatter": lambda: so.scatter(torch.ones(2), big, reduce="max"),
             "scatter_plan": lambda: so.scatter_plan(big)}
    for fn, call in calls.items():
        with pytest.raises(ValueError, match=rf"torch_segops.{fn}: index must hold values below 9223372036854775807 "
                                             r"\(the int64 maximum\) when dim_size is not given: dim_size = max\(index\)"):
            call()
    with pytest.raises(RuntimeError, match="index must hold values below 9223372036854775807"):
        torch.ops.torch_segops.index_to_indptr(big, -1, False)


def test_gather_coo_of_unsorted_and_out_of_range_index_names_the_position():
    with pytest.raises(ValueError, match=r"gather_coo: index must be sorted .*index\[..., 2\] = 0"):
        so.gather_coo(torch.randn(4, 2), torch.tensor([0, 3, 0, 3]))
    with pytest.raises(ValueError, match=r"gather_coo: index must be < dim_size = 4, got index\[..., 3\] = 4"):
        so.gather_coo(torch.randn(4, 2), torch.tensor([0, 1, 1, 4]))


# ---- gather_coo's one pass (gather_index) --------------------------------------------------------------

@pytest.mark.parametrize("dtype", R.ALL_DTYPES)
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_gather_coo_one_pass_matches_reference(dtype, index_dtype):
    g = torch.Generator().manual_seed(4)
    src = R.make_values((3, 40, 5), dtype, g)
    for index in (torch.randint(0, 40, (3, 90), generator=g), torch.randint(0, 40, (1, 90), generator=g),
                  torch.zeros(3, 0, dtype=torch.long)):
        index = index.sort(-1).values.to(index_dtype)
        R.assert_equal(so.gather_coo(src, index), R.gather_coo(src, index), f"{dtype} {list(index.shape)}")
    flat = torch.randint(0, 40, (70,), generator=g).sort().values.to(index_dtype)
    R.assert_equal(so.gather_coo(src[0], flat), R.gather_coo(src[0], flat), "1-d index")


def test_gather_index_opcheck_and_gradients():
    for index, check_sorted in ((torch.tensor([0, 0, 3, 9]), True), (torch.tensor([9, 0, 3, 0]), False)):
        torch.library.opcheck(torch.ops.torch_segops.gather_index.default, (torch.randn(10, 3), index, check_sorted))
    x = torch.randn(2, 12, 3, dtype=torch.float64, requires_grad=True)
    index = torch.tensor([[0, 0, 4, 4, 11], [1, 2, 2, 2, 3]])
    assert torch.autograd.gradcheck(lambda t: so.gather_coo(t, index), (x,))
    assert torch.autograd.gradgradcheck(lambda t: so.gather_coo(t, index), (x,))


def test_gather_index_fake_kernel_refuses_mixed_devices():
    """A meta index among CPU tensors sent the call to the shape-only kernel, which returned uninitialised memory."""
    with pytest.raises(RuntimeError, match="^torch_segops.gather_index: index is on meta but src is on cpu"):
        torch.ops.torch_segops.gather_index(torch.randn(4, 2), torch.zeros(3, dtype=torch.long, device="meta"), False)
