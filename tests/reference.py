"""Plain-PyTorch reference implementations of the torch_segops operations.

Written to be obviously correct, not fast: every function loops over the leading (batch) index and
over the segments, and reduces one segment with ordinary torch ops. Everything is built from
differentiable torch ops, so the references also give reference gradients through autograd.

Conventions shared with torch_segops (docs/design.md, README):
- ``dim = indptr.dim() - 1``; leading dims of indptr broadcast against ``src.shape[:dim]``;
  trailing dims of src (after ``dim``) are features.
- Output size along ``dim`` is ``indptr.size(-1) - 1``; empty segments give 0 (1 for mul); ``arg`` of an empty
  segment is ``src.size(dim)``; ``arg`` holds absolute positions along ``dim``; ties go to the first.
- float16 / bfloat16 are computed in float32 and the result is cast back to the input dtype.
"""

from __future__ import annotations

import itertools
import math

import torch

LOW_PRECISION = (torch.float16, torch.bfloat16)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in LOW_PRECISION else dtype


def _batch_shape(src: torch.Tensor, indptr: torch.Tensor) -> tuple[int, ...]:
    dim = indptr.dim() - 1
    assert 0 <= dim < src.dim(), "reference: indptr.dim() must be in [1, src.dim()]"
    return tuple(src.shape[:dim])


def _expanded_indptr(src: torch.Tensor, indptr: torch.Tensor) -> list[tuple[tuple[int, ...], list[int]]]:
    """[(batch index, list of the indptr values that apply to it)] for every batch index of src."""
    batch = _batch_shape(src, indptr)
    ip = indptr.to("cpu", torch.int64).expand(*batch, indptr.size(-1))
    return [(idx, ip[idx].tolist()) for idx in itertools.product(*[range(n) for n in batch])]


