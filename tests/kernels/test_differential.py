"""Every public function against a float64 reference (issue #36), on inputs drawn from what broke before: +inf,
-inf, NaN, huge and tiny magnitudes, signed zeros and ties; int32 and int64 indexes, broadcast and not; out= with
and without gradients (out itself differentiable too); empty and large dim_size; segment lengths on both sides of
the CPU kernels' chunk sizes; every dtype, 16-bit included; and the composites' options (eps, unbiased, out).

The draws are seeded: SEGOPS_DIFF_SEED (default 0) selects another stream of cases and SEGOPS_DIFF_CASES (default
12) the number of cases per family, so a rerun with other seeds and shapes is one command:
    SEGOPS_DIFF_SEED=7 SEGOPS_DIFF_CASES=200 pytest tests/kernels/test_differential.py
A failure names the function, the variant and the case. References and tolerances: tests/differential.py.
"""

from __future__ import annotations

import math
import os
import zlib

import pytest
import torch

import differential as D
import reference as R
import torch_segops as so

SEED = int(os.environ.get("SEGOPS_DIFF_SEED", "0"))
CASES = int(os.environ.get("SEGOPS_DIFF_CASES", "12"))
ALL_DTYPES = D.FLOATS + D.INTS


def rng(*key) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(repr((SEED, *key)).encode()))


def pick(g: torch.Generator, options):
    return options[int(torch.randint(0, len(options), (1,), generator=g))]


def integer_ok(reduce: str) -> bool:
    return reduce not in ("logsumexp", "softmax")


# ---- the public functions, by family ---------------------------------------------------------------------
# (name, reduce, fn); a CSR fn is fn(src, indptr, out) (out None: not given); COO fn(src, index, out, dim_size);
# scatter fn(src, index, dim, out, dim_size, plan).

CSR = [(f"segment_csr[{r}]", r, lambda s, i, o, r=r: so.segment_csr(s, i, o, reduce=r))
       for r in ("sum", "add", "mean", "min", "max", "mul")] + [
    ("segment_sum_csr", "sum", so.segment_sum_csr), ("segment_add_csr", "sum", so.segment_add_csr),
    ("segment_mean_csr", "mean", so.segment_mean_csr), ("segment_min_csr", "min", so.segment_min_csr),
    ("segment_max_csr", "max", so.segment_max_csr),
    ("segment_logsumexp_csr", "logsumexp", lambda s, i, o: so.segment_logsumexp_csr(s, i)),
    ("segment_softmax_csr", "softmax", lambda s, i, o: so.segment_softmax_csr(s, i)),
]
COO = [(f"segment_coo[{r}]", r, lambda s, i, o, n, r=r: so.segment_coo(s, i, o, n, reduce=r))
       for r in ("sum", "add", "mean", "min", "max", "mul")] + [
    ("segment_sum_coo", "sum", so.segment_sum_coo), ("segment_add_coo", "sum", so.segment_add_coo),
    ("segment_mean_coo", "mean", so.segment_mean_coo), ("segment_min_coo", "min", so.segment_min_coo),
    ("segment_max_coo", "max", so.segment_max_coo),
]
SCATTER = [(f"scatter[{r}]", r, lambda s, i, d, o, n, p, r=r: so.scatter(s, i, d, o, n, reduce=r, plan=p))
           for r in ("sum", "add", "mean", "min", "max", "mul")] + [
    (name, r, lambda s, i, d, o, n, p, f=getattr(so, name): f(s, i, d, o, n, plan=p))
    for name, r in (("scatter_sum", "sum"), ("scatter_add", "sum"), ("scatter_mean", "mean"),
                    ("scatter_min", "min"), ("scatter_max", "max"), ("scatter_mul", "mul"))
]
COMPOSITES = ("logsumexp", "softmax", "log_softmax", "std")
OTHERS = ("gather_csr", "gather_coo", "scatter_plan")  # checked inside the families above


