"""The scatter ops (torch.ops.torch_segops.scatter_<name> and scatter_<name>_plan, issue #38) against the way
scatter computed before them: a stable torch.sort of the index, src's rows taken in that order, the CSR ops on
the sorted index's offsets, the arg mapped back, out= combined by the same rule. Every target must get the
same bits as there (every reduction, every dtype, int32 and int64 indexes, +inf, -inf, NaN, huge and tiny
values, -0.0, segments on both sides of every chunk size, out= with and without gradients), for any thread
count, and the float64 reference must agree within rounding. One feature (F = 1) is the exception: there each
target's values are folded serially in row order (docs/design.md, "scatter on the CPU"), the bits of torch's
1-D index_add_ and numpy's ufunc.at (serial_rows); segment_coo (sorted=True) keeps the CSR path's bits.

The one difference allowed is the payload (sign and mantissa bits) of a NaN result: x86 returns the first
operand's NaN when both operands of an add or multiply are NaN, and the compiler may order the two operands of
these commutative operations differently in two places it compiles the same source (the CSR op's code and the
scatter op's code); where the result is NaN it is NaN on both paths (docs/design.md, "scatter on the CPU").
Within one path the bits, NaN payloads included, do not depend on the thread count.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import reference as R
import torch_segops as so
from torch_segops._segment import combine_with_out

ops = torch.ops.torch_segops
REDUCTIONS = ("sum", "mean", "mul", "min", "max")
_INT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
             torch.float64: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous()
    return t.view(_INT_VIEW[t.dtype]) if t.dtype in _INT_VIEW else t


def assert_same_bits(actual, expected, what, nan_payload=False):
    """Bitwise equal (-0.0 and 0.0 differ); NaN where expected is NaN (its payload too when nan_payload)."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    same = bits(actual) == bits(expected)
    if actual.is_floating_point() and not nan_payload:
        same |= actual.isnan() & expected.isnan()
    if not bool(same.all()):
        bad = (~same).nonzero()[0].tolist()
        raise AssertionError(f"{what}: {int((~same).sum())} of {same.numel()} differ; first at {bad}: "
                             f"{actual[tuple(bad)].item()!r} vs {expected[tuple(bad)].item()!r}")


# ---- inputs ----------------------------------------------------------------------------------------------

def special_values(shape, dtype, g: torch.Generator) -> torch.Tensor:
    """Random values with +inf, -inf, NaN, -0.0, huge and tiny ones mixed in (integers: small values)."""
    if not dtype.is_floating_point:
        return torch.randint(-6, 7, shape, generator=g).to(dtype)
    info = torch.finfo(dtype)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 4
    u = torch.rand(shape, generator=g, dtype=torch.float64)
    for lo, hi, v in ((0.00, 0.01, float("inf")), (0.01, 0.02, float("-inf")), (0.02, 0.03, float("nan")),
                      (0.03, 0.05, -0.0), (0.05, 0.06, info.max / 64), (0.06, 0.07, -info.max / 64),
                      (0.07, 0.08, info.tiny), (0.08, 0.09, info.tiny * info.eps)):
        x[(u >= lo) & (u < hi)] = v
    return x.to(dtype)


def finite_values(shape, dtype, g: torch.Generator, reduce: str) -> torch.Tensor:
    if not dtype.is_floating_point:
        return torch.randint(-6, 7, shape, generator=g).to(dtype)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    if reduce == "mul":
        x = 1 + x / 64
    return x.to(dtype)


def draw_index(n: int, size: int, kind: str, g: torch.Generator) -> torch.Tensor:
    if kind == "sorted":
        return torch.randint(0, size, (n,), generator=g).sort().values
    if kind == "skewed":  # a few targets hold most rows
        x = (torch.rand(n, generator=g) ** 6 * size).long().clamp(max=size - 1)
        return x[torch.randperm(n, generator=g)]
    if kind == "one":
        return torch.full((n,), int(torch.randint(0, size, (1,), generator=g)))
    if kind == "rotated":  # sorted, then rotated: one long unsorted step
        x = torch.randint(0, size, (n,), generator=g).sort().values
        cut = int(torch.randint(0, max(n, 1), (1,), generator=g))
        return torch.cat([x[cut:], x[:cut]])
    return torch.randint(0, size, (n,), generator=g)


# ---- the path before the scatter ops -----------------------------------------------------------------

def old_rows(src: torch.Tensor, index: torch.Tensor, size: int, reduce: str):
    """(values, arg) as the CSR ops gave them for src [B, N, F] and index rows [IB, N] (IB 1 or B): every index
    row sorted stably, src's rows in that order, the offsets of the sorted rows."""
    perm = torch.sort(index.long(), dim=-1, stable=True).indices
    taken = src.gather(1, perm.unsqueeze(-1).expand(src.shape[0], -1, src.size(2)))
    counts = torch.zeros(index.shape[0], size + 1, dtype=torch.long)
    counts.scatter_add_(1, index.long() + 1, torch.ones_like(index, dtype=torch.long))
    indptr = counts.cumsum(1)
    result = getattr(ops, f"segment_{reduce}")(taken, indptr)
    if isinstance(result, tuple):
        values, arg = result
        n = src.size(1)
        if n:
            mapped = perm.unsqueeze(-1).expand(arg.shape[0], -1, arg.size(2)).gather(1, arg.clamp(max=n - 1))
            arg = torch.where(arg == n, arg, mapped)
        return values, arg
    return result, None


_ACC = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.int32: torch.int64}