def segment(src: torch.Tensor, indptr: torch.Tensor, reduce: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Reference segment reduction. Returns (out, arg); arg is None unless reduce is min/max.

    reduce in {"sum", "add", "mean", "mul", "min", "max", "logsumexp"}.
    """
    if reduce == "add":
        reduce = "sum"
    dim = indptr.dim() - 1
    n_seg = indptr.size(-1) - 1
    batch = _batch_shape(src, indptr)
    feat = tuple(src.shape[dim + 1:])
    cdt = _compute_dtype(src.dtype)
    x = src.to(cdt)
    outs, args = [], []
    for idx, ptr in _expanded_indptr(src, indptr):
        row = x[idx] if idx else x  # shape (src.size(dim), *feat)
        for i in range(n_seg):
            lo, hi = ptr[i], ptr[i + 1]
            seg = row[lo:hi]
            count = hi - lo
            if count == 0:
                empty = torch.ones if reduce == "mul" else torch.zeros
                outs.append(empty(feat, dtype=cdt, device=src.device))
                args.append(torch.full(feat, src.size(dim), dtype=torch.int64, device=src.device))
                continue
            if reduce == "sum":
                outs.append(seg.sum(0).to(cdt))
            elif reduce == "mean" and not cdt.is_floating_point:
                # pytorch_scatter's integer mean: C++ integer division, truncating toward zero
                outs.append(torch.div(seg.sum(0), count, rounding_mode="trunc").to(cdt))
            elif reduce == "mean":
                outs.append(seg.sum(0).to(cdt) / count)
            elif reduce == "logsumexp":
                outs.append(torch.logsumexp(seg, dim=0))
            elif reduce == "mul":
                outs.append(seg.prod(0, dtype=cdt))
            elif reduce in ("min", "max"):
                best = seg.amin(0) if reduce == "min" else seg.amax(0)
                # first position holding the extreme value (ties go to the first position)
                pos = torch.arange(count, device=src.device).view(-1, *[1] * len(feat)).expand(seg.shape)
                hit = (seg == best) | (seg.isnan() & best.isnan())  # a NaN extreme: the first NaN
                first = torch.where(hit, pos, count).amin(0)
                # value taken by indexing, so the gradient flows to exactly that position
                outs.append(seg.gather(0, first.unsqueeze(0)).squeeze(0))
                args.append(first + lo)
            else:
                raise ValueError(f"reference: unknown reduce {reduce!r}")
    out = torch.stack(outs) if outs else torch.zeros((0, *feat), dtype=cdt, device=src.device)
    out = out.reshape(*batch, n_seg, *feat).to(src.dtype)
    if reduce not in ("min", "max"):
        return out, None
    arg = torch.stack(args) if args else torch.zeros((0, *feat), dtype=torch.int64, device=src.device)
    return out, arg.reshape(*batch, n_seg, *feat)


def segment_softmax(src: torch.Tensor, indptr: torch.Tensor) -> torch.Tensor:
    """Softmax over each segment along dim; rows outside [indptr[0], indptr[-1]) are 0."""
    dim = indptr.dim() - 1
    batch = _batch_shape(src, indptr)
    cdt = _compute_dtype(src.dtype)
    x = src.to(cdt)
    rows = []
    for idx, ptr in _expanded_indptr(src, indptr):
        row = x[idx] if idx else x
        pieces = [torch.zeros_like(row[: ptr[0]])]
        for i in range(len(ptr) - 1):
            pieces.append(torch.softmax(row[ptr[i]:ptr[i + 1]], dim=0))
        pieces.append(torch.zeros_like(row[ptr[-1]:]))
        rows.append(torch.cat(pieces, 0))
    out = torch.stack(rows) if rows else torch.zeros((0, *src.shape[dim:]), dtype=cdt, device=src.device)
    return out.reshape(*batch, *src.shape[dim:]).to(src.dtype)


def gather(src: torch.Tensor, indptr: torch.Tensor, size: int | None = None) -> torch.Tensor:
    """Output row r along dim holds src row i for indptr[i] <= r < indptr[i+1]; other rows are 0.

    Output size along dim: ``size`` if given, else max(indptr[..., -1]).
    """
    dim = indptr.dim() - 1
    n_seg = indptr.size(-1) - 1
    assert src.size(dim) == n_seg, "reference gather: src.size(dim) must be indptr.size(-1) - 1"
    batch = _batch_shape(src, indptr)
    feat = tuple(src.shape[dim + 1:])
    if size is None:
        size = int(indptr[..., -1].max()) if indptr.numel() else 0
    rows = []
    for idx, ptr in _expanded_indptr(src, indptr):
        row = src[idx] if idx else src  # shape (n_seg, *feat)
        pieces = [torch.zeros((ptr[0], *feat), dtype=src.dtype, device=src.device)]
        for i in range(n_seg):
            pieces.append(row[i].unsqueeze(0).expand(ptr[i + 1] - ptr[i], *feat))
        full = torch.cat(pieces, 0)
        if full.size(0) < size:
            full = torch.cat([full, torch.zeros((size - full.size(0), *feat), dtype=src.dtype, device=src.device)])
        rows.append(full[:size])
    out = torch.stack(rows) if rows else torch.zeros((0, size, *feat), dtype=src.dtype, device=src.device)
    return out.reshape(*batch, size, *feat)


def coo_to_indptr(index: torch.Tensor, src: torch.Tensor, dim_size: int | None = None) -> torch.Tensor:
    """CSR offsets of a sorted COO index (pytorch_scatter's segment_coo layout), by counting: the
    reduction runs along dim = index.dim() - 1; leading dims of index of size 1 broadcast against src
    and a size-1 last dim repeats over src.size(dim). Output size: dim_size or max(index) + 1."""
    dim = index.dim() - 1
    index = index.to("cpu", torch.int64).expand(*index.shape[:-1], src.size(dim))
    size = dim_size if dim_size is not None else (int(index.max()) + 1 if index.numel() else 0)
    rows = index.reshape(math.prod(index.shape[:-1]), index.size(-1))
    counts = [torch.bincount(r, minlength=size)[:size] for r in rows]
    flat = torch.stack([torch.cat([torch.zeros(1, dtype=torch.int64), c.cumsum(0)]) for c in counts]) \
        if counts else torch.zeros((0, size + 1), dtype=torch.int64)
    return flat.reshape(*index.shape[:-1], size + 1)


def gather_coo(src: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Output row e along dim = index.dim() - 1 is src's row index[e] (torch.gather after broadcasting)."""
    dim = index.dim() - 1
    lead = [src.size(d) for d in range(dim)]
    idx = index.to(src.device, torch.int64).expand(*lead, index.size(-1))
    idx = idx.reshape(*idx.shape, *[1] * (src.dim() - dim - 1)).expand(*lead, index.size(-1), *src.shape[dim + 1:])
    return src.gather(dim, idx)


def broadcast_index(index: torch.Tensor, src: torch.Tensor, dim: int) -> torch.Tensor:
    """pytorch_scatter's documented broadcast of index against src: a 1-D index lies along dim, a
    longer one gets trailing size-1 dims; then it is expanded to src.shape."""
    dim = dim % src.dim()
    if index.dim() == 1:
        shape = [1] * src.dim()
        shape[dim] = index.numel()
        index = index.view(shape)
    else:
        index = index.view(*index.shape, *[1] * (src.dim() - index.dim()))
    return index.expand(src.shape)


def scatter(src: torch.Tensor, index: torch.Tensor, dim: int, dim_size: int | None, reduce: str):
    """Reference scatter by masks: for every position of the other dims and every target t, the values
    of src whose index is t, in src order. Returns (out, arg) (arg None unless min/max); empty targets
    give 0 (1 for mul) and arg src.size(dim); ties and NaN as in `segment`; integer mean divides with floor
    (pytorch_scatter's scatter_mean)."""
    dim = dim % src.dim()
    idx = broadcast_index(index.to(src.device, torch.int64), src, dim).movedim(dim, -1)
    x = src.movedim(dim, -1).to(_compute_dtype(src.dtype))
    n = src.size(dim)
    size = dim_size if dim_size is not None else (int(idx.max()) + 1 if idx.numel() else 0)
    other = idx.shape[:-1]
    out = (torch.ones if reduce == "mul" else torch.zeros)((*other, size), dtype=x.dtype)
    arg = torch.full((*other, size), n, dtype=torch.int64)
    for p in itertools.product(*[range(k) for k in other]):
        for t in range(size):
            pos = (idx[p] == t).nonzero().flatten()
            if pos.numel() == 0:
                continue
            seg = x[p][pos]
            if reduce in ("sum", "add"):
                out[p + (t,)] = seg.sum()
            elif reduce == "mul":
                out[p + (t,)] = seg.prod(dtype=x.dtype)
            elif reduce == "mean":
                total = seg.sum()
                out[p + (t,)] = total / pos.numel() if x.is_floating_point() else torch.div(total, pos.numel(), rounding_mode="floor")
            else:
                best = seg.amin() if reduce == "min" else seg.amax()
                hit = (seg == best) | (seg.isnan() & best.isnan())
                first = int(hit.nonzero()[0])
                out[p + (t,)] = seg[first]
                arg[p + (t,)] = pos[first]
    out = out.to(src.dtype).movedim(-1, dim)
    return out, (arg.movedim(-1, dim) if reduce in ("min", "max") else None)


# ---------------------------------------------------------------------------------------------
# Input generation helpers shared by the tests and the benchmarks (not references themselves).

def indptr_from_lengths(lengths, start: int = 0, dtype=torch.int64) -> torch.Tensor:
    """indptr = start + cumsum([0] + lengths)."""
    lengths = torch.as_tensor(list(lengths) if not torch.is_tensor(lengths) else lengths, dtype=torch.int64)
    return torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]).add_(start).to(dtype)


