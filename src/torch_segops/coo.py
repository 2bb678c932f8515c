"""pytorch_scatter's COO segment functions: ``segment_coo``, ``segment_{sum,add,mean,min,max}_coo`` and
``gather_coo``.

``index`` holds the output segment of every row of ``src`` along ``dim = index.dim() - 1`` and is
sorted along that dim; its leading dims broadcast against ``src`` (size 1 or equal), and a size-1 last
dim broadcasts over ``src.size(dim)``. The reductions are the scatter ops with ``sorted=True``
(``torch.ops.torch_segops.scatter_<name>``: one pass over index and src that validates the index and
reduces, with no CSR offsets, so no memory in proportion to the output size beyond the output; the
results are bitwise those of the CSR ops on the offsets of the index); on devices where these ops have
no kernel (CUDA), ``index_to_indptr``'s offsets and the CSR ops (_csr_route). ``gather_coo`` on the CPU is one
pass of its own (``gather_index``: each row copied as its index is read and checked), faster than offsets +
``gather_csr`` (benchmarks/bench_coo.py).

Output size along dim: ``out.size(dim)``, else ``dim_size``, else ``max(index) + 1`` (read from index:
a host synchronisation on the GPU). With ``out=`` the COO reductions reduce into what ``out`` already
holds (pytorch_scatter's documented ``out_i = out_i + sum_j src_j``; mul gives ``out_i * prod_j src_j``;
min/max keep ``out_i`` where it wins; mean gives ``(out_i + sum_j src_j) / max(count_i, 1)``), unlike the
CSR forms, which overwrite.
Scriptable with ``torch.jit.script`` like the CSR wrappers.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ._arguments import check_index_dtype, check_index_values, check_same_device, size_arg
from ._coo_kernel import index_offsets
from ._reductions import (combine_rule, divide_by_counts, has_arg, reduction_of, run, run_scatter, run_scatter_plan,
                          segment_lengths, sum_then_divide, sums_integers_then_divides, target_counts)
from .ops import _check_index_types, _check_out, _check_type, _reduced_shape, _rows_of_out, _write_out

_ops = torch.ops.torch_segops


def _check_index_args(fn: str, src: Tensor, index: Tensor, out: Optional[Tensor], with_dim: bool) -> int:
    """The reduced dim (index.dim() - 1) after checking src, index and out: tensors (eager), src and index on one
    device, index's dims against src's: 1 to src.dim() dims, each leading dim (and dim itself when with_dim)
    equal to src's or 1 (broadcast)."""
    if not torch.jit.is_scripting():
        _check_index_types(fn, src, index, out)
    check_same_device(fn, ["src", "index"], [src, index])
    if index.dim() == 0 or index.dim() > src.dim():
        raise ValueError(f"torch_segops.{fn}: index must have between 1 and src.dim() = {src.dim()} dims, "
                         f"got {index.dim()}")
    dim = index.dim() - 1
    for d in range(dim + 1 if with_dim else dim):
        if index.size(d) != 1 and index.size(d) != src.size(d):
            raise ValueError(f"torch_segops.{fn}: index.size({d}) = {index.size(d)} does not match "
                             f"src.size({d}) = {src.size(d)} (must be equal or 1 to broadcast)")
    return dim


def _coo_rows(fn: str, src: Tensor, index: Tensor) -> Tensor:
    """A sorted COO index with one entry per row of src along dim (leading dims broadcast as in pytorch_scatter)."""
    dim = _check_index_args(fn, src, index, None, True)
    check_index_dtype(fn, index)
    if index.size(dim) != src.size(dim):  # one index for every row along dim
        shape: List[int] = list(index.shape)
        shape[dim] = src.size(dim)
        index = index.expand(shape)
    return index


def _output_size(fn: str, src: Tensor, index: Tensor, out: Optional[Tensor], dim_size: Optional[int]) -> int:
    """Rows of the output along dim: out.size(dim), else dim_size, else -1 (read max(index) + 1)."""
    if not torch.jit.is_scripting():
        dim_size = size_arg(fn, "dim_size", dim_size)
        if out is not None:
            _check_type(fn, "out", out)
    if out is not None:
        return _rows_of_out(fn, out, src, index.dim() - 1, "dim_size", dim_size)
    if dim_size is not None:
        if dim_size < 0:
            raise ValueError(f"torch_segops.{fn}: dim_size must be a non-negative int, got {dim_size}")
        return dim_size
    return -1


