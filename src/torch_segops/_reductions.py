"""The reductions, in one table: the Python half of ``src/csrc/reduction_table.h``. For each one: the compiled ops
it runs, the ``reduce=`` names that select it, how integer ``src`` reduces, how the COO and scatter functions
reduce into an ``out=`` tensor's values (its combine function), and its gradient. _segment.py (the core),
_registrations.py and the public modules (``reduction_of``) read it; nothing else interprets a reduction's name. Adding a reduction: docs/design.md, "Adding a reduction".

The public wrappers compile with ``torch.jit.script``, which reads no Python globals, so the functions they
call (``reduction_of`` down to ``run_scatter_plan``) spell the table's facts as literals; tests/kernels/test_reductions.py
checks each of them against ``REDUCTIONS``, and ``REDUCTIONS`` against the C++ list.
"""

from __future__ import annotations

from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

_ops = torch.ops.torch_segops


class Reduction(NamedTuple):
    name: str  # the ops segment_<name>, segment_<name>_out, scatter_<name> and scatter_<name>_plan
    reduce_names: Tuple[str, ...]  # the reduce= strings that select it (none: only its own function)
    has_arg: bool  # the op also returns the argmin/argmax
    integers: str  # "native": the kernel; "sum_then_divide": the integer sum divided by the count; "refused"
    # COO/scatter out=: (out, values, arg, n, counts, rounding) -> (result, arg), the fresh reduction folded into out's
    # values (combine_into); None: no out= form (no reduce= name selects the reduction)
    combine: Optional[Callable[[Tensor, Tensor, Tensor, int, Tensor, str], Tuple[Tensor, Tensor]]]
    saves: str  # what the backward reads besides indptr (index): "src", "arg" or ""
    backward: Callable[[Tensor, Tensor, int, Optional[Tensor]], Tensor]  # (grad_out, indptr, n, saved) -> grad_src
    # the same for scatter_<name>: (grad_out, index, n, saved) -> grad_src, index [*lead, n] along its last dim
    scatter_backward: Callable[[Tensor, Tensor, int, Optional[Tensor]], Tensor]


# ---- means and gradients ---------------------------------------------------------------------------------------


def segment_lengths(indptr: Tensor, like: Tensor) -> Tensor:
    """Segment lengths (at least 1) shaped to broadcast against a reduced tensor ``like`` (features trailing)."""
    dim = indptr.dim() - 1
    counts = (indptr[..., 1:] - indptr[..., :-1]).clamp(min=1).to(like.dtype)
    return counts.view(list(counts.shape) + [1] * (like.dim() - dim - 1))


def divide_by_counts(total: Tensor, counts: Tensor, rounding: str) -> Tensor:
    """total / counts: true division for floating dtypes; integer division (``rounding``: "trunc" for the
    segment functions' C++ division, "floor" for scatter_mean) for integer ones."""
    if total.is_floating_point():
        return total / counts
    return torch.div(total, counts, rounding_mode=rounding)


def sum_then_divide(src: Tensor, indptr: Tensor, rounding: str) -> Tensor:
    """The mean as the segment sums divided by the lengths (empty segments 0): mean's integer rule."""
    total = _ops.segment_sum(src, indptr)
    return divide_by_counts(total, segment_lengths(indptr, total), rounding)


def _sum_backward(grad_out: Tensor, indptr: Tensor, n: int, saved: Optional[Tensor]) -> Tensor:
    return _ops.gather_csr(grad_out, indptr, n)


def _mean_backward(grad_out: Tensor, indptr: Tensor, n: int, saved: Optional[Tensor]) -> Tensor:
    return _ops.gather_csr(grad_out / segment_lengths(indptr, grad_out), indptr, n)


def _extremum_backward(grad_out: Tensor, indptr: Tensor, n: int, arg: Optional[Tensor]) -> Tensor:
    """min/max: the gradient flows to the arg position only; empty segments point at row n (dropped)."""
    dim = indptr.dim() - 1
    shape = list(grad_out.shape)
    shape[dim] = n + 1
    return grad_out.new_zeros(shape).scatter(dim, arg, grad_out).narrow(dim, 0, n)


def _logsumexp_backward(grad_out: Tensor, indptr: Tensor, n: int, src: Optional[Tensor]) -> Tensor:
    return _ops.segment_softmax(src, indptr) * _ops.gather_csr(grad_out, indptr, n)