def index_from_indptr(indptr: torch.Tensor, n_rows: int | None = None) -> torch.Tensor:
    """Segment id of every row in [indptr[0], indptr[-1]) (1-D indptr)."""
    lengths = indptr[1:] - indptr[:-1]
    return torch.repeat_interleave(torch.arange(lengths.numel(), device=indptr.device), lengths)


# ---------------------------------------------------------------------------------------------
# Tolerances. Every comparison is elementwise: |actual - expected| <= tol, with tol derived from how
# the result is computed (documented per function), never a blanket "close enough".

def reduce_into(fn, src, index, out_values, expected, **kwargs):
    """fn(src, index, out=out, **kwargs) with out = tensor(out_values): checks that the values are returned in
    out itself (for min/max, the first of the pair) and equal `expected`; returns fn's result."""
    out = torch.tensor(out_values, dtype=src.dtype)
    result = fn(src, index, out=out, **kwargs)
    values = result[0] if isinstance(result, tuple) else result
    assert values is out, f"{fn.__name__}: the result is not the out tensor"
    assert out.tolist() == expected, f"{fn.__name__}: {out.tolist()} != {expected}"
    return result


def flat(result) -> list:
    """An op's result as a list of tensors (min/max return (values, arg))."""
    return list(result) if isinstance(result, tuple) else [result]