def _reduce_into(fn: str, out: Tensor, rule: str, values: Tensor, arg: Tensor, n: int,
                 counts: Tensor, rounding: str) -> Tuple[Tensor, Tensor]:
    """Reduce a fresh reduction into ``out``'s current values (COO and scatter semantics) by a combine rule of
    _reductions.py and write the result into ``out``. ``values`` holds the segment sums for "mean" (divided
    here, after adding out's values). For "min"/"max", ``out_i`` wins ties and empty segments (its arg is then
    ``n``, src.size(dim))."""
    _check_out(fn, out, values.dtype, values.device, list(values.shape))
    if rule == "add":
        return out.copy_(out + values), arg
    if rule == "mul":
        # values' gradient needs out's old values, which copy_ overwrites: autograd keeps a copy of them instead
        old = out.clone() if torch.is_grad_enabled() and values.requires_grad else out
        return out.copy_(old * values), arg
    if rule == "mean":
        return out.copy_(divide_by_counts(out + values, counts, rounding)), arg
    if rule != "min" and rule != "max":
        raise ValueError(f"torch_segops.{fn}: no out= combine rule '{rule}'")
    better = values < out if rule == "min" else values > out
    if values.is_floating_point():  # a NaN wins (first NaN kept), as in the segment reductions
        better = better | (values.isnan() & ~out.isnan())
    better = better & (arg != n)  # an empty segment has nothing to offer
    arg = torch.where(better, arg, torch.full_like(arg, n))
    return out.copy_(torch.where(better, values, out)), arg


def _has_scatter_ops(src: Tensor) -> bool:
    """Whether the ops scatter_<name> have a kernel for src's device: the CPU only. Elsewhere (CUDA) the COO and
    scatter reductions take the CSR route: offsets of the index (scatter: of its stable torch.sort, src's rows
    gathered in that order), then the CSR ops."""
    return src.device.type == "cpu"


def _original_arg(arg: Tensor, perm: Tensor, dim: int, n: int) -> Tensor:
    """Positions among rows taken in the order perm ([*lead, n]; arg n for empty segments) -> positions
    in the original src."""
    if n == 0:
        return arg
    shape: List[int] = list(perm.shape) + [1] * (arg.dim() - dim - 1)
    full: List[int] = list(arg.shape[:dim]) + [n] + list(arg.shape[dim + 1:])
    picked = perm.reshape(shape).expand(full).gather(dim, arg.clamp(max=n - 1))
    return torch.where(arg == n, arg, picked)


def _permute_rows(src: Tensor, perm: Tensor, dim: int) -> Tensor:
    """src with its rows along dim taken in the order perm ([*lead, N], lead broadcasting src's; dim + 1 dims)."""
    if perm.numel() == perm.size(-1):  # one permutation shared by every leading position: whole rows
        return src.index_select(dim, perm.reshape(-1))
    shape: List[int] = list(perm.shape) + [1] * (src.dim() - dim - 1)
    full: List[int] = list(src.shape[:dim]) + [perm.size(-1)] + list(src.shape[dim + 1:])
    return src.gather(dim, perm.reshape(shape).expand(full))


