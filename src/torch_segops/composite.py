"""pytorch_scatter's composite functions: ``scatter_logsumexp``, ``scatter_softmax``, ``scatter_log_softmax``,
``scatter_std``, with its signatures and results, built on the deterministic :func:`scatter_max` /
:func:`scatter_sum` (so bitwise the same run to run and for any thread count).

The index is sorted once per call (a :func:`scatter_plan` shared by the max and the sums when the index does
not vary along the dims after ``dim``, the graph case, and is at least as long as the output; a shorter one
goes to each scatter as it is, so that no offsets of the whole output are made). The per-target maximum that recentres the
exponentials is taken without gradient: softmax and logsumexp do not depend on it, so its backward would add
exact zeros at the cost of a pass. Decisions where pytorch_scatter's results follow from its implementation
rather than from the function's meaning (docs/compat-pytorch-scatter.md): a target with no entries gives 0 for
logsumexp (as pytorch_scatter) and ``out``'s value where ``out`` is given; a NaN among a target's entries gives
NaN (pytorch_scatter: 0), as ``torch.logsumexp`` and ``torch.softmax`` do; an entry of ``+inf`` gives a
logsumexp of ``+inf`` (pytorch_scatter: the dtype's largest finite value) and a softmax shared by the ``+inf``
entries (their limit; torch.softmax and pytorch_scatter: NaN).
"""

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ._arguments import (check_index_dtype, check_index_values, check_out, check_same_device, scatter_arg_types,
                         scatter_dim_and_size, scatter_index_shape)
from ._segment import sort_rows
from .scatter import ScatterPlan, scatter_max, scatter_sum


def _prepare(fn: str, src: Tensor, index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int],
             floating: bool) -> Tuple[int, Optional[int], Tensor, Optional[ScatterPlan]]:
    """dim in [0, src.dim()), the output size (out's, else dim_size, else None: read from the index), index
    expanded to src's shape (for gather), and a plan of the sort when the index does not vary along the dims
    after dim (None otherwise: every scatter then sorts on its own)."""
    if not torch.jit.is_scripting():
        dim, dim_size = scatter_arg_types(fn, src, index, dim, out, dim_size)
    check_same_device(fn, ["src", "index"], [src, index])
    if floating and not torch.is_floating_point(src):
        raise ValueError(f"torch_segops.{fn}: src must have a floating-point dtype")
    dim, size = scatter_dim_and_size(fn, src, index, dim, out, dim_size)
    shape = scatter_index_shape(fn, index, src, dim)
    check_index_dtype(fn, index)
    check_index_values(fn, index, size)
    if out is not None:
        out_shape: List[int] = list(src.shape)
        out_shape[dim] = size
        check_out(fn, out, src.dtype, src.device, out_shape)
    # int64 for torch's gather: its int32 path reads a broadcast (stride-0) index wrongly (torch 2.13: issue #36)
    expanded = index.long().reshape(shape).expand(src.shape)
    plan: Optional[ScatterPlan] = None
    rows_only = src.numel() > 0
    for d in range(dim + 1, src.dim()):
        rows_only = rows_only and shape[d] == 1
    # a plan's offsets hold size + 1 int64: only for an index at least as long as the output (issue #36)
    if rows_only and 0 <= size <= src.size(dim):
        perm, indptr = sort_rows(fn, index, shape, src, dim, size)
        plan = ScatterPlan(perm, indptr)
    return dim, None if size == -1 else size, expanded, plan


def _recentred(src: Tensor, index: Tensor, expanded: Tensor, dim: int, dim_size: Optional[int],
               plan: Optional[ScatterPlan]) -> Tuple[Tensor, Tensor]:
    """(per-target max without gradient, -inf where a target has no entries; src minus its target's max). Where
    the max is infinite: -inf if it is -inf (every entry -inf: pytorch_scatter's NaN mask gives -inf too), and
    for a max of +inf, 0 on the +inf entries and -inf elsewhere (their limit: logsumexp +inf, softmax shared by
    the +inf entries)."""
    values, arg = scatter_max(src.detach(), index, dim, dim_size=dim_size, plan=plan)
    mx = values.masked_fill(arg == src.size(dim), float("-inf"))
    at = mx.gather(dim, expanded)
    neg = torch.full_like(src, float("-inf"))
    at_inf = torch.where(src == at, torch.zeros_like(src), neg)
    z = torch.where(at == float("-inf"), neg, torch.where(at == float("inf"), at_inf, src - at))
    return mx, z


def _computing(t: Tensor) -> Tensor:
    """float16/bfloat16 computed in float32 (as the segment kernels accumulate them): a std of values near 1000
    would square past float16's range, an exp of a few thousand terms add with float16's rounding."""
    if t.dtype == torch.float16 or t.dtype == torch.bfloat16:
        return t.float()
    return t


def _written_into(out: Tensor, result: Tensor) -> Tensor:
    """out= of the composite functions: ``out`` holds the result (in out's dtype); it is returned, unless autograd
    records the result (then the result, so that its gradient reaches src; ``out`` holds the same values)."""
    result = result.to(out.dtype)
    with torch.no_grad():
        out.copy_(result)
    return result if result.requires_grad else out