def first_extremum(x: torch.Tensor, idx: torch.Tensor, size: int, reduce: str):
    """(values, arg) of min/max over one row of values x by target idx: the first NaN of a target, else its
    extremum at its first position (ties, -0.0 and 0.0 among them, to the first); empty targets 0 and x.numel()."""
    n = x.numel()
    nan = x.isnan() if x.is_floating_point() else torch.zeros(n, dtype=torch.bool)
    key = torch.where(nan, torch.zeros_like(x), x).double() if x.is_floating_point() else x
    p = torch.sort(key, descending=reduce == "max", stable=True).indices
    p = p[torch.sort((~nan[p]).to(torch.uint8), stable=True).indices]
    p = p[torch.sort(idx[p], stable=True).indices]
    t = idx[p]
    first = torch.ones(n, dtype=torch.bool)
    first[1:] = t[1:] != t[:-1]
    arg = torch.full((size,), n, dtype=torch.long)
    arg[t[first]] = p[first]
    values = torch.zeros(size, dtype=x.dtype)
    values[t[first]] = x[p[first]]
    return values, arg


def serial_rows(src: torch.Tensor, index: torch.Tensor, size: int, reduce: str):
    """(values, arg) of one feature (src [B, N, 1], index rows [IB, N]) by the F = 1 contract: each target's values
    folded serially in row order from the reducer's identity in the accumulation type. Sums: torch's 1-D
    index_add_ (serial in row order on the CPU: test_index_add_is_serial_in_row_order); products: numpy's
    multiply.at; mean: that sum / count; min/max: first_extremum."""
    assert src.size(2) == 1 and reduce in REDUCTIONS
    values, args = [], []
    for b in range(src.size(0)):
        x = src[b, :, 0]
        idx = index[b if index.size(0) > 1 else 0].long()
        acc = _ACC.get(x.dtype, x.dtype)
        if reduce in ("min", "max"):
            v, a = first_extremum(x, idx, size, reduce)
            values.append(v)
            args.append(a)
            continue
        if reduce == "mul":
            total = torch.ones(size, dtype=acc).numpy()
            with np.errstate(all="ignore"):
                np.multiply.at(total, idx.numpy(), x.to(acc).numpy())
            total = torch.from_numpy(total)
        else:
            total = torch.zeros(size, dtype=acc).index_add_(0, idx, x.to(acc))
        if reduce == "mean":
            count = torch.bincount(idx, minlength=size).to(acc)
            total = torch.where(count > 0, total / count.clamp(min=1), torch.zeros_like(total))
        values.append(total.to(x.dtype))
    v = torch.stack(values).unsqueeze(-1)
    return v, (torch.stack(args).unsqueeze(-1) if args else None)


def expected_rows(src, index, size, reduce):
    """What the scatter ops must give: serial_rows at one feature, the CSR path's bits otherwise (logsumexp at one
    feature has no bitwise reference here: its exp is libm's; None)."""
    if src.size(2) != 1:
        return old_rows(src, index, size, reduce)
    return serial_rows(src, index, size, reduce) if reduce in REDUCTIONS else (None, None)


def old_scatter(src, index, dim, size, reduce, out=None):
    """The public scatter(src, index (1-D), dim, out, dim_size=size, reduce) as it must compute: the old path's
    values (serial_rows where one feature is reduced) combined with out= by the same rule."""
    shape = src.shape
    b = 1
    for d in range(dim):
        b *= shape[d]
    s3 = src.reshape(b, shape[dim], -1)
    rows = index.reshape(1, -1)
    if out is None and not src.is_floating_point() and reduce == "mean":
        total, _ = expected_rows(s3, rows, size, "sum")
        counts = torch.bincount(index.long(), minlength=size).clamp(min=1).view(1, -1, 1).to(total.dtype)
        return torch.div(total, counts, rounding_mode="floor").reshape(*shape[:dim], size, *shape[dim + 1:]), None
    what = "sum" if (out is not None and reduce == "mean") else reduce
    values, arg = expected_rows(s3, rows, size, what)
    values = values.reshape(*shape[:dim], size, *shape[dim + 1:])
    arg = arg.reshape(values.shape) if arg is not None else torch.empty(0, dtype=torch.long)
    if out is None:
        return values, (arg if reduce in ("min", "max") else None)
    counts = torch.bincount(index.long(), minlength=size).clamp(min=1).to(values.dtype)
    counts = counts.view([size] + [1] * (src.dim() - dim - 1))
    result, arg = combine_with_out("scatter", out, reduce, values, arg, shape[dim],
                                   counts if reduce == "mean" else values, "floor")
    return result, (arg if reduce in ("min", "max") else None)


# ---- the ops against the old path, bitwise -----------------------------------------------------------