def test_every_public_function_is_checked():
    """A new public op function fails here until the differential draws it."""
    checked = {n.split("[")[0] for n, _, _ in CSR + COO + SCATTER}
    checked |= {f"scatter_{c}" for c in COMPOSITES} | set(OTHERS)
    public = {n for n in so.__all__ if n.split("_")[0] in ("segment", "gather", "scatter") and callable(getattr(so, n))}
    assert public == checked, f"not in the differential: {sorted(public - checked)}; gone: {sorted(checked - public)}"


# ---- drawing --------------------------------------------------------------------------------------------


def draw_values(g, shape, dtype, reduce):
    style = pick(g, D.STYLES)
    if reduce == "mul":
        return D.factors(shape, dtype, g, style), style
    return D.values(shape, dtype, g, style), style


def grad_values(g, shape, dtype, reduce):
    """Inputs whose gradient the reference defines the same way: every special for the linear reductions and
    min/max (the gradient does not depend on the value, or goes to the first NaN), no inf/NaN for the others
    (mul: zeros, the hard case of its gradient)."""
    if reduce in ("sum", "add", "mean", "min", "max", "gather"):
        return D.values(shape, dtype, g, pick(g, D.STYLES))
    if reduce == "mul":
        x = D.factors(shape, dtype, g, "plain").double()
        return torch.where(torch.rand(list(shape), generator=g) < 0.15, 0.0, x).to(dtype)
    return D.values(shape, dtype, g, pick(g, ("plain", "specials", "ties")), finite_only=True)