def scatter_logsumexp(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                      dim_size: Optional[int] = None, eps: float = 1e-12) -> Tensor:
    """``log(sum(exp(src_j)) + eps)`` over the entries j scattered to each target (0 where there are none).
    With ``out``, its values join each target's entries, and the result is written into ``out`` (where it is
    not finite, ``out`` keeps its value), as pytorch_scatter's."""
    dim, dim_size, expanded, plan = _prepare("scatter_logsumexp", src, index, dim, out, dim_size, True)
    x = _computing(src)
    mx, z = _recentred(x, index, expanded, dim, dim_size, plan)
    total = scatter_sum(z.exp(), index, dim, dim_size=dim_size, plan=plan)
    if out is None:
        lse = (total + eps).log() + mx
        return torch.where(lse == float("-inf"), torch.zeros_like(lse), lse).to(src.dtype)
    o = _computing(out)
    kept = ~((total.detach() + (o.detach() - mx).exp() + eps).log() + mx).isfinite()  # where out keeps its value
    # where out is kept, its term and the max are replaced by finite stand-ins (0): the discarded branch of the
    # where below must stay finite, or its zero gradient times an infinite derivative is NaN
    centre = torch.where(kept, torch.zeros_like(mx), mx)
    joined = total + (torch.where(kept, centre, o) - centre).exp()
    lse = (joined + eps).log() + centre
    return _written_into(out, torch.where(kept, o, lse))


def scatter_softmax(src: Tensor, index: Tensor, dim: int = -1, dim_size: Optional[int] = None) -> Tensor:
    """Softmax over the entries scattered to each target, in src's shape."""
    dim, dim_size, expanded, plan = _prepare("scatter_softmax", src, index, dim, None, dim_size, True)
    _, z = _recentred(_computing(src), index, expanded, dim, dim_size, plan)
    e = z.exp()
    total = scatter_sum(e, index, dim, dim_size=dim_size, plan=plan)
    return (e / total.gather(dim, expanded)).to(src.dtype)


def scatter_log_softmax(src: Tensor, index: Tensor, dim: int = -1, eps: float = 1e-12,
                        dim_size: Optional[int] = None) -> Tensor:
    """``src - max - log(sum(exp(src - max)) + eps)`` over the entries scattered to each target, in src's shape."""
    dim, dim_size, expanded, plan = _prepare("scatter_log_softmax", src, index, dim, None, dim_size, True)
    _, z = _recentred(_computing(src), index, expanded, dim, dim_size, plan)
    total = scatter_sum(z.exp(), index, dim, dim_size=dim_size, plan=plan)
    return (z - (total + eps).log().gather(dim, expanded)).to(src.dtype)


def scatter_std(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None, unbiased: bool = True) -> Tensor:
    """Standard deviation of the entries scattered to each target, as pytorch_scatter computes it:
    ``sqrt(sum((src_j - mean)^2) / (n - 1 + 1e-6))`` (``n + 1e-6`` when not unbiased; the count at least 1),
    0 where there are no entries. With ``out``, the squared deviations are added to it and the result is
    written into ``out``. Its gradient is 0 where the deviation is 0 (a target with one entry), not NaN."""
    dim, dim_size, expanded, plan = _prepare("scatter_std", src, index, dim, out, dim_size, False)
    x = _computing(src)
    count = scatter_sum(torch.ones_like(x), index, dim, dim_size=dim_size, plan=plan).clamp(min=1)
    mean = scatter_sum(x, index, dim, dim_size=dim_size, plan=plan) / count
    dev = x - mean.gather(dim, expanded)
    # the deviations (and out's sqrt) in units of the target's largest one (without gradient: it cancels), so that
    # the squares stay in range: a std of 1e30 is a float32, its square is not; a deviation of 1e-40 squares to 0
    unit = scatter_max(dev.detach().abs(), index, dim, dim_size=dim_size, plan=plan)[0]
    if out is not None:
        unit = torch.maximum(unit, _computing(out).detach().abs().sqrt())
    unit = torch.where((unit > 0) & unit.isfinite(), unit, torch.ones_like(unit))
    scaled = dev / unit.gather(dim, expanded)
    sq = scatter_sum(scaled * scaled, index, dim, dim_size=dim_size, plan=plan)
    if out is not None:
        sq = sq + _computing(out) / unit / unit
    if unbiased:
        count = (count - 1).clamp(min=1)
    var = sq / (count + 1e-6)
    # sqrt with gradient 0 where the variance is 0 (a single entry; pytorch_scatter's gradient is NaN there); a NaN
    # (a NaN or infinite entry) or a negative variance (a negative out=) stays NaN, as sqrt gives
    zero = var == 0
    result = unit * torch.where(zero, torch.zeros_like(var), torch.where(zero, torch.ones_like(var), var).sqrt())
    if out is None:
        return result if not torch.is_floating_point(src) else result.to(src.dtype)
    return _written_into(out, result)


__all__: List[str] = ["scatter_logsumexp", "scatter_softmax", "scatter_log_softmax", "scatter_std"]