def _product_backward(grad_out: Tensor, indptr: Tensor, n: int, src: Optional[Tensor]) -> Tensor:
    """Gradient of segment_mul: grad times the product of the other entries of the segment, exact where the
    segment holds zeros (no division by one), and itself differentiable: with Pz the product of the
    segment's non-zero entries, Z the product of its zero entries (1 without any) and c their count,
      x_i != 0:  Pz * Z / x_i
      x_i == 0:  Pz if c == 1;  Pz * (the other zero) if c == 2, written S0 - x_i (S0: the sum of the zero
                 entries), whose value is 0 and whose derivative is right; 0 if c > 2.
    (A plain Pz * Z / x_i or prod / x_i would lose the second derivatives through the zeros.)"""
    return _product_gradient(grad_out, src, lambda t: _ops.segment_mul(t, indptr),
                             lambda t: _ops.segment_sum(t, indptr), lambda t: _ops.gather_csr(t, indptr, n))


def _product_gradient(grad_out: Tensor, src: Tensor, mul: Callable[[Tensor], Tensor], add: Callable[[Tensor], Tensor],
                      rows: Callable[[Tensor], Tensor]) -> Tensor:
    """_product_backward's formula, given the per-target product and sum of a tensor shaped like src and the
    rows of a per-target tensor (the segment ops over indptr, or the scatter ops over an index)."""
    zero = src == 0
    pz = mul(torch.where(zero, torch.ones_like(src), src))
    z = mul(torch.where(zero, src, torch.ones_like(src)))
    s0 = add(torch.where(zero, src, torch.zeros_like(src)))
    count = add(zero.to(src.dtype))
    grad, pz, count = rows(grad_out), rows(pz), rows(count)
    x = torch.where(zero, torch.ones_like(src), src)
    at_zero = torch.where(count == 1, torch.ones_like(src),
                          torch.where(count == 2, rows(s0) - src, torch.zeros_like(src)))
    return grad * pz * torch.where(zero, at_zero, rows(z) / x)


# ---- gradients of the scatter ops (index [*lead, n]: the target of each row along its last dim) ---------------


def take_rows(t: Tensor, index: Tensor) -> Tensor:
    """t's rows along dim = index.dim() - 1 at the positions index holds ([*lead, n], lead dims t's or 1): the rows
    each target gives back to its entries."""
    dim = index.dim() - 1
    lead: List[int] = list(t.shape[:dim])
    idx = index.expand(lead + [index.size(-1)])
    if t.device.type == "cpu":  # the native row copy (values already checked by the forward)
        return _ops.gather_index(t, idx, False)
    # int64: torch's gather reads an int32 index broadcast with stride 0 wrongly (issue #36)
    full = idx.long().reshape(list(idx.shape) + [1] * (t.dim() - dim - 1))
    return t.gather(dim, full.expand(lead + [index.size(-1)] + list(t.shape[dim + 1:])))


def target_counts(index: Tensor, like: Tensor) -> Tensor:
    """Entries per target (at least 1), in like's dtype, shaped to broadcast against the per-target tensor like."""
    dim = index.dim() - 1
    ones = torch.ones(index.shape, dtype=torch.long, device=index.device)
    counts = _ops.scatter_sum(ones, index, like.size(dim), False).clamp(min=1).to(like.dtype)
    return counts.view(list(counts.shape) + [1] * (like.dim() - dim - 1))


def _scatter_sum_backward(grad_out: Tensor, index: Tensor, n: int, saved: Optional[Tensor]) -> Tensor:
    return take_rows(grad_out, index)


def _scatter_mean_backward(grad_out: Tensor, index: Tensor, n: int, saved: Optional[Tensor]) -> Tensor:
    return take_rows(grad_out / target_counts(index, grad_out), index)


def _scatter_product_backward(grad_out: Tensor, index: Tensor, n: int, src: Optional[Tensor]) -> Tensor:
    size = grad_out.size(index.dim() - 1)
    return _product_gradient(grad_out, src, lambda t: _ops.scatter_mul(t, index, size, False),
                             lambda t: _ops.scatter_sum(t, index, size, False), lambda t: take_rows(t, index))


def _scatter_logsumexp_backward(grad_out: Tensor, index: Tensor, n: int, src: Optional[Tensor]) -> Tensor:
    lse = _ops.scatter_logsumexp(src, index, grad_out.size(index.dim() - 1), False)
    return (src - take_rows(lse, index)).exp() * take_rows(grad_out, index)