def _cases(seed: int, count: int):
    """(src [B, N, F], index rows [IB, N], size, reduce, what): shapes around every chunk size (one feature: 32768
    merge-path items a chunk; 64 features: 512; 300 features: 128 and two feature tiles; 258: a tile of 2)."""
    rnd = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    for k in range(count):
        F = rnd.choice([1, 1, 1, 2, 3, 8, 64, 258, 300])
        N = {1: rnd.choice([0, 1, 5, 33, 300, 5000, 70000]), 2: 5000, 3: 3000, 8: 4000}.get(F, rnd.choice([40, 1500]))
        size = rnd.choice([1, 2, 7, max(1, N // 10), N + 3, 3 * N + 40000 // max(F, 1)])
        kind = rnd.choice(["uniform", "sorted", "skewed", "one", "rotated"])
        B, IB = rnd.choice([(1, 1), (1, 1), (3, 1), (2, 2)])
        index = torch.stack([draw_index(N, size, kind, g) for _ in range(IB)])
        index = index.to(rnd.choice([torch.int64, torch.int32]))
        dtype = rnd.choice([torch.float32, torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                            torch.int64])
        reduce = rnd.choice(REDUCTIONS + ("sum", "logsumexp"))
        if not dtype.is_floating_point and reduce in ("mean", "logsumexp"):
            reduce = "sum"
        special = rnd.random() < 0.6
        src = (special_values if special else lambda s, d, gg: finite_values(s, d, gg, reduce))((B, N, F), dtype, g)
        yield src, index, size, reduce, (f"case {k}: src {tuple(src.shape)} {dtype}, index {kind} {index.dtype} "
                                         f"{tuple(index.shape)}, size {size}, {reduce}, special={special}")


def assert_logsumexp_close(values, expected, what):
    """One feature's logsumexp folds in row order, the CSR path in its own order: within rounding."""
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5, torch.float64: 1e-12}[values.dtype]
    torch.testing.assert_close(values.double(), expected.double(), rtol=tol, atol=tol, equal_nan=True, msg=what)


@pytest.mark.parametrize("seed", range(4))
def test_ops_match_the_sorted_csr_path_bitwise_for_any_thread_count(seed):
    """The CSR path's bits for F >= 2, serial_rows' for F = 1 (any thread count); segment_coo's form of the ops
    (sorted=True) the CSR path's for every F."""
    for src, index, size, reduce, what in _cases(seed, 30):
        expected, expected_arg = expected_rows(src, index, size, reduce)
        csr, csr_arg = old_rows(src, index, size, reduce)
        op = getattr(ops, f"scatter_{reduce}")
        first = None
        for threads in (1, 2, 3, 7):
            torch.set_num_threads(threads)
            got = op(src, index, size, False)
            values, arg = got if isinstance(got, tuple) else (got, None)
            if expected is None:
                assert_logsumexp_close(values, csr, f"{what}, {threads} threads")
            else:
                assert_same_bits(values, expected, f"{what}, {threads} threads")
            if expected_arg is not None:
                assert torch.equal(arg, expected_arg), f"{what}: arg, {threads} threads"
            if first is None:
                first = values
            else:  # one path: the same bits, NaN payloads included
                assert_same_bits(values, first, f"{what}: {threads} vs 1 thread", nan_payload=True)
        if bool((index[:, 1:] >= index[:, :-1]).all()):  # the COO form: a sorted index
            coo = op(src, index, size, True)
            assert_same_bits(coo[0] if isinstance(coo, tuple) else coo, csr, f"{what}: sorted=True")
            if csr_arg is not None:
                assert torch.equal(coo[1], csr_arg), f"{what}: sorted=True arg"


@pytest.mark.parametrize("seed", range(2))
def test_plan_op_matches_bitwise(seed):
    for src, index, size, reduce, what in _cases(100 + seed, 20):
        expected, expected_arg = expected_rows(src, index, size, reduce)
        if expected is None:
            expected, _ = old_rows(src, index, size, reduce)
        perm = torch.sort(index.long(), dim=-1, stable=True).indices
        counts = torch.zeros(index.shape[0], size + 1, dtype=torch.long)
        counts.scatter_add_(1, index.long() + 1, torch.ones_like(index, dtype=torch.long))
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            got = getattr(ops, f"scatter_{reduce}_plan")(src, perm, counts.cumsum(1))
            values, arg = got if isinstance(got, tuple) else (got, None)
            if reduce == "logsumexp" and src.size(2) == 1:
                assert_logsumexp_close(values, expected, f"{what} (plan), {threads} threads")
                assert_same_bits(values, ops.scatter_logsumexp(src, index, size, False), f"{what}: plan vs index")
                continue
            assert_same_bits(values, expected, f"{what} (plan), {threads} threads")
            if expected_arg is not None:
                assert torch.equal(arg, expected_arg), f"{what}: plan arg"


def test_a_segment_on_both_sides_of_every_chunk_border():
    """One feature: chunks of 32768 merge-path items. Segments of every length around a border, started at every
    offset around it, sum/mean/mul: the pieces a crossing segment is cut into, and the empty head piece of a
    segment whose rows end exactly at a border, are where the order of the additions changes (the COO form,
    sorted=True); scatter (sorted=False) folds in row order there too."""
    g = torch.Generator().manual_seed(5)
    for lead in (32760, 32766, 32767, 32768):  # rows + segment ends before the probe segment
        for length in (1, 2, 7, 8, 9, 31, 32, 33, 40, 100):
            sizes = [lead - 1, length, 3]  # lead - 1 rows in target 0 (+ its end item) = lead items before
            index = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes))
            src = special_values((index.numel(),), torch.float32, g)
            shuffled = torch.randperm(index.numel(), generator=g)
            for reduce in ("sum", "mean", "mul"):
                op = getattr(ops, f"scatter_{reduce}")
                expected, _ = old_rows(src.view(1, -1, 1), index.view(1, -1), 3, reduce)
                assert_same_bits(op(src, index, 3, True), expected.view(-1), f"lead {lead}, length {length}, {reduce}")
                for ix, s in ((index, src), (index[shuffled], src[shuffled])):
                    expected, _ = serial_rows(s.view(1, -1, 1), ix.view(1, -1), 3, reduce)
                    got = op(s, ix, 3, False)
                    assert_same_bits(got, expected.view(-1), f"lead {lead}, length {length}, {reduce}: serial")


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_one_feature_past_the_serial_size_matches_bitwise_for_any_thread_count(index_dtype):
    """F = 1 with more rows than a call runs serially (2**17 elements): the partition's blocks of 2**16 rows (an odd
    and an even count of blocks, a short last one), its ranges folded in record order, on 1, 2 and 3 threads:
    serial_rows' bits, NaN payloads equal across thread counts; out= too."""
    g = torch.Generator().manual_seed(21)
    threads_before = torch.get_num_threads()
    try:
        for n, size, kind in ((200_001, 3, "uniform"), (262_145, 20_000, "uniform"), (150_000, 150_000, "skewed"),
                              (140_000, 7, "rotated")):
            src = special_values((1, n, 1), torch.float32, g)
            index = draw_index(n, size, kind, g).to(index_dtype).view(1, -1)
            for reduce in ("sum", "mean", "mul", "min", "max"):
                expected, expected_arg = serial_rows(src, index, size, reduce)
                out0 = special_values((size,), torch.float32, g)
                expected_out, _ = old_scatter(src.view(-1), index.view(-1), 0, size, reduce, out=out0.clone())
                first = None
                for threads in (1, 2, 3):
                    torch.set_num_threads(threads)
                    what = f"n {n}, size {size}, {kind}, {index_dtype}, {reduce}, {threads} threads"
                    got = getattr(ops, f"scatter_{reduce}")(src, index, size, False)
                    values, arg = got if isinstance(got, tuple) else (got, None)
                    assert_same_bits(values, expected, what)
                    if expected_arg is not None:
                        assert torch.equal(arg, expected_arg), f"{what}: arg"
                    out = out0.clone()
                    so.scatter(src.view(-1), index.view(-1), 0, out=out, reduce=reduce)
                    assert_same_bits(out, expected_out, f"{what}, out=")
                    if first is None:
                        first = values
                    else:
                        assert_same_bits(values, first, f"{what} vs 1 thread", nan_payload=True)
    finally:
        torch.set_num_threads(threads_before)


