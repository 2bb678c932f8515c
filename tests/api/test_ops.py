"""Forward correctness of every torch_segops op against the plain-PyTorch reference (tests/reference.py)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import reference as R
import torch_segops as so

FLOAT_REDUCES = ("sum", "add", "mean", "mul", "min", "max")
INT_REDUCES = ("sum", "add", "mean", "mul", "min", "max")
NAMED = {
    "sum": so.segment_sum_csr,
    "add": so.segment_add_csr,
    "mean": so.segment_mean_csr,
    "min": so.segment_min_csr,
    "max": so.segment_max_csr,
    # pytorch_scatter has no segment_mul_csr: segment_csr's reduce="mul" stands in
    "mul": lambda src, indptr, out=None: so.segment_csr(src, indptr, out=out, reduce="mul"),
}


def check_segment(src, indptr, reduce, what=""):
    """segment_csr and the named wrapper against the reference; returns the kernel output. mul takes src
    through R.near_one (no overflow)."""
    if reduce == "mul":
        src = R.near_one(src)
    before = src.clone()
    expected, expected_arg = R.segment(src, indptr, reduce)
    out = so.segment_csr(src, indptr, reduce=reduce)
    assert isinstance(out, torch.Tensor), "segment_csr returns the values only (also for min/max)"
    R.assert_reduction_close(out, expected, src, indptr, reduce, what=f"segment_csr {reduce} {what}")
    named = NAMED[reduce](src, indptr)
    if reduce in ("min", "max"):
        values, arg = named
        R.assert_equal(values, expected, f"segment_{reduce}_csr values {what}")
        R.assert_equal(arg, expected_arg, f"segment_{reduce}_csr arg {what}")
    else:
        R.assert_reduction_close(named, expected, src, indptr, reduce, what=f"segment_{reduce}_csr {what}")
    assert torch.equal(src, before), "src was modified"
    return out


# ---------------------------------------------------------------------------------------------
# The reference itself, against an independent implementation (torch.segment_reduce) where both apply.

@settings(max_examples=30)
@given(case=R.csr_cases(dtypes=(torch.float64,), max_lead_dims=1), reduce=st.sampled_from(["sum", "mean", "min", "max"]))
def test_reference_agrees_with_torch_segment_reduce(case, reduce):
    src, indptr = case["src"], case["indptr"].long()
    assume(src.numel() > 0 and indptr.size(-1) > 1)  # torch.segment_reduce rejects zero-size inputs
    # torch.segment_reduce needs offsets with exactly src's leading dims and fills empty segments
    # with its own identity (inf / nan), so compare on non-empty segments only.
    indptr = indptr.expand(*src.shape[: indptr.dim() - 1], indptr.size(-1))
    dim = indptr.dim() - 1
    expected, _ = R.segment(src, indptr, reduce)
    got = torch.segment_reduce(src, reduce, offsets=indptr, axis=dim, unsafe=True)
    nonempty = (indptr[..., 1:] > indptr[..., :-1]).reshape(*indptr.shape[:-1], indptr.size(-1) - 1,
                                                               *[1] * (src.dim() - dim - 1))
    nonempty = nonempty.expand_as(expected)
    torch.testing.assert_close(expected[nonempty], got[nonempty], rtol=1e-12, atol=1e-12)
    assert bool((expected[~nonempty] == 0).all())


# ---------------------------------------------------------------------------------------------
# Property tests over random segmentations (every dtype, broadcast indptr, non-contiguous src, ...).

@given(case=R.csr_cases(), data=st.data())
def test_segment_csr_matches_reference(case, data):
    src, indptr = case["src"], case["indptr"]
    reduce = data.draw(st.sampled_from(FLOAT_REDUCES if src.dtype.is_floating_point else INT_REDUCES))
    check_segment(src, indptr, reduce, case["desc"])


@given(case=R.csr_cases(dtypes=R.FLOAT_DTYPES))
def test_segment_logsumexp_matches_reference(case):
    src, indptr = case["src"], case["indptr"]
    expected, _ = R.segment(src, indptr, "logsumexp")
    got = so.segment_logsumexp_csr(src, indptr)
    R.assert_reduction_close(got, expected, src, indptr, "logsumexp", what=f"logsumexp {case['desc']}")


@given(case=R.csr_cases(dtypes=R.FLOAT_DTYPES))
def test_segment_softmax_matches_reference(case):
    src, indptr = case["src"], case["indptr"]
    expected = R.segment_softmax(src, indptr)
    got = so.segment_softmax_csr(src, indptr)
    R.assert_softmax_close(got, expected, src, indptr, what=f"softmax {case['desc']}")


@given(case=R.csr_cases(gather=True))
def test_gather_csr_matches_reference(case):
    src, indptr, size = case["src"], case["indptr"], case["size"]
    expected = R.gather(src, indptr, size)
    got = so.gather_csr(src, indptr, size=size)
    R.assert_equal(got, expected, f"gather_csr {case['desc']}")


@given(case=R.csr_cases(dtypes=(torch.float32, torch.int64)), data=st.data())
def test_int32_indptr_gives_the_same_result(case, data):
    src, indptr = case["src"], case["indptr"].long()
    reduce = data.draw(st.sampled_from(INT_REDUCES))
    a = so.segment_csr(src, indptr, reduce=reduce)
    b = so.segment_csr(src, indptr.int(), reduce=reduce)
    R.assert_equal(b, a, f"int32 vs int64 indptr, {reduce} {case['desc']}")


# ---------------------------------------------------------------------------------------------
# Explicit edge cases (readable versions of what the property tests also draw).

def _edge_cases():
    g = torch.Generator().manual_seed(1)
    yield "all_empty", torch.randn(5, 3, generator=g), torch.tensor([0, 0, 0, 0])
    yield "all_empty_at_end", torch.randn(5, 3, generator=g), torch.tensor([5, 5, 5])
    yield "no_segments", torch.randn(4, 3, generator=g), torch.tensor([2])
    yield "zero_rows", torch.randn(0, 3, generator=g), torch.tensor([0, 0, 0])
    yield "zero_features", torch.randn(6, 0, generator=g), torch.tensor([0, 2, 2, 6])
    yield "zero_batch", torch.randn(0, 6, 2, generator=g), torch.tensor([[0, 2, 6]])
    yield "rows_outside_range", torch.randn(10, 2, generator=g), torch.tensor([3, 4, 4, 7])
    yield "one_huge_segment", torch.randn(50_000, 4, generator=g), torch.tensor([0, 0, 1, 50_000, 50_000])
    yield "1d_src", torch.randn(9, generator=g), torch.tensor([0, 4, 4, 9])
    yield "broadcast_leading_1", torch.randn(4, 9, 3, generator=g), torch.tensor([[0, 2, 2, 9]])
    yield "per_batch_indptr", torch.randn(2, 9, 3, generator=g), torch.tensor([[0, 2, 2, 9], [1, 1, 5, 8]])
    yield "broadcast_middle_dim", torch.randn(2, 3, 7, generator=g), torch.tensor([[[0, 3, 7]], [[2, 2, 5]]])
    yield "2d_features", torch.randn(7, 2, 3, generator=g), torch.tensor([0, 1, 7])
    yield "transposed_src", torch.randn(5, 8, generator=g).t(), torch.tensor([0, 3, 3, 8])
    yield "sliced_src", torch.randn(16, 3, generator=g)[::2], torch.tensor([0, 3, 8])


EDGE = list(_edge_cases())


@pytest.mark.parametrize("dtype", R.ALL_DTYPES, ids=str)
@pytest.mark.parametrize("name,src,indptr", EDGE, ids=[e[0] for e in EDGE])
def test_edge_cases(name, src, indptr, dtype):
    src = (src * 20).to(dtype)
    reduces = FLOAT_REDUCES if dtype.is_floating_point else INT_REDUCES
    for reduce in reduces:
        check_segment(src, indptr, reduce, name)
    if dtype.is_floating_point:
        expected, _ = R.segment(src, indptr, "logsumexp")
        R.assert_reduction_close(so.segment_logsumexp_csr(src, indptr), expected, src, indptr, "logsumexp", what=name)
        R.assert_softmax_close(so.segment_softmax_csr(src, indptr), R.segment_softmax(src, indptr), src, indptr, what=name)


def test_empty_segments_give_zero_and_arg_size():
    src = torch.tensor([[5.0, -1.0], [7.0, 2.0], [3.0, 3.0]])
    indptr = torch.tensor([0, 0, 2, 2, 3, 3])
    for reduce in FLOAT_REDUCES:
        out = so.segment_csr(src, indptr, reduce=reduce)
        assert out.shape == (5, 2)
        assert bool((out[[0, 2, 4]] == (1 if reduce == "mul" else 0)).all()), reduce  # mul: the empty product
    for fn in (so.segment_min_csr, so.segment_max_csr):
        _, arg = fn(src, indptr)
        assert arg.dtype == torch.int64
        assert bool((arg[[0, 2, 4]] == 3).all())
    assert bool((so.segment_logsumexp_csr(src, indptr)[[0, 2, 4]] == 0).all())


def test_min_max_values_and_absolute_arg():
    # rows 0..1 are outside the segments; arg counts from row 0 of src, not from indptr[0]
    src = torch.tensor([[100.0], [-100.0], [4.0], [9.0], [1.0], [9.0], [6.0], [-3.0]])
    indptr = torch.tensor([2, 6, 8])
    vmax, amax = so.segment_max_csr(src, indptr)
    vmin, amin = so.segment_min_csr(src, indptr)
    assert vmax.flatten().tolist() == [9.0, 6.0] and amax.flatten().tolist() == [3, 6]  # tie 9 at 3 and 5 -> 3
    assert vmin.flatten().tolist() == [1.0, -3.0] and amin.flatten().tolist() == [4, 7]


@pytest.mark.parametrize("dtype", R.ALL_DTYPES, ids=str)
def test_ties_go_to_first_position(dtype):
    src = torch.tensor([[2, 1], [2, 1], [0, 1], [2, 1], [0, 0], [0, 0]]).to(dtype)
    indptr = torch.tensor([0, 4, 6])
    vmax, amax = so.segment_max_csr(src, indptr)
    vmin, amin = so.segment_min_csr(src, indptr)
    assert amax.tolist() == [[0, 0], [4, 4]]
    assert amin.tolist() == [[2, 0], [4, 4]]
    assert vmax.tolist() == [[2, 1], [0, 0]] and vmin.tolist() == [[0, 1], [0, 0]]


@pytest.mark.parametrize("reduce", ["min", "max"])
def test_min_max_propagate_nan(reduce):
    src = torch.tensor([[1.0, 1.0], [float("nan"), 5.0], [3.0, float("nan")], [2.0, 0.0]])
    indptr = torch.tensor([0, 3, 4])
    values, arg = NAMED[reduce](src, indptr)
    assert torch.isnan(values[0]).all(), values
    assert arg[0].tolist() == [1, 2], "arg of a NaN result points at the NaN"
    assert values[1].tolist() == [2.0, 0.0] and arg[1].tolist() == [3, 3]
    assert torch.isnan(so.segment_csr(src, indptr, reduce=reduce)[0]).all()


SPECIAL = [float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1.0, -1.0, 3.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("features", [1, 2, 5, 16, 37, 300], ids=lambda f: f"F{f}")
@pytest.mark.parametrize("reduce", ["min", "max"])
def test_min_max_special_values_match_reference(reduce, features, dtype):
    # Random mixes of +-inf, NaN, signed zeros and ties, over feature counts that take every code path
    # (1: row lanes; 2 and 5: scalar feature blocks; 16, 37: vector blocks (of 8 float or 4 double lanes)
    # and scalar tails; 300: more than one feature tile).
    gen = torch.Generator().manual_seed(features)
    src = torch.tensor(SPECIAL, dtype=dtype)[torch.randint(len(SPECIAL), (97, features), generator=gen)]
    indptr = torch.tensor([0, 0, 1, 7, 7, 40, 41, 97])
    values, arg = NAMED[reduce](src, indptr)
    ref_values, ref_arg = R.segment(src, indptr, reduce)
    assert torch.equal(arg, ref_arg), (arg, ref_arg)
    torch.testing.assert_close(values, ref_values, equal_nan=True, rtol=0, atol=0)


def _assert_extremum_is_the_reference(reduce: str, src, indptr):
    """min/max values and arg equal the reference's bitwise (NaN where it has NaN); the arg."""
    values, arg = NAMED[reduce](src, indptr)
    ref_values, ref_arg = R.segment(src, indptr, reduce)
    assert torch.equal(arg, ref_arg), (arg != ref_arg).nonzero()[:5]
    torch.testing.assert_close(values, ref_values, equal_nan=True, rtol=0, atol=0)
    return arg


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("features", [16, 24, 32, 48, 64, 72, 200], ids=lambda f: f"F{f}")
@pytest.mark.parametrize("reduce", ["min", "max"])
@pytest.mark.parametrize("nan", ["none", "first row", "one row"])
def test_min_max_whole_row_blocks_match_reference(reduce, features, dtype, nan):
    # The CPU's whole-row blocks (16, 32 or 64 float features with int16 row lanes; a block that meets a
    # NaN is redone exactly): ties, signed zeros and infinities without NaN, or one NaN in the first row
    # or a later row of one segment; segments from 1 row to longer than a chunk (2048 rows at F=16).
    gen = torch.Generator().manual_seed(features)
    specials = torch.tensor([v for v in SPECIAL if v == v], dtype=dtype)
    lengths = [1, 2, 3, 17, 40, 3000, 5, 300, 1]
    src = specials[torch.randint(len(specials), (sum(lengths), features), generator=gen)]
    indptr = R.indptr_from_lengths(lengths)
    if nan != "none":
        row = int(indptr[5]) + (0 if nan == "first row" else 1234)  # in the 3000-row segment
        src[row, features // 3] = float("nan")
    _assert_extremum_is_the_reference(reduce, src, indptr)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("features", [16, 32, 64, 72], ids=lambda f: f"F{f}")
@pytest.mark.parametrize("reduce", ["min", "max"])
@pytest.mark.parametrize("where", ["piece first row", "piece last row", "two NaNs"])
def test_min_max_whole_row_blocks_nan_at_piece_borders(reduce, features, dtype, where):
    # One segment over several chunks: with one segment the chunk borders fall on rows W, 2W, ...
    # (W = max(64, 32768 // F), kernels.cpp); the NaN in the second vector of the first pair of vectors.
    W = max(64, 32768 // features)
    n = 3 * W + 37
    gen = torch.Generator().manual_seed(features)
    src = torch.randn(n, features, generator=gen).to(dtype)
    f = min(features - 1, 11)
    rows = {"piece first row": [W, 2 * W], "piece last row": [W - 1], "two NaNs": [W + 5, 2 * W + 1]}[where]
    for r in rows:
        src[r, f] = float("nan")
    indptr = torch.tensor([0, n])
    arg = _assert_extremum_is_the_reference(reduce, src, indptr)
    assert int(arg[0, f]) == rows[0]


@pytest.mark.parametrize("reduce", ["min", "max"])
@pytest.mark.parametrize("features", [16, 32, 64, 80], ids=lambda f: f"F{f}")
def test_min_max_whole_row_blocks_constant_and_last_row(reduce, features):
    W = max(64, 32768 // features)  # the longest piece: rows up to W - 1
    src = torch.full((W, features), 2.0)
    indptr = torch.tensor([0, W])
    values, arg = NAMED[reduce](src, indptr)
    assert (arg == 0).all() and (values == 2.0).all()  # all equal: the first row everywhere
    src[W - 1] = 3.0 if reduce == "max" else 1.0  # the extreme in the highest row a piece reaches
    src[W - 1, 0] = 2.0  # a tie in feature 0: row 0 keeps it
    values, arg = NAMED[reduce](src, indptr)
    ref_values, ref_arg = R.segment(src, indptr, reduce)
    assert torch.equal(arg, ref_arg)
    assert (arg[0, 1:] == W - 1).all() and arg[0, 0] == 0
    torch.testing.assert_close(values, ref_values, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("reduce", ["min", "max"])
@pytest.mark.parametrize("nan", ["none", "one row"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("longest", [1, 8, 9, 16, 17, 69])
def test_min_max_one_feature_batches_match_reference(reduce, dtype, nan, seed, longest):
    # One feature: batches of 8 segments (empty ones, ones longer than 32 rows, a last batch cut short,
    # the array's last rows read through a padded copy); without NaN, or with one NaN (its batch is redone
    # segment by segment). The kernel reads float in blocks of 8 or 16 rows where a chunk's longest segment
    # fits, else 32: segments of at most `longest` rows, every one that long for seed 3 (a k-nearest-neighbour
    # graph's); an int32 indptr for seed 1.
    gen = torch.Generator().manual_seed(seed)
    if seed == 3:
        lengths = torch.full((203,), longest)
    else:
        lengths = torch.randint(0, longest + 1, (203,), generator=gen)
        lengths[::17] = 0
    specials = torch.tensor([v for v in SPECIAL if v == v], dtype=dtype)
    src = specials[torch.randint(len(specials), (int(lengths.sum()),), generator=gen)]
    if nan != "none":
        src[int(torch.randint(src.numel(), (1,), generator=gen))] = float("nan")
    indptr = R.indptr_from_lengths(lengths)
    _assert_extremum_is_the_reference(reduce, src, indptr.int() if seed == 1 else indptr)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("reduce", ["min", "max"])
def test_min_max_integer_extremes(reduce, dtype):
    info = torch.iinfo(dtype)
    src = torch.tensor([[info.min, info.max], [info.min, info.max], [info.max, info.min], [5, 5]], dtype=dtype)
    indptr = torch.tensor([0, 3, 3, 4])
    values, arg = NAMED[reduce](src, indptr)
    ref_values, ref_arg = R.segment(src, indptr, reduce)
    assert torch.equal(values, ref_values) and torch.equal(arg, ref_arg), (values, arg, ref_values, ref_arg)
    # 13 features: vector blocks (4 lanes of int64) and a scalar tail; few distinct values: many ties
    gen = torch.Generator().manual_seed(13)
    picks = torch.tensor([info.min, info.max, 0, 5], dtype=dtype)
    src = picks[torch.randint(4, (50, 13), generator=gen)]
    indptr = torch.tensor([0, 1, 1, 9, 30, 50])
    values, arg = NAMED[reduce](src, indptr)
    ref_values, ref_arg = R.segment(src, indptr, reduce)
    assert torch.equal(values, ref_values) and torch.equal(arg, ref_arg), (values, arg, ref_values, ref_arg)


@pytest.mark.parametrize("features", [1, 16, 37], ids=lambda f: f"F{f}")
def test_softmax_and_logsumexp_special_values(features):
    gen = torch.Generator().manual_seed(features)
    src = torch.tensor(SPECIAL)[torch.randint(len(SPECIAL), (60, features), generator=gen)]
    src[40:] = torch.randn(20, features, generator=gen) * 30  # wide range: exp under- and overflow
    src[50:52] = float("-inf")  # a segment of -inf only: softmax NaN, logsumexp -inf
    indptr = torch.tensor([0, 1, 9, 25, 40, 50, 52, 60])
    ref = R.segment_softmax(src, indptr)
    torch.testing.assert_close(so.segment_softmax_csr(src, indptr), ref, equal_nan=True, rtol=1e-5, atol=1e-7)
    lse = so.segment_logsumexp_csr(src, indptr)
    ref_lse = torch.stack([torch.logsumexp(src[a:b], 0) for a, b in zip(indptr[:-1], indptr[1:])])
    torch.testing.assert_close(lse, ref_lse, equal_nan=True, rtol=1e-5, atol=1e-6)


def test_add_is_sum():
    src = torch.randn(20, 5)
    indptr = torch.tensor([0, 3, 3, 11, 20])
    assert torch.equal(so.segment_csr(src, indptr, reduce="add"), so.segment_csr(src, indptr, reduce="sum"))
    assert torch.equal(so.segment_add_csr(src, indptr), so.segment_sum_csr(src, indptr))
    assert torch.equal(so.segment_csr(src, indptr), so.segment_sum_csr(src, indptr)), "default reduce is sum"


@pytest.mark.parametrize("dtype", R.FLOAT_DTYPES, ids=str)
def test_low_precision_accumulates_in_float32(dtype):
    # 4096 ones + one 1024: in float16/bfloat16 arithmetic the running sum would stall at 2048 / 256.
    src = torch.ones(4097, 1, dtype=dtype)
    src[0] = 1024
    indptr = torch.tensor([0, 4097])
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    assert so.segment_sum_csr(src, indptr).item() == 5120.0
    expected_mean = (torch.tensor(5120.0, dtype=acc) / 4097).to(dtype)
    assert so.segment_mean_csr(src, indptr).item() == expected_mean.item()


def test_gather_explicit():
    src = torch.tensor([[1, 2], [3, 4], [5, 6]])
    indptr = torch.tensor([1, 3, 3, 4])
    expected = torch.tensor([[0, 0], [1, 2], [1, 2], [5, 6]])
    assert torch.equal(so.gather_csr(src, indptr), expected)
    assert torch.equal(so.gather_csr(src, indptr, size=6), torch.cat([expected, torch.zeros(2, 2, dtype=torch.long)]))


def test_gather_size_is_max_over_batch():
    src = torch.arange(6.0).reshape(2, 3)  # 2 batches, 3 segments, no features
    indptr = torch.tensor([[0, 1, 1, 2], [0, 2, 4, 5]])
    got = so.gather_csr(src, indptr)
    assert got.tolist() == [[0.0, 2.0, 0.0, 0.0, 0.0], [3.0, 3.0, 4.0, 4.0, 5.0]]


def test_gather_inverts_mean_of_constant_segments():
    lengths = torch.tensor([3, 0, 1, 5, 0, 2])
    indptr = R.indptr_from_lengths(lengths)
    values = torch.randn(6, 4)
    expanded = so.gather_csr(values, indptr)
    mean = so.segment_mean_csr(expanded, indptr)
    nonempty = lengths > 0
    torch.testing.assert_close(mean[nonempty], values[nonempty], rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# The registered ops themselves (torch.ops.torch_segops.*).

@pytest.mark.parametrize("reduce", ["sum", "mean", "min", "max", "logsumexp", "mul"])
def test_registered_segment_reduce(reduce):
    src = torch.randn(2, 11, 3)
    indptr = torch.tensor([[0, 4, 4, 10]])
    result = getattr(torch.ops.torch_segops, f"segment_{reduce}")(src, indptr)
    expected, expected_arg = R.segment(src, indptr, reduce)
    if reduce in ("min", "max"):
        out, arg = result
        R.assert_equal(arg, expected_arg, "arg")
    else:
        assert isinstance(result, torch.Tensor), "sum, mean, mul and logsumexp return the values alone"
        out = result
    R.assert_reduction_close(out, expected, src, indptr, reduce)


def test_registered_gather_softmax_and_backward():
    src = torch.randn(3, 2)
    indptr = torch.tensor([0, 2, 2, 5])
    R.assert_equal(torch.ops.torch_segops.gather_csr(src, indptr, -1), R.gather(src, indptr), "gather size=-1")
    R.assert_equal(torch.ops.torch_segops.gather_csr(src, indptr, 7), R.gather(src, indptr, 7), "gather size=7")
    x = torch.randn(6, 2, dtype=torch.float64)
    y = torch.ops.torch_segops.segment_softmax(x, indptr)
    R.assert_softmax_close(y, R.segment_softmax(x, indptr), x, indptr)
    grad = torch.randn_like(x)
    # y * (grad - segment_sum(grad * y)) per segment, written out for this segmentation
    s = torch.zeros_like(x)
    for lo, hi in [(0, 2), (2, 2), (2, 5)]:
        s[lo:hi] = (grad[lo:hi] * y[lo:hi]).sum(0)
    expected = y * (grad - s)
    torch.testing.assert_close(torch.ops.torch_segops.segment_softmax_backward(grad, y, indptr), expected)


# ---------------------------------------------------------------------------------------------
# out= : overwritten in full (never accumulated), and the same object is returned.

def _garbage(shape, dtype):
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype)
    return torch.full(shape, 12345, dtype=dtype)


@pytest.mark.parametrize("reduce,dtype", [pytest.param(r, d, id=f"{r}-{str(d)[6:]}")
                                          for d in (torch.float32, torch.bfloat16, torch.int64)
                                          for r in (FLOAT_REDUCES if d.is_floating_point else INT_REDUCES)])
def test_out_is_overwritten_and_returned(reduce, dtype):
    src = (torch.randn(3, 12, 4) * 10).to(dtype)
    indptr = torch.tensor([[0, 0, 5, 5, 11]])  # reduce along dim 1, broadcast over dim 0
    expected, expected_arg = R.segment(src, indptr, reduce)
    out = _garbage((3, 4, 4), dtype)
    ret = so.segment_csr(src, indptr, out=out, reduce=reduce)
    assert ret is out
    R.assert_reduction_close(out, expected, src, indptr, reduce)
    # named wrapper, called twice on the same out: no accumulation
    out = _garbage((3, 4, 4), dtype)
    for _ in range(2):
        ret = NAMED[reduce](src, indptr, out=out)
    if reduce in ("min", "max"):
        values, arg = ret
        assert values is out
        R.assert_equal(arg, expected_arg, "arg with out=")
    else:
        assert ret is out
    R.assert_reduction_close(out, expected, src, indptr, reduce, what="out= twice")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32], ids=str)
def test_gather_out_is_overwritten_and_returned(dtype):
    src = (torch.randn(2, 4, 3) * 10).to(dtype)
    indptr = torch.tensor([[1, 3, 3, 6, 7]])
    out = _garbage((2, 9, 3), dtype)  # 9 > indptr[-1]: size comes from out, rows 0 and 7..8 are zero
    for _ in range(2):
        ret = so.gather_csr(src, indptr, out=out)
    assert ret is out
    R.assert_equal(out, R.gather(src, indptr, 9), "gather out=")


def _out_at_offset(shape, dtype, offset):
    """A contiguous garbage-filled tensor `offset` elements into its storage (offset 1: not aligned)."""
    n = math.prod(shape)
    return _garbage((n + offset,), dtype)[offset:].view(shape)


@pytest.mark.parametrize("feat", [8, 12, 64])
@pytest.mark.parametrize("offset", [0, 1], ids=lambda o: f"offset{o}")
def test_out_at_any_offset_is_written_like_a_new_output(feat, offset):
    """An out= that is 32-byte aligned or not (offset 1), with rows of whole vectors or not (feat 12),
    over many parallel chunks, is written in place with bitwise the values of a new output, for
    reductions (with arg) and gather."""
    g = torch.Generator().manual_seed(feat + offset)
    n_seg = 40_000 + 123
    lengths = torch.randint(0, 5, (n_seg,), generator=g)
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    src = torch.randn(int(indptr[-1]), feat, generator=g)
    for reduce in ("sum", "mean", "max"):
        out = _out_at_offset((n_seg, feat), torch.float32, offset)
        ret = NAMED[reduce](src, indptr, out=out)
        fresh = NAMED[reduce](src, indptr)
        if reduce == "max":
            R.assert_equal(ret[1], fresh[1], f"large out= {reduce} arg")
            ret, fresh = ret[0], fresh[0]
        assert ret is out
        R.assert_equal(out, fresh, f"large out= {reduce}")
    vals = torch.randn(n_seg, feat, generator=g)
    rows = int(indptr[-1]) + 3
    out = _out_at_offset((rows, feat), torch.float32, offset)
    assert so.gather_csr(vals, indptr, out=out) is out
    expected = torch.cat([vals.repeat_interleave(lengths, dim=0), torch.zeros(3, feat)])
    R.assert_equal(out, expected, "large gather out=")


@pytest.mark.parametrize("reduce", FLOAT_REDUCES)
def test_out_is_written_in_place_without_a_temporary(recorded_ops, reduce):
    src = torch.randn(40, 3)
    indptr = torch.tensor([0, 7, 7, 40])
    expected, expected_arg = R.segment(src, indptr, reduce)
    out = _garbage((3, 3), torch.float32)
    ptr = out.data_ptr()
    ret = NAMED[reduce](src, indptr, out=out)
    values = ret[0] if reduce in ("min", "max") else ret
    assert values is out and out.data_ptr() == ptr
    op = "sum" if reduce == "add" else reduce
    assert recorded_ops.called == [f"segment_{op}_out"], recorded_ops.called
    R.assert_reduction_close(out, expected, src, indptr, reduce)
    if reduce in ("min", "max"):
        R.assert_equal(ret[1], expected_arg, "arg with in-place out=")
    recorded_ops.called.clear()
    vals = torch.randn(3, 3)
    gout = _garbage((41, 3), torch.float32)
    assert so.gather_csr(vals, indptr, out=gout) is gout
    assert recorded_ops.called == ["gather_csr_out"], recorded_ops.called
    R.assert_equal(gout, R.gather(vals, indptr, 41), "gather in-place out=")


def test_out_falls_back_to_a_copy_where_writing_in_place_is_unsafe(recorded_ops):
    """Non-contiguous out, out sharing memory with src, and a src that records a gradient: the result
    is computed first and copied in (correct in every case; the gradient still flows)."""
    src = torch.randn(10, 4)
    indptr = torch.tensor([0, 3, 10])
    expected = R.segment(src, indptr, "sum")[0]
    out = _garbage((4, 2), torch.float32).t()  # non-contiguous (2, 4)
    assert so.segment_sum_csr(src, indptr, out=out) is out
    R.assert_reduction_close(out, expected, src, indptr, "sum")
    buf = torch.randn(12, 4)  # out aliases the rows of src it reduces
    alias_src, alias_out = buf[:10], buf[:2]
    expected_alias = R.segment(alias_src.clone(), indptr, "max")[0]
    so.segment_max_csr(alias_src, indptr, out=alias_out)
    R.assert_equal(alias_out, expected_alias, "out aliasing src")
    leaf = src.clone().requires_grad_()
    out = torch.zeros(2, 4)
    res = so.segment_sum_csr(leaf, indptr, out=out)
    res.sum().backward()
    assert torch.equal(leaf.grad, torch.ones_like(src))
    assert not [op for op in recorded_ops.called if op.endswith("_out")], recorded_ops.called


# ---------------------------------------------------------------------------------------------
# Large inputs: several parallel chunks per segment / many segments per chunk, so the chunk-combine
# pass is exercised. Checked with vectorised float64 computations (the loop reference would be slow
# for tens of thousands of segments) and, for few segments, with the loop reference.

def _large_many_segments(n_rows, n_seg, feat, seed):
    g = torch.Generator().manual_seed(seed)
    cuts = torch.randint(0, n_rows + 1, (n_seg - 1,), generator=g).sort().values
    indptr = torch.cat([torch.tensor([0]), cuts, torch.tensor([n_rows])])
    # values are a permutation: no ties, so argmin/argmax are unique
    src = (torch.randperm(n_rows * feat, generator=g).to(torch.float64) / (n_rows * feat) - 0.5).reshape(n_rows, feat)
    return src.float(), indptr


@pytest.mark.parametrize("n_rows,n_seg,feat", [(400_000, 30_000, 1), (100_000, 500, 7), (6_000, 40, 300)])
def test_large_many_segments(n_rows, n_seg, feat):
    src, indptr = _large_many_segments(n_rows, n_seg, feat, seed=n_seg)
    index = R.index_from_indptr(indptr)
    counts = (indptr[1:] - indptr[:-1]).unsqueeze(-1)
    s64 = torch.zeros(n_seg, feat, dtype=torch.float64).index_add_(0, index, src.double())
    abs64 = torch.zeros(n_seg, feat, dtype=torch.float64).index_add_(0, index, src.double().abs())
    eps = torch.finfo(torch.float32).eps
    got = so.segment_sum_csr(src, indptr).double()
    assert bool(((got - s64).abs() <= 8 * eps * abs64 + 1e-30).all())
    got = so.segment_mean_csr(src, indptr).double()
    mean64 = torch.where(counts > 0, s64 / counts.clamp(min=1), 0.0)
    assert bool(((got - mean64).abs() <= 8 * eps * abs64 / counts.clamp(min=1) + 1e-30).all())
    for reduce, red in (("max", "amax"), ("min", "amin")):
        values, arg = NAMED[reduce](src, indptr)
        ref = torch.zeros(n_seg, feat).scatter_reduce_(0, index.unsqueeze(-1).expand(-1, feat), src, red, include_self=False)
        empty = (counts == 0).expand(-1, feat)
        assert torch.equal(values, torch.where(empty, 0.0, ref))
        assert bool((arg[empty] == n_rows).all())
        seg_of_arg = torch.searchsorted(indptr, arg.clamp(max=n_rows - 1), right=True) - 1
        assert bool((seg_of_arg[~empty] == torch.arange(n_seg).unsqueeze(-1).expand(-1, feat)[~empty]).all())
        assert torch.equal(src.gather(0, arg.clamp(max=n_rows - 1))[~empty], values[~empty])


def test_large_few_segments_against_reference():
    g = torch.Generator().manual_seed(3)
    src = torch.randn(300_000, 16, generator=g)
    indptr = torch.tensor([0, 1, 120_000, 120_000, 299_990])
    for reduce in FLOAT_REDUCES:
        check_segment(src, indptr, reduce, "300k x 16")
    expected, _ = R.segment(src, indptr, "logsumexp")
    R.assert_reduction_close(so.segment_logsumexp_csr(src, indptr), expected, src, indptr, "logsumexp")
    R.assert_softmax_close(so.segment_softmax_csr(src, indptr), R.segment_softmax(src, indptr), src, indptr)
    vals = torch.randn(4, 16, generator=g)
    R.assert_equal(so.gather_csr(vals, indptr), R.gather(vals, indptr), "large gather")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("tail", [0, 1, 31, 32, 33], ids=lambda t: f"tail{t}")
def test_one_feature_sums_see_only_their_rows(dtype, tail):
    """One feature, every length 0..70 (the vector sum's whole steps of 32 and its last, partial step,
    which reads past a segment's end when the array goes on), each segment followed by a one-row
    segment of NaN or inf: a lane read but not kept must not leak into a sum. The last segment ends
    `tail` rows before the array's end (near the end the partial step must not read past it)."""
    g = torch.Generator().manual_seed(tail)
    lengths = torch.arange(71)[torch.randperm(71, generator=g)]
    parts, bounds, poison_rows = [], [0], []
    for i, n in enumerate(lengths.tolist()):
        parts.append(torch.randn(n, generator=g, dtype=torch.float64))
        bounds.append(bounds[-1] + n)
        parts.append(torch.tensor([(float("nan"), float("inf"), -float("inf"))[i % 3]], dtype=torch.float64))
        poison_rows.append(bounds[-1])
        bounds.append(bounds[-1] + 1)
    parts.append(torch.randn(50, generator=g, dtype=torch.float64))  # the last segment
    bounds.append(bounds[-1] + 50)
    src64 = torch.cat(parts + [torch.ones(tail, dtype=torch.float64)])
    src = src64.to(dtype)
    indptr = torch.tensor(bounds)
    clean = src.clone()
    clean[poison_rows] = 0
    for reduce in ("sum", "mean"):
        got = so.segment_csr(src, indptr, reduce=reduce)
        poisoned = ~torch.isfinite(R.segment(src.double(), indptr, reduce)[0])
        assert int(poisoned.sum()) == len(poison_rows)
        assert not bool(torch.isfinite(got[poisoned]).any()), f"{reduce}: a poison segment came out finite"
        expected = R.segment(clean, indptr, reduce)[0]
        # the poison segments were checked above; the others must match the clean reference
        got = torch.where(poisoned, expected, got)
        R.assert_reduction_close(got, expected, clean, indptr, reduce, what=f"one feature {reduce} {dtype}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_one_feature_sum_does_not_depend_on_the_segments_around_it(dtype):
    """Short one-feature segments are summed several at a time (a batch shares one horizontal sum):
    the same rows must give bitwise the same sum wherever the segment sits among the others."""
    g = torch.Generator().manual_seed(7)
    # magnitudes 2^0 .. 2^top: another order of the additions would round differently
    top = 10 if dtype == torch.float16 else 40
    probes = [torch.randn(n, generator=g) * 2.0 ** torch.randint(0, top, (n,), generator=g)
              for n in (3, 5, 8, 12, 19, 27, 32, 45, 70)]
    parts, bounds, where = [], [0], {n: [] for n in range(len(probes))}
    for slot in range(8):  # each probe as segment k with k % 8 == slot, after random filler segments
        for i, probe in enumerate(probes):
            while (len(bounds) - 1) % 8 != slot or len(parts) % 3 != i % 3:
                n = int(torch.randint(0, 20, (1,), generator=g))
                parts.append(torch.randn(n, generator=g))
                bounds.append(bounds[-1] + n)
            parts.append(probe)
            bounds.append(bounds[-1] + probe.numel())
            where[i].append(len(bounds) - 2)
    src = torch.cat(parts).to(dtype)
    assert src.numel() + len(bounds) < 1 << 15, "the probes must not cross a parallel chunk"
    indptr = torch.tensor(bounds)
    for reduce in ("sum", "mean"):
        got = so.segment_csr(src, indptr, reduce=reduce)
        for i, segs in where.items():
            same = got[segs]
            assert torch.equal(same, same[:1].expand_as(same)), f"{reduce} probe {i}: {same.tolist()}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
def test_large_segment_ties_across_chunks(dtype):
    n = 400_000
    src = torch.zeros(n, 2, dtype=dtype)
    src[n - 10, 0] = 5  # feature 0: the max at one late position, ...
    src[123_457, 0] = 5  # ... tied with an earlier one far away
    src[:, 1] = 1  # feature 1: one value everywhere
    indptr = torch.tensor([7, n])
    vmax, amax = so.segment_max_csr(src, indptr)
    vmin, amin = so.segment_min_csr(src, indptr)
    assert amax.tolist() == [[123_457, 7]]
    assert amin.tolist() == [[7, 7]]  # zeros from row 7 on (feature 0), ones everywhere (feature 1)
    assert vmax.tolist() == [[5, 1]] and vmin.tolist() == [[0, 1]]


def test_large_logsumexp_and_softmax_are_stable():
    # huge magnitudes: a naive exp would overflow; 2 segments spanning many chunks
    src = torch.linspace(-1000, 1000, 300_000).unsqueeze(-1)
    indptr = torch.tensor([0, 150_000, 300_000])
    lse = so.segment_logsumexp_csr(src, indptr)
    expected, _ = R.segment(src.double(), indptr, "logsumexp")
    assert torch.isfinite(lse).all()
    torch.testing.assert_close(lse.double(), expected, rtol=1e-5, atol=1e-3)
    sm = so.segment_softmax_csr(src, indptr)
    assert torch.isfinite(sm).all()
    torch.testing.assert_close(sm.double(), R.segment_softmax(src.double(), indptr), rtol=1e-4, atol=1e-7)
    seg_sums = so.segment_sum_csr(sm.double(), indptr)
    torch.testing.assert_close(seg_sums, torch.ones(2, 1, dtype=torch.float64), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------

def test_version_and_build_info():
    info = so.build_info()
    assert isinstance(so.__version__, str) and so.__version__
    assert info["version"] == so.__version__
    assert info["variant"] in ("cpu", "cuda")
    if info["variant"] == "cpu":
        assert info["cuda_version"] is None and info["cuda_archs"] == []
    else:
        assert info["cuda_version"] and info["cuda_archs"]


def _thp_mode():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as fh:
            return fh.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        return None


def _vm_flags(address):
    """The VmFlags of the mapping of this process that holds `address` ("hg": asked for huge pages)."""
    with open("/proc/self/smaps") as fh:
        inside = False
        for line in fh:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    raise AssertionError("no mapping holds the address")


@pytest.mark.skipif(_thp_mode() not in ("madvise", "always"),
                    reason=f"transparent huge pages are {_thp_mode()!r} here, not 'madvise' or 'always'")
def test_large_new_outputs_ask_for_huge_pages():
    """A large new output asks for transparent huge pages before its first write (where the memory is
    fresh, one page fault per 2 MiB instead of 512; memory the allocator reuses keeps its pages, so the
    test checks the request, not the pages); its values are unaffected."""
    vals = torch.randn(64, 1024)
    indptr = torch.arange(0, 16_001, 250)  # 64 segments of 250 rows: a 64 MiB float32 output
    out = so.gather_csr(vals, indptr)
    middle = out.data_ptr() + out.numel() * out.element_size() // 2  # the head below 2 MiB is not advised
    assert "hg" in _vm_flags(middle)
    R.assert_equal(out, vals.repeat_interleave(250, dim=0), "gather into huge pages")


# ---------------------------------------------------------------------------------------------
# pytorch_scatter's documented behaviour of the CSR functions (written from its semantics).

@pytest.mark.parametrize("dtype", R.INT_DTYPES, ids=str)
def test_integer_mean_truncates_toward_zero(dtype):
    """pytorch_scatter accumulates an integer mean in the integer type and divides by the count with
    C++ integer division: -7 / 2 is -3 (not floor's -4); an empty segment gives 0."""
    src = torch.tensor([[-3, 3], [-4, 4], [5, 5], [10, -10]], dtype=dtype)
    indptr = torch.tensor([0, 2, 2, 3, 4])
    out = so.segment_mean_csr(src, indptr)
    assert out.dtype == dtype
    assert out.tolist() == [[-3, 3], [0, 0], [5, 5], [10, -10]]
    assert so.segment_csr(src, torch.tensor([0, 3]), reduce="mean").tolist() == [[-0, 4]]  # -2/3 -> 0, 12/3 -> 4
    out = torch.full((4, 2), 99, dtype=dtype)
    assert so.segment_mean_csr(src, indptr, out=out) is out and out.tolist() == [[-3, 3], [0, 0], [5, 5], [10, -10]]


@pytest.mark.parametrize("reduce", FLOAT_REDUCES)
def test_empty_indptr_gives_zero_segments(reduce):
    """An indptr whose last dim is empty means zero segments (pytorch_scatter: src (0, 0, 0, 16) gives
    (0, 0, 0, 16), and backward works)."""
    x = torch.randn(0, 0, 0, 16, requires_grad=True)
    empty = torch.tensor([], dtype=torch.long)
    out = so.segment_csr(x, empty, reduce=reduce)
    assert out.shape == (0, 0, 0, 16)
    out.backward(torch.randn_like(out))
    assert x.grad.shape == x.shape
    # with rows along dim: the output has none, and every row gets zero gradient
    y = torch.randn(5, 3, requires_grad=True)
    out = so.segment_csr(y, empty, reduce=reduce)
    assert out.shape == (0, 3)
    out.sum().backward()
    assert torch.equal(y.grad, torch.zeros(5, 3))
    # batched: indptr (2, 0) against src (2, 4, 3)
    out = so.segment_csr(torch.randn(2, 4, 3), torch.zeros(2, 0, dtype=torch.long), reduce=reduce)
    assert out.shape == (2, 0, 3)


def test_empty_indptr_for_the_other_functions():
    empty = torch.zeros(0, dtype=torch.int32)
    assert so.segment_logsumexp_csr(torch.randn(4, 2), empty).shape == (0, 2)
    sm = so.segment_softmax_csr(torch.randn(4, 2), empty)
    assert torch.equal(sm, torch.zeros(4, 2))  # every row lies outside the (no) segments
    values, arg = so.segment_max_csr(torch.randn(4, 2), empty)
    assert values.shape == arg.shape == (0, 2)
    assert so.gather_csr(torch.randn(0, 2), empty).shape == (0, 2)
    assert torch.equal(so.gather_csr(torch.randn(0, 2), empty, size=3), torch.zeros(3, 2))


# ---------------------------------------------------------------------------------------------
# reduce="mul"

@pytest.mark.parametrize("dtype", R.ALL_DTYPES, ids=str)
@pytest.mark.parametrize("features", [1, 2, 5, 16, 37, 300], ids=lambda f: f"F{f}")
def test_mul_zeros_signs_and_empty_segments(features, dtype):
    # Every code path (row lanes, feature blocks, several feature tiles), segments long enough to cross
    # parallel chunks; factors in {-1, 0, 1, 2}: exact products, ties of sign and zeros.
    gen = torch.Generator().manual_seed(features)
    picks = torch.tensor([-1, 0, 1, 1, 2, 1, -1, 1]).to(dtype)
    lengths = torch.tensor([0, 1, 7, 0, 33, 3, 1500, 2, 0])
    indptr = R.indptr_from_lengths(lengths, start=2)
    src = picks[torch.randint(len(picks), (int(indptr[-1]) + 3, features), generator=gen)]
    src[2 + 7 + 1:2 + 7 + 1 + 33] = picks[4]  # one segment of 2s only: 2**33 (float: exact; int32: wraps to 0)
    expected, _ = R.segment(src, indptr, "mul")
    got = so.segment_csr(src, indptr, reduce="mul")
    R.assert_equal(got, expected, f"mul F={features} {dtype}")
    assert bool((got[lengths == 0] == 1).all()), "an empty segment gives the empty product 1"


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_mul_integer_overflow_wraps_like_torch(dtype):
    info = torch.iinfo(dtype)
    src = torch.tensor([info.max, 3, info.min, -1, 7, info.max, info.max, 5, 3], dtype=dtype).unsqueeze(1)
    indptr = torch.tensor([0, 2, 4, 9])
    expected = torch.stack([src[a:b].prod(0, dtype=dtype) for a, b in zip(indptr[:-1], indptr[1:])])
    R.assert_equal(so.segment_csr(src, indptr, reduce="mul"), expected, "integer mul overflow")


@pytest.mark.parametrize("features", [1, 16, 37], ids=lambda f: f"F{f}")
def test_mul_special_values(features):
    gen = torch.Generator().manual_seed(features)
    src = torch.tensor(SPECIAL)[torch.randint(len(SPECIAL), (60, features), generator=gen)]
    indptr = torch.tensor([0, 1, 9, 25, 40, 50, 52, 60])
    expected = torch.stack([src[a:b].prod(0) for a, b in zip(indptr[:-1], indptr[1:])])
    torch.testing.assert_close(so.segment_csr(src, indptr, reduce="mul"), expected, equal_nan=True, rtol=0, atol=0)
