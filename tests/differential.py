"""The float64 side of tests/kernels/test_differential.py: inputs drawn from what breaks kernels, the reference results of
every public function (tests/reference.py's loops on float64 or int64 copies, plus the out= and composite rules
written from the documentation), and the comparison with per-element tolerances.

Plain PyTorch: nothing here imports torch_segops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

import reference as R

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INTS = (torch.int32, torch.int64)
INF, NAN = math.inf, math.nan

# magnitudes far from 1 that stay clear of overflow in the sums the tests make (a few thousand terms) in the
# accumulation dtype; float16 accumulates in float32 and may overflow in its output, as the reference does
HUGE = {torch.float16: 1e4, torch.bfloat16: 1e30, torch.float32: 1e30, torch.float64: 1e200,
        torch.int32: 2**29, torch.int64: 2**40}
TINY = {torch.float16: 1e-6, torch.bfloat16: 1e-30, torch.float32: 1e-40, torch.float64: 1e-310}

# the styles of values a case draws
STYLES = ("plain", "specials", "dense_specials", "ties", "scaled")


def specials(dtype: torch.dtype, finite_only: bool = False) -> list:
    """The values every random generator here mixes in: +-inf, NaN, huge and tiny (subnormal where the dtype has
    them), signed zeros."""
    h, t = HUGE[dtype], TINY.get(dtype, 1)
    if not dtype.is_floating_point:
        return [h, -h, 0, 1, -1]
    vals = [h, -h, t, -t, 0.0, -0.0]
    return vals if finite_only else vals + [INF, -INF, NAN]


def values(shape, dtype: torch.dtype, g: torch.Generator, style: str, finite_only: bool = False) -> torch.Tensor:
    """Random values of a style: plain N(0, 1); specials (10% of the entries from ``specials``) or dense_specials
    (40%); ties (small integers); scaled (N(0, 1) times 1e-3 or 1e3 per entry). Integers: [-50, 50), with huge
    values for the specials styles."""
    shape = list(shape)
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g, dtype=torch.float64)
        if style == "ties":
            x = torch.randint(-2, 3, shape, generator=g).double()
        elif style == "scaled":
            x = x * torch.where(torch.rand(shape, generator=g) < 0.5, 1e-3, 1e3).double()
    else:
        x = torch.randint(-50, 50, shape, generator=g, dtype=torch.int64)
    rate = {"specials": 0.1, "dense_specials": 0.4}.get(style, 0.0)
    if rate and x.numel():
        pool = torch.tensor(specials(dtype, finite_only), dtype=x.dtype)
        pick = pool[torch.randint(0, len(pool), shape, generator=g)]
        x = torch.where(torch.rand(shape, generator=g) < rate, pick, x)
    return x.to(dtype)


def factors(shape, dtype: torch.dtype, g: torch.Generator, style: str) -> torch.Tensor:
    """Values for products: 1 + N(0, 1)/64 (products over thousands stay normal, so any order agrees to a few eps),
    with zeros, +-inf and NaN mixed in for the specials styles (any order gives the same inf or NaN); integers
    as ``values``."""
    if not dtype.is_floating_point:
        return values(shape, dtype, g, style)
    x = 1 + torch.randn(list(shape), generator=g, dtype=torch.float64) / 64
    rate = {"specials": 0.05, "dense_specials": 0.3}.get(style, 0.0)
    if rate and x.numel():
        pool = torch.tensor([0.0, -0.0, INF, -INF, NAN, 2.0, 0.5])
        pick = pool[torch.randint(0, len(pool), list(shape), generator=g)]
        x = torch.where(torch.rand(list(shape), generator=g) < rate, pick, x)
    return x.to(dtype)


def wide(t: torch.Tensor) -> torch.Tensor:
    """The reference's copy of an input: float64 for floats, int64 for integers."""
    return t.detach().double() if t.is_floating_point() else t.detach().long()


def acc_eps(dtype: torch.dtype) -> float:
    """eps of the dtype the kernels accumulate in (float32 for the 16-bit dtypes)."""
    return torch.finfo(torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype).eps


# ---- the comparison ---------------------------------------------------------------------------------------