def _reduce_csr(fn: str, src: Tensor, indptr: Tensor, out: Optional[Tensor], reduce: str, rounding: str,
                perm: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """The CSR route: src's rows (in the order perm when given, arg mapped back) reduced along indptr, into
    ``out`` when given. Integer mean divides with ``rounding``."""
    dim = indptr.dim() - 1
    n = src.size(dim)
    if perm is not None:
        src = _permute_rows(src, perm, dim)
    integer = not src.is_floating_point() and not src.is_complex()
    rule = combine_rule(reduce)
    if out is None and integer and sums_integers_then_divides(reduce):
        return sum_then_divide(src, indptr, rounding), indptr.new_empty([0])
    if out is not None and rule == "mean":  # the sum now, divided by the counts after out's values are added
        total = _ops.segment_sum(src, indptr)
        return _reduce_into(fn, out, rule, total, indptr.new_empty([0]), n, segment_lengths(indptr, total), rounding)
    values, arg = run(src, indptr, reduce)
    if perm is not None and has_arg(reduce):
        arg = _original_arg(arg, perm, dim, n)
    if out is None:
        return values, arg
    return _reduce_into(fn, out, rule, values, arg, n, values, rounding)


def _csr_route(fn: str, src: Tensor, index: Tensor, size: int, out: Optional[Tensor], reduce: str, rounding: str,
               sorted: bool, caller_index: Optional[Tensor], perm: Optional[Tensor],
               indptr: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """_reduce_by_index where the scatter ops have no kernel (_has_scatter_ops)."""
    if perm is not None and indptr is not None:
        return _reduce_csr(fn, src, indptr, out, reduce, rounding, perm)
    if not sorted and caller_index is not None:
        check_index_values(fn, caller_index, size)  # before the sort: the caller's positions
    # the offsets of the index as given, sorted or not: a bad value is reported at its own position, also where the
    # check above does not run (torch.compile); the sort gives only the order
    indptr = index_offsets(index, size, sorted)
    order = None if sorted else torch.sort(index, dim=-1, stable=True)[1]
    return _reduce_csr(fn, src, indptr, out, reduce, rounding, order)


def _by_index(fn: str, src: Tensor, index: Tensor, size: int, reduce: str, sorted: bool,
              caller_index: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """run_scatter of ``index`` ([*lead, n]); for a value out of range when ``caller_index`` is given, the error
    names its position there (the public wrapper names ``fn``: _errors.py)."""
    if not torch.jit.is_scripting():
        return _by_index_positioned(fn, src, index, size, reduce, sorted, caller_index)
    if caller_index is not None:  # scripted (no try statement): the values are checked first
        check_index_values(fn, caller_index, size)
    return run_scatter(src, index, size, reduce, sorted)


def _by_index_positioned(fn: str, src: Tensor, index: Tensor, size: int, reduce: str, sorted: bool,
                         caller_index: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    # eager only: TorchScript compiles no try statement
    try:
        return run_scatter(src, index, size, reduce, sorted)
    except RuntimeError as e:
        if caller_index is not None and str(e).startswith("torch_segops: index must"):
            check_index_values(fn, caller_index, size)  # the error path only: the caller's position
        raise


def _reduce_by_index(fn: str, src: Tensor, index: Tensor, size: int, out: Optional[Tensor], reduce: str,
                     rounding: str, sorted: bool, caller_index: Optional[Tensor], perm: Optional[Tensor] = None,
                     indptr: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """The COO and scatter reductions by an index (one pass, no offsets: the ops scatter_<name>), or along a
    scatter plan (perm and indptr given: scatter_<name>_plan): (values, arg), reduced into ``out`` when given.
    Integer mean divides with ``rounding``."""
    if not _has_scatter_ops(src):
        return _csr_route(fn, src, index, size, out, reduce, rounding, sorted, caller_index, perm, indptr)
    dim = index.dim() - 1
    n = src.size(dim)
    integer = not src.is_floating_point() and not src.is_complex()
    rule = combine_rule(reduce)
    what = reduce
    if (out is None and integer and sums_integers_then_divides(reduce)) or (out is not None and rule == "mean"):
        what = "sum"  # divided by the counts here, after out's values are added
    if perm is not None and indptr is not None:
        values, arg = run_scatter_plan(src, perm, indptr, what)
    else:
        values, arg = _by_index(fn, src, index, size, what, sorted, caller_index)
    if what != reduce:
        if perm is not None and indptr is not None:
            counts = segment_lengths(indptr, values)
        else:
            counts = target_counts(index, values)
        if out is None:
            return divide_by_counts(values, counts, rounding), arg
        return _reduce_into(fn, out, rule, values, arg, n, counts, rounding)
    if out is None:
        return values, arg
    return _reduce_into(fn, out, rule, values, arg, n, values, rounding)


def _segment_coo(fn: str, src: Tensor, index: Tensor, out: Optional[Tensor], dim_size: Optional[int],
                 reduce: str) -> Tuple[Tensor, Tensor]:
    size = _output_size(fn, src, index, out, dim_size)
    return _reduce_by_index(fn, src, _coo_rows(fn, src, index), size, out, reduce, "trunc", True, None)


def segment_sum_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tensor:
    """Sum of the rows of ``src`` that share a (sorted) ``index`` value; with ``out``, added to it."""
    return _segment_coo("segment_sum_coo", src, index, out, dim_size, "sum")[0]


segment_add_coo = segment_sum_coo


def segment_mean_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                     dim_size: Optional[int] = None) -> Tensor:
    """Mean per index value (empty segments 0; integer src: truncating integer division); with
    ``out``, ``(out + sum) / max(count, 1)``."""
    return _segment_coo("segment_mean_coo", src, index, out, dim_size, "mean")[0]


def segment_min_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """(min, argmin) per index value; argmin holds positions along dim, ``src.size(dim)`` for empty
    segments (and, with ``out``, where ``out``'s value is kept); ties take the first position."""
    return _segment_coo("segment_min_coo", src, index, out, dim_size, "min")


def segment_max_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """(max, argmax) per index value; see :func:`segment_min_coo`."""
    return _segment_coo("segment_max_coo", src, index, out, dim_size, "max")


def segment_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None, dim_size: Optional[int] = None,
                reduce: str = "sum") -> Tensor:
    """pytorch_scatter's ``segment_coo``: reduce the rows of ``src`` by their sorted ``index``; also
    ``reduce="mul"`` (as :func:`torch_segops.segment_csr`: empty segments 1; with ``out``, multiplied in)."""
    return _segment_coo("segment_coo", src, index, out, dim_size, reduction_of("segment_coo", reduce))[0]


def _one_pass_gather(src: Tensor, index: Tensor) -> bool:
    """gather_coo by the native one-pass op (gather_index: CPU, index validated as it is read) rather than
    offsets + gather_csr (the other devices; and while torch.compile traces, to keep its graphs as they were)."""
    if not torch.jit.is_scripting():
        if torch.compiler.is_compiling():
            return False
    return src.device.type == "cpu" and index.dtype in (torch.int64, torch.int32)


def gather_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Row ``e`` of the output along dim is ``src``'s row ``index[e]`` (index sorted along its last
    dim); ``out``, when given, is overwritten. The gradient is a segment sum (deterministic)."""
    fn = "gather_coo"
    dim = _check_index_args(fn, src, index, out, False)
    if _one_pass_gather(src, index):
        result = _ops.gather_index(src, index.expand(list(src.shape[:dim]) + [index.size(dim)]), True)
    else:
        result = _ops.gather_csr(src, index_offsets(index, src.size(dim), True), index.size(dim))
    if out is not None:
        _check_out(fn, out, src.dtype, src.device, _reduced_shape(src, index, index.size(dim)))
    return _write_out(fn, out, result)