# ---- one feature: each target's values folded in row order -------------------------------------------------

def test_index_add_is_serial_in_row_order():
    """serial_rows' premise: torch's 1-D index_add_ and scatter_add_ on the CPU add each target's values in row
    order (numpy's add.at, unbuffered, does by definition), on 1 and 2 threads, at sizes torch could split."""
    g = torch.Generator().manual_seed(31)
    threads_before = torch.get_num_threads()
    try:
        for n, size in ((5000, 40), (300_000, 3000)):
            x = (torch.randn(n, generator=g, dtype=torch.float64) * torch.exp(8 * torch.randn(n, generator=g))).float()
            idx = torch.randint(0, size, (n,), generator=g)
            by_numpy = np.zeros(size, np.float32)
            np.add.at(by_numpy, idx.numpy(), x.numpy())
            for threads in (1, 2):
                torch.set_num_threads(threads)
                assert_same_bits(torch.zeros(size).index_add_(0, idx, x), torch.from_numpy(by_numpy), f"index_add_ {n}")
                assert_same_bits(torch.zeros(size).scatter_add_(0, idx, x), torch.from_numpy(by_numpy), f"scatter_add_ {n}")
            pairwise = torch.zeros(size, dtype=torch.float64).index_add_(0, idx, x.double()).float()
            assert not torch.equal(pairwise, torch.from_numpy(by_numpy)), "the data must tell summation orders apart"
    finally:
        torch.set_num_threads(threads_before)


def one_feature_inputs(n, size, dtype, index_dtype, kind, g):
    """special_values with 1e38 and 1e-40 mixed in (float16: inf and 0)."""
    src = special_values((n,), dtype, g)
    if dtype.is_floating_point:
        u = torch.rand(n, generator=g)
        src = torch.where(u < 0.01, torch.tensor(1e38, dtype=torch.float64).to(dtype), src)
        src = torch.where((u >= 0.01) & (u < 0.02), torch.tensor(-1e-40, dtype=torch.float64).to(dtype), src)
    return src, draw_index(n, size, kind, g).to(index_dtype)


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_one_feature_folds_each_target_in_row_order(reduce):
    """The F = 1 contract (docs/design.md, "scatter on the CPU"): serial_rows' bits for every dtype, int32 and int64
    indexes, shuffled and sorted, the op, plan= and public out= (also recording gradients), on 1 and 2 threads; calls
    below the serial size, above it (2 threads: the partition by ranges, for a sum where its output takes more than
    8 MiB), and with dim_size past 4x the rows (the partition on 1 thread too where the states do not fit in the
    output). The one-pass result (1 thread) and the partition's (2 threads) are the same bits, NaN payloads
    included."""
    g = torch.Generator().manual_seed(37)
    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
    if reduce != "mean":
        dtypes += [torch.int64, torch.int32]
    cases = [(3000, 300, d, i, k) for d in dtypes for i in (torch.int32, torch.int64) for k in ("uniform", "sorted")]
    cases += [(140_000, 20_000, torch.float32, torch.int64, "uniform"), (140_000, 20_000, torch.float16, torch.int32,
              "skewed"), (140_000, 20_000, torch.float32, torch.int32, "sorted"),
              (5000, 30_000, torch.float32, torch.int64, "uniform"), (140_000, 1_100_000, torch.float64, torch.int64,
                                                                       "uniform")]
    threads_before = torch.get_num_threads()
    try:
        for n, size, dtype, index_dtype, kind in cases:
            src, index = one_feature_inputs(n, size, dtype, index_dtype, kind, g)
            expected, expected_arg = serial_rows(src.view(1, -1, 1), index.view(1, -1), size, reduce)
            expected = expected.view(-1)
            out0 = special_values((size,), dtype, g)
            expected_out, expected_out_arg = old_scatter(src, index, 0, size, reduce, out=out0.clone())
            plan = so.scatter_plan(index, size)
            firsts = []
            for threads in (1, 2):
                torch.set_num_threads(threads)
                what = f"{reduce} n={n} size={size} {dtype} {index_dtype} {kind} {threads} threads"
                calls = {"op": lambda: getattr(ops, f"scatter_{reduce}")(src, index, size, False),
                         "plan": lambda: getattr(ops, f"scatter_{reduce}_plan")(src, plan.perm, plan.indptr)}
                for how, call in calls.items():
                    got = call()
                    values, arg = got if isinstance(got, tuple) else (got, None)
                    assert_same_bits(values, expected, f"{what}, {how}")
                    if expected_arg is not None:
                        assert torch.equal(arg, expected_arg.view(-1)), f"{what}, {how}: arg"
                    if how == "op":
                        firsts.append(values)
                for grad in (False, True) if dtype.is_floating_point else (False,):
                    out = out0.clone().requires_grad_(grad).clone()
                    if reduce in ("min", "max"):
                        values, arg = getattr(so, f"scatter_{reduce}")(src, index, 0, out=out)
                        assert torch.equal(arg, expected_out_arg), f"{what}, out= (grad {grad}): arg"
                    else:
                        values = so.scatter(src, index, 0, out=out, reduce=reduce)
                    assert_same_bits(values, expected_out, f"{what}, out= (grad {grad})")
            assert_same_bits(firsts[1], firsts[0], f"{reduce} n={n} size={size} {dtype}: 2 vs 1 thread", nan_payload=True)
    finally:
        torch.set_num_threads(threads_before)