def assert_matches(got: torch.Tensor, want: torch.Tensor, tol, what: str) -> None:
    """got (the result dtype) against the reference want (float64 / int64, before rounding to got's dtype).

    Integers: exact after the reference is cast to got's dtype (wrapping as the kernels do). Floats: NaN where
    want is NaN and only there, the same infinities, and elsewhere |got - want| <= tol + the rounding of want to
    got's dtype (half an ulp, taken as eps |want| plus a subnormal step); where want overflows got's dtype, got
    may be the infinity or the largest finite value of that sign."""
    assert got.dtype != torch.float64 or want.dtype == torch.float64
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if not got.dtype.is_floating_point:
        expected = want.to(got.dtype)
        bad = got.detach().cpu() != expected
    else:
        g = got.detach().cpu().double()
        w = want.detach().cpu().double()
        info = torch.finfo(got.dtype)
        if not torch.is_tensor(tol):
            tol = torch.full_like(w, float(tol))
        tol = tol.detach().cpu().double().nan_to_num(nan=0.0, posinf=math.inf)
        limit = tol + info.eps * w.abs().nan_to_num(posinf=0.0) + info.tiny * info.eps
        same = (g == w) | (g.isnan() & w.isnan())
        close = w.isfinite() & g.isfinite() & ((g - w).abs() <= limit)
        overflow = w.isfinite() & (w.abs() > info.max) & (g.isinf() | (g.abs() == info.max)) & (g.sign() == w.sign())
        bad = ~(same | close | overflow)
    if bool(bad.any()):
        at = bad.nonzero()[0].tolist()
        i = tuple(at)
        extra = ""
        if got.dtype.is_floating_point:
            extra = f" tol={float(tol[i]) if tol.dim() else float(tol)!r}"
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} elements differ; first at {at}: "
                             f"got={got.detach().cpu()[i].item()!r} reference={want.detach().cpu()[i].item()!r}{extra}")


def assert_grad_matches(got: torch.Tensor | None, want: torch.Tensor | None, eps: float, what: str,
                        factor: float = 64.0) -> None:
    """A gradient against the float64 reference's: the same NaN and infinity pattern, and |got - want| <= factor
    eps (|want| + mean |want| + 1) elsewhere (a missing gradient counts as zeros; the 1: the upstream weights are
    N(0, 1), and a gradient that is a difference of such terms keeps their absolute error)."""
    if want is None and got is None:
        return
    if got is None:
        got = torch.zeros_like(want)
    if want is None:
        want = torch.zeros_like(got, dtype=torch.float64)
    w = want.detach().double()
    scale = w.abs().nan_to_num(posinf=0.0)
    mean = float(scale.mean()) if scale.numel() else 0.0
    assert_matches(got, w, factor * eps * (scale + mean + 1), what)


# ---- references -------------------------------------------------------------------------------------------