def draw_indptr(g, lead, n_dim, n_seg, dtype):
    """indptr of [*lead, n_seg + 1] inside [0, n_dim]: lengths from 0 to 9 and around 32, a start past 0."""
    rows = []
    for _ in range(math.prod(lead) if lead else 1):
        lengths = [pick(g, (0, 1, 2, 3, 5, 8, 9, 31, 32, 33)) for _ in range(n_seg)]
        total = sum(lengths)
        if total > n_dim:
            lengths = [min(length, n_dim // n_seg) for length in lengths]
            total = sum(lengths)
        start = int(torch.randint(0, n_dim - total + 1, (1,), generator=g)) if n_dim >= total else 0
        rows.append(R.indptr_from_lengths(lengths, start))
    return torch.stack(rows).reshape(*lead, n_seg + 1).to(dtype)


def case_csr(i):
    g = rng("csr", i)
    dtype = pick(g, ALL_DTYPES)
    batch = [int(torch.randint(1, 3, (1,), generator=g)) for _ in range(pick(g, (0, 0, 1)))]
    lead = [pick(g, (1, b)) for b in batch]
    n_seg = pick(g, (0, 1, 3, 6))
    feat = pick(g, ((), (1,), (3,), (2, 5)))
    n_dim = pick(g, (0, 4, 40, 120))
    indptr = draw_indptr(g, lead, n_dim, n_seg, pick(g, D.INTS))
    return g, dtype, batch, indptr, n_dim, feat


def make_out(g, shape, dtype, reduce):
    return draw_values(g, shape, dtype, reduce)[0]


def check_values(got, exp: D.Expected, what):
    """Values, and arg where the function returns one (segment_csr(reduce="max") returns the values alone)."""
    values, arg = (got if isinstance(got, tuple) else (got, None))
    D.assert_matches(values, exp.values, exp.tol, what)
    if arg is not None:
        D.assert_matches(arg, exp.arg, 0, what + " arg")


def weights(g, like: torch.Tensor) -> torch.Tensor:
    return torch.randn(list(like.shape), generator=g, dtype=torch.float64)


def backward_pair(result, want, g):
    """Upstream weights applied to our result and to the reference (float64), then backward on both."""
    values = result[0] if isinstance(result, tuple) else result
    w = weights(g, values)
    for loss in ((values * w.to(values.dtype)).sum(), (want * w).sum()):
        if loss.requires_grad:  # (nothing to differentiate where there are no elements)
            loss.backward()


@pytest.mark.parametrize("i", range(CASES))
def test_csr(i):
    g, dtype, batch, indptr, n_dim, feat = case_csr(i)
    dim = len(batch)
    shape = [*batch, n_dim, *feat]
    reduced = list(shape)
    reduced[dim] = indptr.size(-1) - 1
    for name, reduce, fn in CSR:
        if not dtype.is_floating_point and not integer_ok(reduce):
            continue
        src, style = draw_values(g, shape, dtype, reduce)
        what = f"{name} case {i}: {dtype} src={shape} indptr={tuple(indptr.shape)}/{indptr.dtype} {style}"
        if reduce == "softmax":
            exp = D.segment_softmax(src, indptr)
        else:
            exp = D.segment(src, indptr, reduce)
        check_values(fn(src, indptr, None), exp, what)
        if reduce in ("logsumexp", "softmax"):
            continue
        out = make_out(g, reduced, dtype, reduce)
        got = fn(src, indptr, out)
        assert (got[0] if isinstance(got, tuple) else got) is out, f"{what}: out= must return out"
        check_values(got, exp, what + " out=")
    if dtype in (torch.float32, torch.float64):
        grads_csr(g, dtype, shape, indptr, reduced, i)


def grads_csr(g, dtype, shape, indptr, reduced, i):
    """Gradients against the reference's, without and with out= (out overwritten: its old values get none)."""
    eps = torch.finfo(dtype).eps
    for name, reduce, fn in CSR:
        src = grad_values(g, shape, dtype, reduce).requires_grad_()
        ref_src = src.detach().double().requires_grad_()
        for variant in ("plain", "out", "out with grad"):
            src.grad, ref_src.grad = None, None
            what = f"{name} gradient ({variant}) case {i}: {dtype} src={shape} indptr={tuple(indptr.shape)}"
            if variant == "plain":
                result = fn(src, indptr, None)
            elif reduce in ("logsumexp", "softmax"):
                continue
            else:
                base = torch.randn(reduced, generator=g, dtype=dtype).requires_grad_(variant == "out with grad")
                out = base.clone() if base.requires_grad else base
                result = fn(src, indptr, out)
            if reduce == "softmax":
                want = R.segment_softmax(ref_src, indptr)
            else:
                want = R.segment(ref_src, indptr, reduce)[0]
            backward_pair(result, want, g)
            D.assert_grad_matches(src.grad, ref_src.grad, eps, what)
            if variant == "out with grad":
                assert base.grad is None or not bool(base.grad.any()), f"{what}: out's old values have no gradient"


@pytest.mark.parametrize("dtype", D.FLOATS)
@pytest.mark.parametrize("features", [1, 16])
def test_csr_segments_around_the_chunk_sizes(dtype, features):
    """Segments of the CPU kernels' chunk size (32768 elements: 32768 rows of one feature, 2048 of 16) and one
    more and one less, one of several chunks, and the 32-row NaN blocks, each holding one pattern of specials
    (a +inf in a long segment gave a NaN logsumexp: issue #36 item 1)."""
    g = rng("long", str(dtype), features)
    chunk = 32768 // features
    patterns = ("+inf", "-inf", "nan", "all -inf", "+inf and -inf", "huge", "plain")
    sizes = [chunk - 1, chunk + 1, 3 * chunk + 5, 33]
    lengths = [n for n in sizes for _ in patterns]  # every pattern in a segment of every size
    indptr = R.indptr_from_lengths(lengths, start=3)
    n = int(indptr[-1]) + 2
    shape = [n, features] if features > 1 else [n]
    for reduce in ("sum", "mean", "min", "max", "mul", "logsumexp", "softmax"):
        src = (D.factors(shape, dtype, g, "plain") if reduce == "mul" else D.values(shape, dtype, g, "plain")).double()
        for s in range(len(lengths)):
            pattern = patterns[s % len(patterns)]
            lo, hi = int(indptr[s]), int(indptr[s + 1])
            at = lo + int(torch.randint(0, hi - lo, (1,), generator=g))
            if pattern == "+inf":
                src[at] = math.inf
            elif pattern == "-inf":
                src[at] = -math.inf
            elif pattern == "nan":
                src[at] = math.nan
            elif pattern == "all -inf":
                src[lo:hi] = -math.inf
            elif pattern == "+inf and -inf":
                src[at], src[lo] = math.inf, -math.inf
            elif pattern == "huge":
                src[at] = D.HUGE[dtype]
        src = src.to(dtype)
        what = f"{reduce} {dtype} features={features} lengths {sizes} x patterns {patterns}"
        if reduce == "softmax":
            check_values(so.segment_softmax_csr(src, indptr), D.segment_softmax(src, indptr), what)
        elif reduce == "logsumexp":
            check_values(so.segment_logsumexp_csr(src, indptr), D.segment(src, indptr, reduce), what)
        else:
            check_values(so.segment_csr(src, indptr, reduce=reduce), D.segment(src, indptr, reduce), what)


@pytest.mark.parametrize("i", range(CASES))
def test_gather_csr(i):
    g = rng("gather", i)
    dtype = pick(g, ALL_DTYPES)
    batch = [pick(g, (1, 2))] if pick(g, (True, False)) else []
    lead = [pick(g, (1, b)) for b in batch]
    n_seg = pick(g, (0, 2, 5))
    indptr = draw_indptr(g, lead, 60, n_seg, pick(g, D.INTS))
    feat = pick(g, ((), (3,), (2, 2)))
    src, style = draw_values(g, [*batch, n_seg, *feat], dtype, "sum")
    end = int(indptr[..., -1].max()) if indptr.numel() else 0
    for size in (None, end, end + 4):
        what = f"gather_csr case {i}: {dtype} src={list(src.shape)} indptr={tuple(indptr.shape)} size={size} {style}"
        check_values(so.gather_csr(src, indptr, size=size), D.gather(src, indptr, size), what)
        out = D.values(list(R.gather(src, indptr, size).shape), dtype, g, "plain")
        assert so.gather_csr(src, indptr, out=out) is out
        check_values(out, D.gather(src, indptr, out.size(len(batch))), what + " out=")
    if dtype in (torch.float32, torch.float64):
        x = src.detach().clone().requires_grad_()
        ref = src.detach().double().requires_grad_()
        backward_pair(so.gather_csr(x, indptr, size=end + 2), R.gather(ref, indptr, end + 2), g)
        D.assert_grad_matches(x.grad, ref.grad, torch.finfo(dtype).eps, f"gather_csr gradient case {i}")


# ---- COO ------------------------------------------------------------------------------------------------


def case_coo(i):
    g = rng("coo", i)
    dtype = pick(g, ALL_DTYPES)
    batch = [pick(g, (1, 2, 3))] if pick(g, (True, False)) else []
    lead = [pick(g, (1, b)) for b in batch]
    n_rows = pick(g, (0, 1, 7, 40))
    n_seg = pick(g, (1, 4, 9))
    index = torch.randint(0, n_seg, (*lead, n_rows), generator=g).sort(-1).values.to(pick(g, D.INTS))
    feat = pick(g, ((), (1,), (4,), (2, 3)))
    return g, dtype, batch, index, n_seg, feat


@pytest.mark.parametrize("i", range(CASES))
def test_coo(i):
    g, dtype, batch, index, n_seg, feat = case_coo(i)
    dim = len(batch)
    shape = [*batch, index.size(-1), *feat]
    for name, reduce, fn in COO:
        src, style = draw_values(g, shape, dtype, reduce)
        for dim_size in (None, n_seg, n_seg + 1000):
            indptr = R.coo_to_indptr(index, src, dim_size)
            exp = D.segment(src, indptr, reduce)
            what = (f"{name} case {i}: {dtype} src={shape} index={tuple(index.shape)}/{index.dtype} "
                    f"dim_size={dim_size} {style}")
            check_values(fn(src, index, None, dim_size), exp, what)
        out = make_out(g, list(exp.values.shape), dtype, reduce)
        counts = D.lengths_of(indptr, exp.values)
        sums = R.segment(D.wide(src), indptr, "sum")[0] if reduce == "mean" else None
        want = D.combine(out, exp, reduce, counts, src.size(dim), "trunc", sums)
        got = fn(src, index, out, None)
        assert (got[0] if isinstance(got, tuple) else got) is out, f"{what}: out= must return out"
        check_values(got, want, what + " out=")
    check_gather_coo(g, dtype, batch, index, feat, i)
    if dtype in (torch.float32, torch.float64):
        grads_reduce_into(g, dtype, shape, i, "coo", index)


def check_gather_coo(g, dtype, batch, index, feat, i):
    n_src = int(index.max()) + 1 if index.numel() else 1
    src, style = draw_values(g, [*batch, n_src, *feat], dtype, "sum")
    what = f"gather_coo case {i}: {dtype} src={list(src.shape)} index={tuple(index.shape)}/{index.dtype} {style}"
    want = R.gather_coo(D.wide(src), index)
    check_values(so.gather_coo(src, index), D.Expected(want), what)
    out = D.values(list(want.shape), dtype, g, "plain")
    assert so.gather_coo(src, index, out=out) is out
    check_values(out, D.Expected(want), what + " out=")
    if dtype in (torch.float32, torch.float64):
        x = src.detach().clone().requires_grad_()
        ref = src.detach().double().requires_grad_()
        backward_pair(so.gather_coo(x, index), R.gather_coo(ref, index), g)
        D.assert_grad_matches(x.grad, ref.grad, torch.finfo(dtype).eps, what + " gradient")


def grads_reduce_into(g, dtype, shape, i, family, index, dim=None, plan=None):
    """Gradients of the COO / scatter reductions, plain and reduced into an out= that is itself differentiable."""
    eps = torch.finfo(dtype).eps
    table = COO if family == "coo" else SCATTER
    for name, reduce, fn in table:
        src = grad_values(g, shape, dtype, reduce).requires_grad_()
        ref_src = src.detach().double().requires_grad_()
        if family == "coo":
            d = index.dim() - 1
            indptr = R.coo_to_indptr(index, src, None)
            reference = lambda: R.segment(ref_src, indptr, reduce)  # noqa: E731
            call = lambda s, o: fn(s, index, o, None)  # noqa: E731
            rounding = "trunc"
        else:
            d = dim % len(shape)
            size = int(index.max()) + 1 if index.numel() else 0
            reference = lambda: R.scatter(ref_src, index, dim, size, reduce)  # noqa: E731
            call = lambda s, o: fn(s, index, dim, o, None, plan)  # noqa: E731
            rounding = "floor"
        what = f"{name} gradient case {i}: {dtype} src={shape} index={tuple(index.shape)}"
        ref_values, ref_arg = reference()
        counts = D.lengths_of(indptr, ref_values) if family == "coo" else \
            R.scatter(torch.ones_like(ref_src.detach()), index, dim, size, "sum")[0]
        backward_pair(call(src, None), ref_values, g)
        D.assert_grad_matches(src.grad, ref_src.grad, eps, what)
        src.grad, ref_src.grad = None, None
        base = D.values(list(ref_values.shape), dtype, g, "plain", finite_only=True).requires_grad_()
        ref_base = base.detach().double().requires_grad_()
        result = call(src, base.clone())
        ref_values, ref_arg = reference()
        want, _ = D.combined(ref_base.clone(), ref_values, ref_arg, reduce, counts, src.size(d), rounding)
        backward_pair(result, want, g)
        D.assert_grad_matches(src.grad, ref_src.grad, eps, what + " out=")
        D.assert_grad_matches(base.grad, ref_base.grad, eps, what + " out='s own gradient")


# ---- scatter --------------------------------------------------------------------------------------------


def case_scatter(i):
    g = rng("scatter", i)
    dtype = pick(g, ALL_DTYPES)
    ndim = pick(g, (1, 2, 3))
    shape = [pick(g, (0, 1, 3, 6, 20)) if k == 0 else pick(g, (1, 2, 4)) for k in range(ndim)]
    shape = shape[1:] + shape[:1] if pick(g, (True, False)) else shape
    dim = pick(g, list(range(-ndim, ndim)))
    d = dim % ndim
    kind = pick(g, ("1d", "1d", "leading", "full"))
    if kind == "1d":
        index_shape = [shape[d]]
    elif kind == "leading":
        index_shape = [pick(g, (1, shape[k])) for k in range(d)] + [shape[d]]
    else:
        index_shape = list(shape)
    n_out = pick(g, (1, 3, 7))
    index = torch.randint(0, n_out, index_shape, generator=g).to(pick(g, D.INTS))
    return g, dtype, shape, dim, kind, index, n_out


@pytest.mark.parametrize("i", range(CASES * 2))
def test_scatter(i):
    g, dtype, shape, dim, kind, index, n_out = case_scatter(i)
    d = dim % len(shape)
    for name, reduce, fn in SCATTER:
        src, style = draw_values(g, shape, dtype, reduce)
        for dim_size in (None, n_out, n_out + 1000):
            size = dim_size if dim_size is not None else (int(index.max()) + 1 if index.numel() else 0)
            if dim_size is None and src.numel() == 0:
                size = 0  # pytorch_scatter reads the size from the index expanded to src: nothing
            exp = D.scatter(src, index, dim, size, reduce, n_out)
            what = (f"{name} case {i}: {dtype} src={shape} dim={dim} index={tuple(index.shape)}/{index.dtype} "
                    f"({kind}) dim_size={dim_size} {style}")
            check_values(fn(src, index, dim, None, dim_size, None), exp, what)
            if kind == "1d" and dim_size is not None:
                plan = so.scatter_plan(index, dim_size)
                check_values(fn(src, index, dim, None, None, plan), exp, what + " plan=")
        out = make_out(g, list(exp.values.shape), dtype, reduce)
        sums = D.scatter(src, index, dim, size, "sum", n_out).values if reduce == "mean" else None
        want = D.combine(out, exp, reduce, exp.extra["counts"], src.size(d), "floor", sums)
        got = fn(src, index, dim, out, None, None)
        assert (got[0] if isinstance(got, tuple) else got) is out, f"{what}: out= must return out"
        check_values(got, want, what + " out=")
    if dtype in (torch.float32, torch.float64) and math.prod(shape) > 0:
        plan = so.scatter_plan(index, int(index.max()) + 1) if kind == "1d" and pick(g, (True, False)) else None
        grads_reduce_into(g, dtype, shape, i, "scatter", index, dim, plan)


def test_empty_and_large_dim_size():
    """dim_size 0 with nothing to scatter; a dim_size far past the index (the extra targets empty: 0, 1 for mul, arg
    src.size(dim)); both through out= too."""
    for dtype in (torch.float32, torch.int32):
        empty = torch.empty(0, 3, dtype=dtype)
        for index_dtype in D.INTS:
            none = torch.empty(0, dtype=index_dtype)
            for name, reduce, fn in SCATTER:
                got = fn(empty, none, 0, None, 0, None)
                values = got[0] if isinstance(got, tuple) else got
                assert values.shape == (0, 3), name
            for name, reduce, fn in COO:
                got = fn(empty, none, None, 0)
                assert (got[0] if isinstance(got, tuple) else got).shape == (0, 3), name
    g = rng("large")
    src = D.values([5, 2], torch.float32, g, "specials")
    index = torch.tensor([3, 0, 3, 1, 0], dtype=torch.int32)
    for name, reduce, fn in SCATTER:
        x = D.factors([5, 2], torch.float32, g, "specials") if reduce == "mul" else src
        exp = D.scatter(x, index, 0, 4096, reduce, 4)
        check_values(fn(x, index, 0, None, 4096, None), exp, f"{name} dim_size=4096")
        check_values(fn(x, index, 0, None, None, so.scatter_plan(index, 4096)), exp, f"{name} plan dim_size=4096")
    for name, reduce, fn in COO:
        x = D.factors([5, 2], torch.float32, g, "specials") if reduce == "mul" else src
        sorted_index = index.sort().values
        exp = D.segment(x, R.coo_to_indptr(sorted_index, x, 4096), reduce)
        check_values(fn(x, sorted_index, None, 4096), exp, f"{name} dim_size=4096")


# ---- composites -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("i", range(CASES * 2))
def test_composites(i):
    g, dtype, shape, dim, kind, index, n_out = case_scatter(i)
    if not dtype.is_floating_point:
        dtype = pick(g, D.FLOATS)
    d = dim % len(shape)
    dim_size = pick(g, (None, n_out, n_out + 2))
    size = dim_size if dim_size is not None else (int(index.max()) + 1 if index.numel() else 0)
    if dim_size is None and math.prod(shape) == 0:
        size = 0
    out_shape = list(shape)
    out_shape[d] = max(size, n_out)  # an out= must fit the index even where src is empty (its values are checked)
    for name in COMPOSITES:
        fn = getattr(so, f"scatter_{name}")
        src, style = draw_values(g, shape, dtype, name)
        eps = pick(g, (1e-12, 1e-3, 0.0))
        unbiased = pick(g, (True, False))
        opts = {"eps": eps} if name in ("logsumexp", "log_softmax") else {"unbiased": unbiased} if name == "std" else {}
        what = (f"scatter_{name} case {i}: {dtype} src={shape} dim={dim} index={tuple(index.shape)}/{index.dtype} "
                f"({kind}) dim_size={dim_size} {opts} {style}")
        exp = D.composite(name, src, index, dim, size, eps=eps, unbiased=unbiased)
        check_values(fn(src, index, dim, dim_size=dim_size, **opts), exp, what)
        if name in ("logsumexp", "std"):
            out = D.values(out_shape, dtype, g, pick(g, ("plain", "specials")))
            if name == "std":
                out = out.abs()
            exp = D.composite(name, src, index, dim, out_shape[d], eps=eps, unbiased=unbiased, out=out)
            got = fn(src, index, dim, out=out, **opts)
            assert got is out, f"{what}: out= must return out"
            check_values(got, exp, what + " out=")
        if dtype in (torch.float32, torch.float64) and math.prod(shape) > 0:
            grads_composite(g, name, fn, dtype, shape, index, dim, dim_size, size, opts, eps, unbiased, out_shape, what)


def grads_composite(g, name, fn, dtype, shape, index, dim, dim_size, size, opts, eps, unbiased, out_shape, what):
    finite = D.values(shape, dtype, g, pick(g, ("plain", "specials", "ties")), finite_only=True)
    if name in ("logsumexp", "softmax", "log_softmax"):
        finite = torch.where(torch.rand(shape, generator=g) < 0.1, -math.inf, finite.double()).to(dtype)
    if name == "std":  # a finite variance: no huge values whose squares overflow
        finite = finite.clamp(-1e6, 1e6)
    src = finite.requires_grad_()
    out = None
    if name in ("logsumexp", "std"):
        out = D.values(out_shape, dtype, g, "plain").abs().requires_grad_()
    exp = D.composite(name, src, index, dim, size if out is None else out_shape[dim % len(shape)], eps=eps,
                      unbiased=unbiased, out=out)
    result = fn(src, index, dim, dim_size=dim_size, **opts) if out is None else fn(src, index, dim, out=out.clone(),
                                                                                     **opts)
    backward_pair(result, exp.values, g)
    ref_src, ref_out = exp.extra["inputs"]
    tol = torch.finfo(dtype).eps
    D.assert_grad_matches(src.grad, ref_src.grad, tol, what + " gradient", factor=256)
    if out is not None:
        D.assert_grad_matches(out.grad, ref_out.grad, tol, what + " out='s gradient", factor=256)