@pytest.mark.parametrize("threads", [1, 2])
def test_one_feature_bad_value_at_either_end_of_the_index(threads):
    """A value outside [0, dim_size) as the first or the last row, inside a prefetching block of the one pass
    and in its plain tail (its last 144 rows or fewer), in the one pass and in the partition (2 threads, 200k
    rows), for a state kept in the output (sum) and in arrays (mean, max): the error names it."""
    threads_before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for n, size in ((10, 4), (200_000, 1000)):
            src = torch.randn(n)
            for where in sorted({w for w in (0, 37, n - 100, n - 1) if 0 <= w < n}):
                for bad in (-1, size):
                    index = torch.randint(0, size, (n,))
                    index[where] = bad
                    message = (rf"index must be non-negative, got index\[{where}\] = -1" if bad < 0 else
                               rf"index must be < dim_size = {size}, got index\[{where}\] = {size}")
                    for fn in (lambda: so.scatter(src, index, 0, dim_size=size), lambda: so.scatter(
                            src, index.int(), 0, dim_size=size, reduce="mean"), lambda: so.scatter_max(src, index, 0,
                                                                                                    dim_size=size)):
                        with pytest.raises(ValueError, match=message):
                            fn()
    finally:
        torch.set_num_threads(threads_before)


def test_one_feature_empty_and_batched():
    """No rows (every target empty: 0, 1 for mul, arg N), no targets, and leading batch dims (B = 3, the index
    broadcast and per batch) against serial_rows, through the op and a plan."""
    for reduce in REDUCTIONS:
        op = getattr(ops, f"scatter_{reduce}")
        got = op(torch.ones(0), torch.zeros(0, dtype=torch.long), 4, False)
        values, arg = got if isinstance(got, tuple) else (got, None)
        assert values.tolist() == [1.0 if reduce == "mul" else 0.0] * 4, reduce
        if arg is not None:
            assert arg.tolist() == [0] * 4
        got = op(torch.ones(0), torch.zeros(0, dtype=torch.int32), 0, False)
        assert (got[0] if isinstance(got, tuple) else got).shape == (0,)
        g = torch.Generator().manual_seed(41)
        for ib in (1, 3):
            src = special_values((3, 5000), torch.float32, g)
            index = torch.randint(0, 70, (ib, 5000), generator=g)
            expected, expected_arg = serial_rows(src.unsqueeze(-1), index, 70, reduce)
            got = op(src, index, 70, False)
            assert_same_bits(got[0] if isinstance(got, tuple) else got, expected.squeeze(-1), f"{reduce} batched {ib}")
            if expected_arg is not None:
                assert torch.equal(got[1], expected_arg.squeeze(-1)), f"{reduce} batched {ib}: arg"
            if ib == 3:
                plan = so.scatter_plan(index, 70)
                got = getattr(ops, f"scatter_{reduce}_plan")(src, plan.perm, plan.indptr)
                assert_same_bits(got[0] if isinstance(got, tuple) else got, expected.squeeze(-1), f"{reduce} plan {ib}")
    with pytest.raises(RuntimeError, match=r"plan\.perm must hold positions in \[0, src\.size\(dim\) = 5\)"):
        ops.scatter_sum_plan(torch.randn(5), torch.tensor([0, 1, 2, 3, 9]), torch.tensor([0, 2, 5]))


# ---- the public functions against the old path (out=, gradients) and the float64 reference ---------------