def compile_and_compare(fn, args, backend, dynamic=None, grad_wrt=0, rtol=None, atol=None):
    """Compile fn with fullgraph=True (a graph break raises), check exactly one frame was compiled,
    and compare outputs and (for a floating input args[grad_wrt]) gradients with eager (rtol/atol: those of
    torch.testing.assert_close, its defaults when None). Returns (compiled, counter)."""
    import torch._dynamo
    import torch._dynamo.testing

    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
    compiled = torch.compile(fn, backend=counter, fullgraph=True, dynamic=dynamic)
    x = args[grad_wrt]
    floating = x.is_floating_point()
    xe = x.detach().clone().requires_grad_(floating)
    xc = x.detach().clone().requires_grad_(floating)
    eager_args = list(args)
    eager_args[grad_wrt] = xe
    comp_args = list(args)
    comp_args[grad_wrt] = xc
    expected = flat(fn(*eager_args))
    got = flat(compiled(*comp_args))
    assert counter.frame_count == 1, f"expected one compiled frame, got {counter.frame_count}"
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        torch.testing.assert_close(g, e, rtol=rtol, atol=atol)
    if floating:
        w = torch.randn(expected[0].shape, dtype=expected[0].dtype)
        (ge,) = torch.autograd.grad((expected[0] * w).sum(), xe)
        (gc,) = torch.autograd.grad((got[0] * w).sum(), xc)
        torch.testing.assert_close(gc, ge, rtol=rtol, atol=atol)
    return compiled, counter