# ---- out= of the COO and scatter functions: a fresh reduction folded into out's values --------------------------
# (out, values, arg, n, counts, rounding) -> (the new values of out, arg); n = src.size(dim), the arg of an empty
# segment; counts: the entries per target (mean only: values then holds their sums)


def _add_into(out: Tensor, values: Tensor, arg: Tensor, n: int, counts: Tensor, rounding: str) -> Tuple[Tensor, Tensor]:
    return out + values, arg


def _multiply_into(out: Tensor, values: Tensor, arg: Tensor, n: int, counts: Tensor,
                   rounding: str) -> Tuple[Tensor, Tensor]:
    # values' gradient needs out's old values, which the caller's copy_ overwrites: autograd keeps a copy instead
    old = out.clone() if torch.is_grad_enabled() and values.requires_grad else out
    return old * values, arg


def _mean_into(out: Tensor, values: Tensor, arg: Tensor, n: int, counts: Tensor,
               rounding: str) -> Tuple[Tensor, Tensor]:
    return divide_by_counts(out + values, counts, rounding), arg


def _extremum_into(out: Tensor, values: Tensor, arg: Tensor, n: int, better: Tensor) -> Tuple[Tensor, Tensor]:
    """min/max: out_i wins ties and empty segments (its arg is then n)."""
    if values.is_floating_point():  # a NaN wins (first NaN kept), as in the segment reductions
        better = better | (values.isnan() & ~out.isnan())
    better = better & (arg != n)  # an empty segment has nothing to offer
    return torch.where(better, values, out), torch.where(better, arg, torch.full_like(arg, n))


def _min_into(out: Tensor, values: Tensor, arg: Tensor, n: int, counts: Tensor, rounding: str) -> Tuple[Tensor, Tensor]:
    return _extremum_into(out, values, arg, n, values < out)


def _max_into(out: Tensor, values: Tensor, arg: Tensor, n: int, counts: Tensor, rounding: str) -> Tuple[Tensor, Tensor]:
    return _extremum_into(out, values, arg, n, values > out)


# ---- the table ---------------------------------------------------------------------------------------

REDUCTIONS: Dict[str, Reduction] = {r.name: r for r in (
    Reduction("sum", ("sum", "add"), False, "native", _add_into, "", _sum_backward, _scatter_sum_backward),
    Reduction("mean", ("mean",), False, "sum_then_divide", _mean_into, "", _mean_backward, _scatter_mean_backward),
    Reduction("mul", ("mul",), False, "native", _multiply_into, "src", _product_backward, _scatter_product_backward),
    # (_extremum_backward reads only the index's dims and the arg: the same for both)
    Reduction("min", ("min",), True, "native", _min_into, "arg", _extremum_backward, _extremum_backward),
    Reduction("max", ("max",), True, "native", _max_into, "arg", _extremum_backward, _extremum_backward),
    # segment_logsumexp_csr and the softmax composites only: no reduce= name selects it
    Reduction("logsumexp", (), False, "refused", None, "src", _logsumexp_backward, _scatter_logsumexp_backward),
)}


# ---- scriptable (literals; tests/kernels/test_reductions.py checks them against REDUCTIONS) ----------------------


def reduction_of(fn: str, reduce: str) -> str:
    """The reduction that ``reduce=`` of the public function ``fn`` selects ("add" is "sum"), or a ValueError
    that names the accepted values."""
    if reduce == "sum" or reduce == "add":
        return "sum"
    if reduce == "mean" or reduce == "mul" or reduce == "min" or reduce == "max":
        return reduce
    raise ValueError(f"torch_segops.{fn}: reduce must be one of 'sum', 'add', 'mean', 'mul', 'min', 'max', "
                     f"got '{reduce}'")


def has_arg(name: str) -> bool:
    return name == "min" or name == "max"


def sums_integers_then_divides(name: str) -> bool:
    """Integer src is reduced as the integer sum divided by the count (the kernels refuse it)."""
    return name == "mean"


def combine_into(name: str, out: Tensor, values: Tensor, arg: Tensor, n: int, counts: Tensor,
                 rounding: str) -> Tuple[Tensor, Tensor]:
    """The out= combine function of reduction ``name`` (its table row's ``combine``) applied; a reduction without
    one raises, so that a new reduction never borrows another's rule."""
    if name == "sum":
        return _add_into(out, values, arg, n, counts, rounding)
    if name == "mean":
        return _mean_into(out, values, arg, n, counts, rounding)
    if name == "mul":
        return _multiply_into(out, values, arg, n, counts, rounding)
    if name == "min":
        return _min_into(out, values, arg, n, counts, rounding)
    if name == "max":
        return _max_into(out, values, arg, n, counts, rounding)
    raise ValueError(f"torch_segops: the reduction '{name}' has no out= combine rule")