def lengths_of(indptr: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Segment lengths as float64, shaped like the reduced result ``like`` (features trailing)."""
    dim = indptr.dim() - 1
    counts = (indptr[..., 1:] - indptr[..., :-1]).double()
    counts = counts.view(list(counts.shape) + [1] * (like.dim() - dim - 1))
    return counts.expand(like.shape) if counts.numel() else torch.zeros(like.shape, dtype=torch.float64)


@dataclass
class Expected:
    """A reference result: values (float64 / int64), arg (min/max), and the per-element tolerance of a float result
    computed the way the kernels compute it."""
    values: torch.Tensor
    arg: torch.Tensor | None = None
    tol: torch.Tensor | float = 0.0
    extra: dict = field(default_factory=dict)


def segment_tolerance(src: torch.Tensor, x: torch.Tensor, indptr: torch.Tensor, reduce: str,
                      want: torch.Tensor) -> torch.Tensor | float:
    """The error bound of a segment reduction computed in another order than the reference's, per element:
    sum/mean: (8 + 2 sqrt(n)) eps sum|x| (mean: / n), eps of the accumulation dtype, n the segment length (the
    kernels add in several orders; a random walk of roundings grows like sqrt(n)); mul: 2 (n + 1) eps |result|;
    logsumexp: 8 eps (1 + |result| + sqrt(n)); min/max and integers: exact."""
    if not src.is_floating_point() or reduce in ("min", "max"):
        return 0.0
    eps = acc_eps(src.dtype)
    if x.numel() == 0:
        return 0.0
    n = R.segment(torch.ones_like(x), indptr, "sum")[0]
    if reduce in ("sum", "add", "mean"):
        absum = R.segment(x.abs(), indptr, "sum")[0]
        tol = (8 + 2 * n.sqrt()) * eps * absum
        return tol / n.clamp(min=1) if reduce == "mean" else tol
    if reduce == "mul":
        return 2 * (n + 1) * eps * want.abs().nan_to_num(posinf=0.0) + torch.finfo(torch.float32).tiny
    if reduce == "logsumexp":
        return 8 * eps * (1 + want.abs().nan_to_num(posinf=0.0) + n.sqrt())
    raise ValueError(reduce)


def integer_mean(dtype: torch.dtype, sums: torch.Tensor, counts: torch.Tensor, rounding: str) -> torch.Tensor:
    """The mean of integers as pytorch_scatter and torch compute it: the sum in the input's dtype (wrapping, as an
    int32 sum does), then divided by the count (empty targets: 0). Decision: docs/usage.md."""
    return torch.div(sums.to(dtype).long(), counts.clamp(min=1).long(), rounding_mode=rounding)


def segment(src: torch.Tensor, indptr: torch.Tensor, reduce: str) -> Expected:
    x = wide(src)
    values, arg = R.segment(x, indptr, reduce)
    if reduce == "mean" and not src.is_floating_point():
        values = integer_mean(src.dtype, R.segment(x, indptr, "sum")[0], R.segment(torch.ones_like(x), indptr,
                                                                                       "sum")[0], "trunc")
    return Expected(values, arg, segment_tolerance(src, x, indptr, reduce, values))


def softmax_tolerance(want: torch.Tensor, longest: int, eps: float) -> torch.Tensor:
    """exp(x - max) / sum: x - max rounds to eps |x - max|, which exp turns into a relative error of that size
    (|x - max| <= |log result| + log n), and the sum of n terms adds sqrt(n) eps:
    eps (8 + 2 (|log result| + log n) + 2 sqrt(n)) |result|."""
    n = max(longest, 1)
    z = want.log().abs().nan_to_num(posinf=0.0) + math.log(n)
    return eps * (8 + 2 * z + 2 * math.sqrt(n)) * want.abs() + 1e-300


def segment_softmax(src: torch.Tensor, indptr: torch.Tensor) -> Expected:
    x = wide(src)
    want = R.segment_softmax(x, indptr)
    longest = int((indptr[..., 1:] - indptr[..., :-1]).max()) if indptr.size(-1) > 1 else 1
    return Expected(want, None, softmax_tolerance(want, longest, acc_eps(src.dtype)))


def gather(src: torch.Tensor, indptr: torch.Tensor, size) -> Expected:
    return Expected(R.gather(wide(src), indptr, size))


def combined(o: torch.Tensor, v: torch.Tensor, arg, reduce: str, counts: torch.Tensor, n: int, rounding: str,
             sums: torch.Tensor | None = None, dtype: torch.dtype | None = None):
    """out= of the COO and scatter functions (pytorch_scatter's documented semantics) on reference tensors (autograd
    follows them): out + sum, out * product, (out + sum) / max(count, 1) (sums: the segment sums, by default
    v * count; integers divide with rounding "trunc" for COO, "floor" for scatter), and for min/max out's value
    kept unless the reduction beats it (a NaN beats any number; out keeps ties and empty targets, its arg then
    n = src.size(dim)). Returns (values, arg)."""
    if reduce in ("sum", "add"):
        return o + v, None
    if reduce == "mul":
        return o * v, None
    if reduce == "mean":
        total = o + (v * counts if sums is None else sums)
        if o.is_floating_point():
            return total / counts.clamp(min=1), None
        return integer_mean(dtype or o.dtype, total, counts, rounding), None
    better = v < o if reduce == "min" else v > o
    if o.is_floating_point():
        better = better | (v.isnan() & ~o.isnan())
    better = better & (arg != n)
    return torch.where(better, v, o), torch.where(better, arg, torch.full_like(arg, n))


def combine(out: torch.Tensor, exp: Expected, reduce: str, counts: torch.Tensor, n: int, rounding: str,
            sums: torch.Tensor | None = None) -> Expected:
    """``combined`` of the reference values, with its tolerance: the reduction's, plus the rounding of the
    reduction's result to out's dtype before it is combined with out (eps |result|; the product's scales with
    |out|)."""
    o = wide(out)
    values, arg = combined(o, exp.values, exp.arg, reduce, counts, n, rounding, sums, out.dtype)
    tol = exp.tol
    if o.is_floating_point() and reduce not in ("min", "max"):
        tol = tol + torch.finfo(out.dtype).eps * exp.values.abs().nan_to_num(posinf=0.0)
        if reduce == "mul":
            tol = tol * o.abs().nan_to_num(posinf=0.0)
        if reduce == "mean":
            tol = tol * (1 + counts) / counts.clamp(min=1)
    return Expected(values, arg, tol)


def scatter(src: torch.Tensor, index: torch.Tensor, dim: int, size: int, reduce: str, known: int) -> Expected:
    """R.scatter on the wide copy, computed for the ``known`` targets the index can reach and padded with empty
    targets up to ``size`` (a large dim_size costs the loop reference nothing)."""
    x = wide(src)
    k = min(size, known)
    values, arg = R.scatter(x, index, dim, k, reduce)
    d = dim % src.dim()
    n = R.scatter(torch.ones_like(x, dtype=torch.float64), index, dim, k, "sum")[0]
    if reduce == "mean" and not src.is_floating_point():
        values = integer_mean(src.dtype, R.scatter(x, index, dim, k, "sum")[0], n, "floor")
    if src.is_floating_point() and reduce not in ("min", "max"):
        eps = acc_eps(src.dtype)
        if reduce in ("sum", "add", "mean"):
            absum = R.scatter(x.abs(), index, dim, k, "sum")[0]
            tol = (8 + 2 * n.sqrt()) * eps * absum
            tol = tol / n.clamp(min=1) if reduce == "mean" else tol
        else:
            tol = 2 * (n + 1) * eps * values.abs().nan_to_num(posinf=0.0) + torch.finfo(torch.float32).tiny
    else:
        tol = torch.zeros_like(n)
    pad = size - k
    if pad:
        def grow(t, fill):
            shape = list(t.shape)
            shape[d] = pad
            return torch.cat([t, torch.full(shape, fill, dtype=t.dtype)], d)
        values = grow(values, 1 if reduce == "mul" else 0)
        arg = grow(arg, src.size(d)) if arg is not None else None
        tol = grow(tol, 0.0)
        n = grow(n, 0.0)
    return Expected(values, arg, tol, {"counts": n})


def composite(name: str, src: torch.Tensor, index: torch.Tensor, dim: int, size: int, eps: float = 1e-12,
              unbiased: bool = True, out: torch.Tensor | None = None) -> Expected:
    """scatter_logsumexp / softmax / log_softmax / std as documented (composite.py), per target in float64:
    logsumexp log(sum exp(x - m) + eps) + m over the entries (m their max; 0 without entries or when every entry
    is -inf; +inf with a +inf entry; NaN with a NaN); with out, out joins the entries inside the sum and out is
    kept where there are no entries or the result is not finite. softmax exp(x - m) / sum (NaN with a NaN entry
    or all -inf; 1/k on k +inf entries, 0 elsewhere); log_softmax (x - m) - log(sum + eps) (+inf entries: -log(k +
    eps), the others and all -inf: -inf). std sqrt((sum (x - mean)^2 [+ out]) / (max(n - unbiased, 1) + 1e-6)),
    0 where that is 0, NaN where it is NaN or negative. Tolerances in the src dtype's eps (the composites compute
    in it)."""
    d = dim % src.dim()
    x = src.detach().double().requires_grad_(src.requires_grad)
    o = out.detach().double().requires_grad_(out.requires_grad) if out is not None else None
    idx = R.broadcast_index(index.long(), src, dim).movedim(d, -1)
    xm = x.movedim(d, -1)
    other = idx.shape[:-1]
    per_target = name in ("logsumexp", "std")
    width = size if per_target else xm.size(-1)
    result = [[None] * width for _ in range(math.prod(other))]
    scale = torch.zeros(math.prod(other), width, dtype=torch.float64)
    rows = math.prod(other)
    om = o.movedim(d, -1).reshape(rows, size) if o is not None else None
    flat_x = xm.reshape(rows, xm.size(-1))
    flat_i = idx.reshape(rows, idx.size(-1))
    zero = torch.zeros((), dtype=torch.float64)
    for p in range(flat_x.size(0)):
        for t in range(size):
            pos = (flat_i[p] == t).nonzero().flatten().tolist()
            v = flat_x[p][pos] if pos else flat_x[p][:0]
            ot = om[p, t] if om is not None else None
            k = len(pos)
            vd = v.detach()
            if name == "logsumexp":
                if k == 0:
                    r = ot if ot is not None else zero
                else:
                    m = vd.max() if not vd.isnan().any() else torch.tensor(NAN, dtype=torch.float64)
                    if m == -INF and ot is None:
                        r = zero
                    elif m == INF and ot is None:
                        r = torch.tensor(INF, dtype=torch.float64)
                    else:
                        centred = v - m
                        if m == INF:  # +inf entries: 0; the others -inf
                            centred = torch.where(vd == INF, torch.zeros_like(v), torch.full_like(v, -INF))
                        if m == -INF:
                            centred = torch.full_like(v, -INF)
                        s = centred.exp().sum()
                        if ot is not None:
                            s = s + (ot - m).exp()
                        r = (s + eps).log() + m
                        if ot is not None and not bool(r.detach().isfinite()):
                            r = ot
                scale[p, t] = 1 + abs(float(r.detach())) + math.sqrt(k) if math.isfinite(float(r.detach())) else 0
                result[p][t] = r
            elif name == "std":
                cnt = max(k, 1)
                mean = v.sum() / cnt
                dev = v - mean
                # in units of the largest deviation (or sqrt|out|): float64's squares overflow at 1e154
                unit = max([abs(float(u)) for u in dev.detach()] + ([math.sqrt(abs(float(ot.detach())))] if ot is not None
                                                                     else []) + [0.0])
                unit = unit if 0 < unit < INF else 1.0
                sq = ((dev / unit) ** 2).sum()
                if ot is not None:
                    sq = sq + ot / unit / unit
                denom = (max(cnt - 1, 1) if unbiased else cnt) + 1e-6
                var = sq / denom
                if bool(var.detach() == 0):
                    r = var * 0
                else:
                    r = var.sqrt() * unit
                big = float(vd.abs().max()) if k else 0.0
                if ot is not None:
                    big = max(big, math.sqrt(abs(float(ot.detach()))))
                scale[p, t] = (1 + math.sqrt(k)) * big if math.isfinite(big) else 0
                result[p][t] = r
            else:
                if k == 0:
                    continue
                nan = bool(vd.isnan().any())
                m = torch.tensor(NAN, dtype=torch.float64) if nan else vd.max()
                if nan:
                    z = v * NAN
                elif m == INF:
                    z = torch.where(vd == INF, torch.zeros_like(v), torch.full_like(v, -INF))
                elif m == -INF:
                    z = torch.full_like(v, -INF)
                else:
                    z = v - m
                e = z.exp()
                s = e.sum()
                r = e / s if name == "softmax" else z - (s + eps).log()
                for j, q in enumerate(pos):
                    result[p][q] = r[j]
                    zj = abs(float(z.detach()[j])) if math.isfinite(float(z.detach()[j])) else 0.0
                    rj = abs(float(r.detach()[j])) if math.isfinite(float(r.detach()[j])) else 0.0
                    scale[p, q] = (8 + 2 * zj + 2 * math.sqrt(k)) * (rj if name == "softmax" else 1 + rj)
    stacked = []
    for p in range(len(result)):
        stacked.append(torch.stack([r if r is not None else zero for r in result[p]]) if result[p] else
                    torch.zeros(0, dtype=torch.float64))
    shape = list(xm.shape)
    shape[-1] = size if per_target else xm.size(-1)
    values = (torch.stack(stacked) if stacked else torch.zeros(0, width, dtype=torch.float64)).reshape(shape).movedim(-1, d)
    eps_src = acc_eps(src.dtype)  # 16-bit: computed in float32, then rounded (assert_matches allows for it)
    tol = (scale.reshape(shape).movedim(-1, d) * eps_src * (8 if name == "logsumexp" else 1)
           + (16 * eps_src if name != "std" else 0.0))
    if name == "std":
        tol = 16 * eps_src * scale.reshape(shape).movedim(-1, d)
    return Expected(values, None, tol, {"inputs": (x, o)})