def _eps(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps


def _check(actual: torch.Tensor, expected: torch.Tensor, tol: torch.Tensor, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    if a.numel() == 0:
        return
    diff = (a - e).abs()
    # equal values (infinities too, whose difference is NaN) and NaN against NaN agree whatever the tolerance
    ok = (diff <= tol.to("cpu", torch.float64)) | (a == e) | (a.isnan() & e.isnan())
    if not bool(ok.all()):
        bad = (~ok).nonzero()[0].tolist()
        raise AssertionError(
            f"{what}: {int((~ok).sum())} of {a.numel()} elements out of tolerance; first at {bad}: "
            f"actual={a[tuple(bad)].item()!r} expected={e[tuple(bad)].item()!r} tol={tol[tuple(bad)].item()!r}; "
            f"max |diff|={diff.max().item():.3g}"
        )


def _output_rounding(expected: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Both sides round a float32 result to float16/bfloat16: they may differ by one ulp of the output."""
    if dtype not in LOW_PRECISION:
        return torch.zeros_like(expected, dtype=torch.float64)
    tiny = torch.finfo(dtype).tiny * _eps(dtype)  # one subnormal step (float16 underflow)
    return 2 * _eps(dtype) * expected.detach().to("cpu", torch.float64).abs() + tiny


def assert_equal(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Bitwise comparison (copies, min/max, integer arithmetic); NaNs compare equal to NaNs."""
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    a, e = actual.detach().cpu(), expected.detach().cpu()
    both_nan = (a.isnan() & e.isnan()) if a.is_floating_point() else torch.zeros_like(a, dtype=torch.bool)
    neq = (a != e) & ~both_nan
    if bool(neq.any()):
        bad = neq.nonzero()[0].tolist()
        raise AssertionError(
            f"{what}: {int(neq.sum())} of {a.numel()} elements differ; first at {bad}: "
            f"actual={a[tuple(bad)].item()!r} expected={e[tuple(bad)].item()!r}"
        )


def assert_reduction_close(actual, expected, src, indptr, reduce: str, what: str = "") -> None:
    """Compare a segment reduction with the reference.

    sum/mean: both sides add the same values in different orders in the compute dtype (float32 for
    16-bit inputs), so they differ by at most a few eps * sum(|x|) of the segment (8 eps used), plus
    one ulp of the output dtype where a float32 result is rounded to float16/bfloat16.
    min/max and integer sums are exact. logsumexp: 8 eps * (1 + |result| + sqrt(segment length)).
    mul: each of the n products rounds once, in any order: 2 (n + 1) eps * |result| (plus the output
    rounding of 16-bit dtypes and a subnormal step of the compute dtype).
    """
    what = what or f"segment {reduce} {src.dtype}"
    if reduce in ("min", "max") or not src.dtype.is_floating_point:
        assert_equal(actual, expected, what)
        return
    eps = _eps(_compute_dtype(src.dtype))
    if reduce in ("sum", "add", "mean"):
        scale, _ = segment(src.detach().to(torch.float64).abs(), indptr, "mean" if reduce == "mean" else "sum")
    elif reduce == "logsumexp":
        counts = segment(torch.ones_like(src.detach(), dtype=torch.float64), indptr, "sum")[0]
        scale = 1 + expected.detach().to(torch.float64).abs() + counts.sqrt()
    elif reduce == "mul":
        counts = segment(torch.ones_like(src.detach(), dtype=torch.float64), indptr, "sum")[0]
        assert_product_close(actual, expected, counts, what)
        return
    else:
        raise ValueError(reduce)
    tol = 8 * eps * scale.cpu() + _output_rounding(expected, src.dtype)
    _check(actual, expected, tol, what)


def assert_product_close(actual, expected, counts, what: str) -> None:
    """A product of `counts` factors computed in a different order: each product rounds once in the compute
    dtype, so |diff| <= 2 (counts + 1) eps |result|, plus a subnormal step and the output rounding of 16-bit
    dtypes. Equal infinities and NaNs agree; integer products (wrapping) are exact."""
    if not expected.dtype.is_floating_point:
        assert_equal(actual, expected, what)
        return
    cdt = _compute_dtype(expected.dtype)
    e = expected.detach().to("cpu", torch.float64)
    tol = 2 * _eps(cdt) * (counts.detach().to("cpu", torch.float64) + 1) * e.abs() + torch.finfo(cdt).tiny
    tol = tol + _output_rounding(expected, expected.dtype)
    _check(actual, expected, tol, what)


def assert_softmax_close(actual, expected, src, indptr, what: str = "") -> None:
    """Softmax: relative error of exp(x - m) / sum grows like sqrt(segment length) eps; 8 eps margin."""
    what = what or f"segment softmax {src.dtype}"
    eps = _eps(_compute_dtype(src.dtype))
    lengths = indptr[..., 1:] - indptr[..., :-1]
    longest = int(lengths.max()) if lengths.numel() else 1
    e = expected.detach().to("cpu", torch.float64)
    tol = 8 * eps * (1 + max(longest, 1) ** 0.5) * (e.abs() + eps) + _output_rounding(expected, src.dtype)
    _check(actual, expected, tol, what)


def assert_sum_close(actual, expected, scale, what: str) -> None:
    """A result that is a sum computed in a different order: |diff| <= 8 eps * scale, where scale is
    the same sum over absolute values (plus output rounding for 16-bit dtypes)."""
    eps = _eps(_compute_dtype(expected.dtype))
    tol = 8 * eps * scale.detach().to("cpu", torch.float64) + 4 * eps * expected.detach().to("cpu", torch.float64).abs()
    _check(actual, expected, tol + _output_rounding(expected, expected.dtype), what)


def assert_grad_close(actual, expected, what: str, rtol: float | None = None, atol: float | None = None) -> None:
    """Gradients: float64 / float32 compare at a few eps; 16-bit at their own eps (backward kernels
    round per element, the reference may round at different points)."""
    dtype = expected.dtype
    eps = _eps(dtype)
    rtol = 16 * eps if rtol is None else rtol
    atol = 16 * eps if atol is None else atol
    e = expected.detach().to("cpu", torch.float64)
    _check(actual, expected, atol + rtol * e.abs(), what)


# ---------------------------------------------------------------------------------------------
# Input generation (explicit builder + a hypothesis strategy on top of it).

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INT_DTYPES = (torch.int32, torch.int64)
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES
LAYOUTS = ("contiguous", "sliced", "transposed", "expanded")


def make_values(shape, dtype, gen: torch.Generator, ties: bool = False) -> torch.Tensor:
    """Random values: N(0, 1) floats (small integers when `ties`, to force equal values), ints in [-50, 50)."""
    if dtype.is_floating_point:
        if ties:
            return torch.randint(-2, 3, shape, generator=gen).to(dtype)
        return torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
    return torch.randint(-50, 50, shape, generator=gen, dtype=dtype)


def distinct_values(shape, seed=0):
    """float64 values at least 0.1 apart, so min/max positions are unique and stable under the
    finite-difference perturbations of gradcheck (eps 1e-6)."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n, generator=g).to(torch.float64) / 10 - n / 20).reshape(shape)


def near_one(src: torch.Tensor) -> torch.Tensor:
    """Float src mapped to 1 + x / (64 max(1, max|x|)), with src's strides (layout kept): factors whose
    products over thousands of rows stay finite and normal, so that products taken in any order agree
    to a few eps (a product that overflows in one order and meets a 0 in another is inf * 0 = NaN there).
    Integer src is returned as is (integer products wrap, in any order alike)."""
    if not src.is_floating_point() or src.numel() == 0:
        return src
    n = src.untyped_storage().nbytes() // src.element_size()
    flat = torch.empty(0, dtype=src.dtype, device=src.device).set_(src.untyped_storage(), 0, (n,))
    wide = flat.to(torch.float64)
    scale = 64 * max(1.0, float(wide.abs().max()))
    return (1 + wide / scale).to(src.dtype).as_strided(src.shape, src.stride(), src.storage_offset())


def make_src(shape, dim: int, dtype, layout: str, gen: torch.Generator, ties: bool = False) -> torch.Tensor:
    """A tensor of `shape` whose memory layout is `layout`:
    contiguous; sliced (every other row along dim of a bigger tensor); transposed (dim and the last
    dim swapped in memory); expanded (last dim broadcast with stride 0). The last two fall back to
    sliced when src has no feature dim."""
    shape = list(shape)
    if layout in ("transposed", "expanded") and len(shape) == dim + 1:
        layout = "sliced"
    if layout == "contiguous":
        return make_values(shape, dtype, gen, ties)
    if layout == "sliced":
        big = shape.copy()
        big[dim] = 2 * shape[dim]
        t = make_values(big, dtype, gen, ties)
        return t[(slice(None),) * dim + (slice(None, None, 2),)]
    if layout == "transposed":
        perm = shape.copy()
        perm[dim], perm[-1] = perm[-1], perm[dim]
        return make_values(perm, dtype, gen, ties).transpose(dim, -1)
    if layout == "expanded":
        one = shape.copy()
        one[-1] = 1
        return make_values(one, dtype, gen, ties).expand(shape)
    raise ValueError(layout)


def make_indptr(lengths_per_row, starts, lead_shape, n_seg: int, dtype=torch.int64) -> torch.Tensor:
    """indptr of shape (*lead_shape, n_seg + 1): row r = starts[r] + cumsum([0] + lengths_per_row[r])."""
    rows = [indptr_from_lengths(l, s) for l, s in zip(lengths_per_row, starts)]
    n = n_seg + 1
    flat = torch.stack(rows) if rows else torch.zeros((0, n), dtype=torch.int64)
    return flat.reshape(*lead_shape, n).to(dtype)


def draw_shape_and_dim(draw, min_size: int, max_size: int) -> tuple[list[int], int, int]:
    """In a hypothesis strategy: a shape of 1 to 3 dims of min_size..max_size each, and a dim anywhere in it
    (negative too); returns (shape, dim, dim made non-negative)."""
    from hypothesis import strategies as st

    ndim = draw(st.integers(1, 3))
    shape = [draw(st.integers(min_size, max_size)) for _ in range(ndim)]
    dim = draw(st.integers(-ndim, ndim - 1))
    return shape, dim, dim % ndim


def csr_cases(dtypes=ALL_DTYPES, gather: bool = False, max_lead_dims: int = 2, ties=None):
    """Hypothesis strategy of dicts {src, indptr, size, desc} covering: random segmentations with
    empty segments, one huge segment, all segments empty, no segments, zero-size src (0 batch rows,
    0 features, 0 rows along dim), leading batch dims with indptr broadcast (size-1 leading dims),
    int32/int64 indptr, non-contiguous src (sliced/transposed/expanded), every dtype in `dtypes`.

    For gather, src has S rows along dim and `size` is None or an explicit size >= max(indptr[..., -1]).
    """
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw):
        dtype = draw(st.sampled_from(dtypes))
        n_lead = draw(st.integers(0, max_lead_dims))
        batch = [draw(st.integers(0, 3)) for _ in range(n_lead)]
        lead = [1 if draw(st.booleans()) else b for b in batch]  # 1 = broadcast over that batch dim
        n_seg = draw(st.integers(0, 7))
        kind = draw(st.sampled_from(["random", "random", "random", "huge", "all_empty"]))
        n_rows = 1
        for d in lead:
            n_rows *= d
        lengths, starts = [], []
        for _ in range(n_rows):
            if kind == "all_empty":
                ls = [0] * n_seg
            else:
                ls = draw(st.lists(st.integers(0, 5), min_size=n_seg, max_size=n_seg))
                if kind == "huge" and n_seg:
                    ls[draw(st.integers(0, n_seg - 1))] = draw(st.integers(200, 2000))
            lengths.append(ls)
            starts.append(draw(st.integers(0, 3)))
        feat = draw(st.sampled_from([(), (1,), (3,), (2, 3), (17,), (0,)]))
        layout = draw(st.sampled_from(LAYOUTS))
        idx_dtype = draw(st.sampled_from([torch.int64, torch.int32]))
        use_ties = draw(st.booleans()) if ties is None else ties
        seed = draw(st.integers(0, 2**31 - 1))
        gen = torch.Generator().manual_seed(seed)
        indptr = make_indptr(lengths, starts, lead, n_seg, idx_dtype)
        max_end = int(indptr[..., -1].max()) if indptr.numel() else 0
        dim = n_lead
        size = None
        if gather:
            n_dim = n_seg
            if draw(st.booleans()):
                size = max_end + draw(st.integers(0, 3))
        else:
            n_dim = max_end + draw(st.integers(0, 3))
        src = make_src([*batch, n_dim, *feat], dim, dtype, layout, gen, use_ties)
        desc = (f"dtype={dtype} batch={batch} indptr={tuple(indptr.shape)}/{idx_dtype} kind={kind} feat={feat} "
                f"layout={layout} ties={use_ties} size={size} seed={seed}")
        return {"src": src, "indptr": indptr, "size": size, "desc": desc, "seed": seed}

    return strategy()


def public_reducers() -> dict:
    """The public reduction entry points of torch_segops by test id, each fn(src, indptr) reducing along
    dim indptr.dim() - 1 (shared by test_compile.py and test_errors.py). torch_segops is imported on call,
    so that this module stays plain PyTorch."""
    import torch_segops as so

    return {
        "segment_csr_sum": lambda s, i: so.segment_csr(s, i, reduce="sum"),
        "segment_csr_add": lambda s, i: so.segment_csr(s, i, reduce="add"),
        "segment_csr_mean": lambda s, i: so.segment_csr(s, i, reduce="mean"),
        "segment_csr_min": lambda s, i: so.segment_csr(s, i, reduce="min"),
        "segment_csr_max": lambda s, i: so.segment_csr(s, i, reduce="max"),
        "segment_csr_mul": lambda s, i: so.segment_csr(s, i, reduce="mul"),
        "segment_sum_csr": so.segment_sum_csr,
        "segment_add_csr": so.segment_add_csr,
        "segment_mean_csr": so.segment_mean_csr,
        "segment_min_csr": so.segment_min_csr,
        "segment_max_csr": so.segment_max_csr,
        "segment_logsumexp_csr": so.segment_logsumexp_csr,
        "segment_softmax_csr": so.segment_softmax_csr,
    }