@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_public_scatter_with_out_matches_the_old_path(reduce, dtype):
    g = torch.Generator().manual_seed(11)
    for n, size, f, kind in ((200, 13, 3, "uniform"), (5000, 40, 1, "skewed"), (3000, 700, 64, "sorted")):
        src = special_values((n, f), dtype, g)
        index = draw_index(n, size, kind, g).to(torch.int32 if n % 2 else torch.int64)
        for with_out in (False, True):
            out = special_values((size, f), dtype, g) if with_out else None
            expected, expected_arg = old_scatter(src, index, 0, size, reduce, out.clone() if with_out else None)
            got = (so.scatter_min if reduce == "min" else so.scatter_max)(src, index, 0, out=out, dim_size=size) \
                if reduce in ("min", "max") else (so.scatter(src, index, 0, out=out, dim_size=size, reduce=reduce), None)
            values, arg = got
            assert_same_bits(values, expected, f"{reduce} {dtype} n={n} out={with_out}")
            if expected_arg is not None:
                assert torch.equal(arg, expected_arg), f"{reduce} arg"


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_public_scatter_matches_the_float64_reference(reduce):
    """Small shapes against tests/reference.py's per-target masks, with +inf, -inf, NaN, huge and tiny values."""
    g = torch.Generator().manual_seed(13)
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int32):
        for index_dtype in (torch.int64, torch.int32):
            src = special_values((60, 2), dtype, g)
            if reduce == "mul" and dtype.is_floating_point:
                src = torch.where(src.abs() > 16, src.sign(), src)  # products that neither overflow nor vanish
            index = torch.randint(0, 9, (60,), generator=g).to(index_dtype)
            expected, expected_arg = R.scatter(src, index, 0, 11, reduce)
            got = so.scatter(src, index, 0, dim_size=11, reduce=reduce)
            what = f"{reduce} {dtype} {index_dtype}"
            if reduce in ("min", "max") or not dtype.is_floating_point:
                R.assert_equal(got, expected, what)
                if reduce in ("min", "max"):
                    R.assert_equal((so.scatter_min if reduce == "min" else so.scatter_max)(src, index, 0, dim_size=11)[1],
                                   expected_arg, what)
                continue
            # non-finite results: the same class (+inf, -inf, NaN); finite ones within rounding of the float64 sums
            e64 = expected.double()
            finite = e64.isfinite()
            assert torch.equal(got.double()[~finite].nan_to_num(7, 8, 9), e64[~finite].nan_to_num(7, 8, 9)), what
            if reduce == "mul":
                counts, _ = R.scatter(torch.ones_like(src, dtype=torch.float64), index, 0, 11, "sum")
                R.assert_product_close(got[finite], expected[finite], counts[finite], what)
            else:
                scale, _ = R.scatter(src.double().abs().nan_to_num(0, 0, 0), index, 0, 11, "mean" if reduce == "mean" else "sum")
                R.assert_sum_close(got[finite], expected[finite], scale[finite], what)


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_gradients_match_the_old_path(reduce):
    """The backward of the scatter ops: the same values as through the CSR ops and the permutation (a zero's sign
    may differ: the old path added the permuted gradient into zeros)."""
    g = torch.Generator().manual_seed(17)
    src = torch.randn(400, 5, generator=g, dtype=torch.float64)
    src[::7] = 0.0  # zeros, for mul's gradient
    index = torch.randint(0, 30, (400,), generator=g)
    out = torch.randn(32, 5, generator=g, dtype=torch.float64)
    grad = torch.randn(32, 5, generator=g, dtype=torch.float64)
    for with_out in (False, True):
        a = src.clone().requires_grad_()
        b = src.clone().requires_grad_()
        oa = out.clone().requires_grad_() if with_out else None
        ob = out.clone().requires_grad_() if with_out else None
        new = so.scatter(a, index, 0, out=oa.clone() if with_out else None, dim_size=32, reduce=reduce)
        old, _ = old_scatter(b, index, 0, 32, reduce, ob.clone() if with_out else None)
        wrt_new, wrt_old = ([a, oa], [b, ob]) if with_out else ([a], [b])
        for x, y in zip(torch.autograd.grad(new, wrt_new, grad), torch.autograd.grad(old, wrt_old, grad)):
            assert torch.equal(x, y), f"{reduce} gradient, out={with_out}"