def combines_sums(name: str) -> bool:
    """out= reduces the sums into out, divided by the counts after (mean): the scatter op run is scatter_sum."""
    return name == "mean"


def multiplies(name: str) -> bool:
    """The empty reduction is the empty product 1 (mul), not 0."""
    return name == "mul"


def no_arg(src: Tensor) -> Tensor:
    """The arg of a reduction without one: an empty int64 tensor."""
    return torch.empty([0], dtype=torch.long, device=src.device)


def run(src: Tensor, indptr: Tensor, name: str) -> Tuple[Tensor, Tensor]:
    """(values, arg) of the compiled op of reduction ``name``; arg is empty unless has_arg(name)."""
    if name == "sum":
        return _ops.segment_sum(src, indptr), no_arg(src)
    if name == "mean":
        return _ops.segment_mean(src, indptr), no_arg(src)
    if name == "mul":
        return _ops.segment_mul(src, indptr), no_arg(src)
    if name == "min":
        return _ops.segment_min(src, indptr)
    if name == "max":
        return _ops.segment_max(src, indptr)
    if name == "logsumexp":
        return _ops.segment_logsumexp(src, indptr), no_arg(src)
    raise ValueError(f"torch_segops: unknown reduction '{name}'")


def run_out(src: Tensor, indptr: Tensor, name: str, out: Tensor) -> Tensor:
    """run written into ``out`` (checked by the caller) by the op's out= form; returns arg."""
    if name == "min" or name == "max":
        arg = torch.empty(out.shape, dtype=torch.long, device=src.device)
        if name == "min":
            _ops.segment_min_out(src, indptr, out, arg)
        else:
            _ops.segment_max_out(src, indptr, out, arg)
        return arg
    if name == "sum":
        _ops.segment_sum_out(src, indptr, out)
    elif name == "mean":
        _ops.segment_mean_out(src, indptr, out)
    elif name == "mul":
        _ops.segment_mul_out(src, indptr, out)
    elif name == "logsumexp":
        _ops.segment_logsumexp_out(src, indptr, out)
    else:
        raise ValueError(f"torch_segops: unknown reduction '{name}'")
    return no_arg(src)


def run_scatter(src: Tensor, index: Tensor, size: int, name: str, sorted: bool) -> Tuple[Tensor, Tensor]:
    """(values, arg) of the op scatter_<name>: src's rows reduced by their target in index ([*lead, n] along its
    last dim; size -1: max(index) + 1); sorted: refuse an index that is not sorted."""
    if name == "sum":
        return _ops.scatter_sum(src, index, size, sorted), no_arg(src)
    if name == "mean":
        return _ops.scatter_mean(src, index, size, sorted), no_arg(src)
    if name == "mul":
        return _ops.scatter_mul(src, index, size, sorted), no_arg(src)
    if name == "min":
        return _ops.scatter_min(src, index, size, sorted)
    if name == "max":
        return _ops.scatter_max(src, index, size, sorted)
    if name == "logsumexp":
        return _ops.scatter_logsumexp(src, index, size, sorted), no_arg(src)
    raise ValueError(f"torch_segops: unknown reduction '{name}'")


def run_scatter_plan(src: Tensor, perm: Tensor, indptr: Tensor, name: str) -> Tuple[Tensor, Tensor]:
    """run_scatter along a scatter_plan (perm, indptr) by the op scatter_<name>_plan."""
    if name == "sum":
        return _ops.scatter_sum_plan(src, perm, indptr), no_arg(src)
    if name == "mean":
        return _ops.scatter_mean_plan(src, perm, indptr), no_arg(src)
    if name == "mul":
        return _ops.scatter_mul_plan(src, perm, indptr), no_arg(src)
    if name == "min":
        return _ops.scatter_min_plan(src, perm, indptr)
    if name == "max":
        return _ops.scatter_max_plan(src, perm, indptr)
    if name == "logsumexp":
        return _ops.scatter_logsumexp_plan(src, perm, indptr), no_arg(src)
    raise ValueError(f"torch_segops: unknown reduction '{name}'")