def test_the_csr_route_of_other_devices_matches_the_scatter_ops(monkeypatch):
    """Where the scatter ops have no kernel (CUDA), scatter and segment_coo take the CSR route (offsets, stable
    torch.sort, rows gathered, the CSR ops). Run here on the CPU, with the scatter ops made unreachable: the same
    values and args as the ops give (NaN payloads aside), for index rows, an index varying along the features
    (float sum/mean/mul: within rounding, the ops fold one feature in row order), a plan, out=, integer mean and
    the COO functions."""
    import torch_segops._segment as segment
    g = torch.Generator().manual_seed(23)
    cases = []
    for dtype, index_dtype in ((torch.float32, torch.int64), (torch.float64, torch.int32), (torch.int64, torch.int64)):
        src = special_values((300, 4), dtype, g)
        index = draw_index(300, 37, "uniform", g).to(index_dtype)
        per_feature = torch.randint(0, 37, (300, 4), generator=g).to(index_dtype)
        out = special_values((37, 4), dtype, g)
        plan = so.scatter_plan(index, dim_size=37)
        for reduce in REDUCTIONS:
            if reduce == "mean" or dtype.is_floating_point or reduce in ("sum", "mul", "min", "max"):
                cases.append((f"{reduce} {dtype} {index_dtype}", lambda s=src, i=index, r=reduce:
                              so.scatter(s, i, 0, dim_size=37, reduce=r)))
                cases.append((f"{reduce} out=", lambda s=src, i=index, r=reduce, o=out:
                              so.scatter(s, i, 0, out=o.clone(), reduce=r)))
                cases.append((f"{reduce} per feature", lambda s=src, i=per_feature, r=reduce:
                              so.scatter(s, i, 0, dim_size=37, reduce=r)))
                cases.append((f"{reduce} plan", lambda s=src, i=index, r=reduce, p=plan:
                              so.scatter(s, i, 0, reduce=r, plan=p)))
                cases.append((f"{reduce} coo", lambda s=src, i=index, r=reduce:
                              so.segment_coo(s, i.sort().values, dim_size=37, reduce=r)))
        for fn in (so.scatter_min, so.scatter_max):
            cases.append((f"{fn.__name__} {dtype}", lambda s=src, i=index, f=fn: f(s, i, 0, dim_size=37)))
            cases.append((f"{fn.__name__} plan", lambda s=src, i=index, f=fn, p=plan: f(s, i, 0, plan=p)))
            cases.append((f"{fn.__name__} per feature", lambda s=src, i=per_feature, f=fn: f(s, i, 0, dim_size=37)))
    expected = [f() for _, f in cases]

    def unreachable(*args):
        raise AssertionError("a scatter op was called on the CSR route")

    monkeypatch.setattr(segment, "has_scatter_ops", lambda src: False)
    monkeypatch.setattr(segment, "run_scatter", unreachable)
    monkeypatch.setattr(segment, "run_scatter_plan", unreachable)
    for (what, f), e in zip(cases, expected):
        got = f()
        for a, b in zip(got if isinstance(got, tuple) else (got,), e if isinstance(e, tuple) else (e,)):
            if "per feature" in what and what.split()[0] in ("sum", "mean", "mul") and a.is_floating_point():
                # an index of src's shape reaches the ops as one feature (each position of the other dims its own
                # batch): row order there, the CSR bits on the CSR route
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, equal_nan=True, msg=what)
            else:
                assert_same_bits(a, b, what)
    with pytest.raises(ValueError, match=r"^torch_segops\.scatter: index must be < dim_size = 3, got index\[1\] = 5"):
        so.scatter(torch.ones(3), torch.tensor([0, 5, 1]), 0, dim_size=3)


@pytest.mark.parametrize("reduce", ["sum", "mean", "mul", "max", "logsumexp"])
@pytest.mark.parametrize("plan", [False, True])
def test_ops_gradcheck(reduce, plan):

    x = R.distinct_values((9, 2)).requires_grad_()
    index = torch.tensor([3, 0, 3, 1, 0, 3, 1, 1, 0])
    if plan:
        p = so.scatter_plan(index, 5)
        fn = lambda t: getattr(ops, f"scatter_{reduce}_plan")(t, p.perm, p.indptr)  # noqa: E731
    else:
        fn = lambda t: getattr(ops, f"scatter_{reduce}")(t, index, 5, False)  # noqa: E731
    first = lambda t: fn(t)[0] if isinstance(fn(t), tuple) else fn(t)  # noqa: E731
    assert torch.autograd.gradcheck(first, (x,), eps=1e-6, atol=1e-8)
    if reduce in ("sum", "mean", "mul"):
        assert torch.autograd.gradgradcheck(first, (x,), eps=1e-6, atol=1e-8)


# ---- errors -----------------------------------------------------------------------------------------

def test_bad_index_and_plan_errors():
    src = torch.randn(5, 2)
    with pytest.raises(ValueError, match=r"^torch_segops\.scatter: index must be < dim_size = 3, got index\[3\] = 7$"):
        so.scatter(src, torch.tensor([0, 1, 2, 7, 0]), 0, dim_size=3)
    with pytest.raises(ValueError, match=r"^torch_segops\.scatter_max: index must be non-negative, got index\[1\] = -1$"):
        so.scatter_max(src, torch.tensor([0, -1, 2, 1, 0], dtype=torch.int32), 0)
    with pytest.raises(ValueError, match=r"^torch_segops\.segment_coo: index must be sorted \(non-decreasing\) along its "
                                         r"last dim, got index\[\.\.\., 2\] = 0 < index\[\.\.\., 1\] = 1"):
        so.segment_coo(src, torch.tensor([0, 1, 0, 2, 2]))
    with pytest.raises(RuntimeError, match=r"^torch_segops: plan\.perm must hold positions in \[0, src\.size\(dim\) = 5\)"):
        ops.scatter_sum_plan(src, torch.tensor([0, 1, 2, 3, 9]), torch.tensor([0, 2, 5]))
    with pytest.raises(RuntimeError, match=r"^torch_segops: plan\.indptr must hold non-decreasing offsets"):
        ops.scatter_sum_plan(src, torch.arange(5), torch.tensor([0, 4, 2]))
    with pytest.raises(RuntimeError, match=r"^torch_segops: plan\.indptr must hold non-decreasing offsets"):
        ops.scatter_sum_plan(src, torch.arange(5), torch.tensor([0, 2, 6]))


@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_rows_of_no_features_check_the_index_only(reduce, index_dtype):
    """src of shape (N, 0): nothing to reduce, the index still checked (the op divided by F = 0: SIGFPE)."""
    src = torch.zeros(5, 0)
    srt, uns = (torch.tensor(v, dtype=index_dtype) for v in ([0, 0, 1, 1, 2], [2, 0, 1, 0, 1]))
    for sorted_, index in ((True, srt), (False, srt), (False, uns)):
        got = getattr(ops, f"scatter_{reduce}")(src, index, 3, sorted_)
        assert [t.shape for t in (got if isinstance(got, (tuple, list)) else [got])][0] == (3, 0)
    assert so.segment_coo(src, srt, dim_size=3, reduce=reduce).shape == (3, 0)
    assert so.scatter(src, uns, 0, dim_size=3, reduce=reduce).shape == (3, 0)
    with pytest.raises(ValueError, match=r"^torch_segops\.segment_coo: index must be sorted \(non-decreasing\)"):
        so.segment_coo(src, uns, dim_size=3, reduce=reduce)
    for fn in (lambda i: so.segment_coo(src, i, dim_size=3, reduce=reduce), lambda i: so.scatter(src, i, 0, dim_size=3, reduce=reduce)):
        with pytest.raises(ValueError, match=r"index must be < dim_size = 3, got index\[(\.\.\., )?4\] = 3"):
            fn(torch.tensor([0, 0, 1, 2, 3], dtype=index_dtype))


@pytest.mark.parametrize("size", [2**62, 2**63 - 1])
@pytest.mark.parametrize("fn", ["scatter", "scatter_max", "segment_coo"])
def test_absurd_dim_size_is_refused_naming_it(fn, size):
    src = torch.ones(3)
    index = torch.tensor([0, 1, 2])
    with pytest.raises(RuntimeError, match=rf"^torch_segops\.{fn}: dim_size = {size} is too large: the output would "
                                           r"hold [0-9.e+]+ elements \([0-9.e+]+ bytes\)$"):
        getattr(so, fn)(src, index, dim_size=size) if fn == "segment_coo" else getattr(so, fn)(src, index, 0,
                                                                                                  dim_size=size)


@pytest.mark.skipif(not os.path.exists("/proc/meminfo"), reason="needs Linux's /proc/meminfo")
@pytest.mark.parametrize("fn", ["scatter", "scatter_max", "segment_coo"])
def test_a_dim_size_past_int64_is_refused_naming_it(fn):
    src, index, size = torch.ones(3), torch.tensor([0, 1, 2]), 2**64
    with pytest.raises(ValueError, match=rf"^torch_segops\.{fn}: dim_size must be < 2\*\*63, got {size}$"):
        getattr(so, fn)(src, index, dim_size=size) if fn == "segment_coo" else getattr(so, fn)(src, index, 0, dim_size=size)


def test_an_output_larger_than_the_memory_left_is_refused_before_it_is_written():
    """A dim_size whose output (and arg) the machine cannot hold: a clear error naming the op, not the OOM killer."""
    with open("/proc/meminfo") as fh:
        available = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:"))
    size = available // 12 + 1  # float32 values and int64 arg: 12 bytes an output row
    with pytest.raises(RuntimeError, match=rf"^torch_segops\.scatter_max: out of memory: dim_size = {size} needs "):
        so.scatter_max(torch.ones(3), torch.tensor([size - 1, 0, size - 2]), 0, dim_size=size)


# ---- memory in proportion to the work ------------------------------------------------------------------

_PEAK = textwrap.dedent("""
    import sys, torch, torch_segops as so

    def status(key):
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key))

    fn, size, reduce = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    src = torch.ones(4)
    index = torch.tensor([size - 1, 0, size // 2, 3])
    call = {"scatter": lambda: so.scatter(src, index, 0, dim_size=size, reduce=reduce),
            "segment_coo": lambda: so.segment_coo(src, index.sort().values, dim_size=size, reduce=reduce),
            "scatter_softmax": lambda: so.scatter_softmax(src, index, 0, dim_size=size)}[fn]
    so.scatter(src, index % 5, 0, dim_size=5, reduce=reduce)  # the library's own first-call memory
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # the peak (VmHWM) restarts from the current resident set
    before = status("VmRSS:")
    result = call()
    print(status("VmHWM:") - before)
""")


@pytest.mark.parametrize("fn,reduce,outputs", [
    ("scatter", "sum", 1), ("scatter", "mul", 1), ("scatter", "max", 3), ("segment_coo", "sum", 1),
    ("segment_coo", "max", 3), ("scatter_softmax", "sum", 4)])
@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's /proc/self/clear_refs (VmHWM)")
def test_peak_memory_of_a_short_index_into_a_large_output(fn, reduce, outputs):
    """4 rows into dim_size = 2**22 (16 MiB of float32 output): the peak resident memory is the outputs (arg: twice
    a float32 output; softmax: its max, arg and sums) plus a little, never offsets or a histogram of dim_size
    int64 (before the scatter ops: 3x, and 9x for max and softmax, issue #36)."""
    size = 2**22
    cp = subprocess.run([sys.executable, "-c", _PEAK, fn, str(size), reduce], capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr[-3000:]
    peak = int(cp.stdout.split()[-1])
    bound = outputs * size * 4 * 1.25 + (8 << 20)
    assert peak <= bound, f"{fn} {reduce}: peak {peak / 2**20:.1f} MiB > {bound / 2**20:.1f} MiB"


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compile"])
def test_the_csr_route_reports_a_bad_value_at_its_position(monkeypatch, compiled):
    """Issue #36 item 8: the CSR route (CUDA's) made its offsets from the sorted copy of the index, so under
    torch.compile (where the wrapper's eager check does not run) a bad value was reported at its position there
    (index[..., 5] for the value at index[3] below). The offsets now come from the index as given."""
    import torch_segops._segment as segment
    monkeypatch.setattr(segment, "has_scatter_ops", lambda src: False)
    src, index = torch.randn(6, 3), torch.tensor([3, 1, 0, 9, 2, 1])
    f = lambda s, i: so.scatter(s, i, 0, dim_size=4, reduce="sum")  # noqa: E731
    if compiled:
        torch._dynamo.reset()
        f = torch.compile(f, fullgraph=True, backend="eager")
    with pytest.raises((ValueError, RuntimeError), match=r"index must be < dim_size = 4, got index\[(\.\.\., )?3\] = 9"):
        f(src, index)
    if compiled:
        torch._dynamo.reset()
