"""pytorch_scatter's ``scatter`` for an index in any order, deterministic: each target's rows are folded in
their order in ``src``, the result bitwise the same run to run and for any thread count.

``torch.Tensor.scatter_reduce_`` / ``index_add_`` add in whatever order threads (CPU) or atomics (CUDA)
arrive, so float results change from run to run on the GPU. Here the ops ``torch.ops.torch_segops.scatter_<name>``
fix, for every output row, the order of its inputs (their order in ``src``); min/max ties go to the first
position in ``src``. Rows of several features get the bits of the CSR segment reductions on the stably sorted
index (their chunk borders included); on the CPU, rows of one feature (sum, mean, mul) are folded serially in
row order from the reducer's identity, the bits of torch's 1-D ``scatter_add_`` and pytorch_scatter's CPU
(docs/design.md, "scatter on the CPU"). On the CPU the ops read ``src`` in place: a sorted index in one pass over
index and ``src``; any other order in one pass (one feature, while few threads share the call and its states stay
in cache) or by a stable partition of the rows by ranges of targets, each range reduced in cache. On CUDA (a
build with the opt-in TORCH_SEGOPS_CUDA_SCATTER) they run the CSR kernels over torch's stable sort of the index,
reading src's rows through its permutation (docs/cuda.md); without these kernels, a stable torch.sort of the
index, src's rows gathered in that order and the CSR ops, with the same bits (_segment.py's CSR route). A sort of
the index can be kept (:func:`scatter_plan`) and reused by every call with the same index (the ``plan=``
argument): the rows are then read through its permutation, never copied (on a device without the kernels:
gathered; on the CPU, rows of one feature read the index instead, where a sort saves nothing).

Broadcasting follows pytorch_scatter: a 1-D ``index`` applies along ``dim``; a longer one gets size-1
dims appended and is expanded to ``src.shape``. When the index does not vary along the dims after
``dim`` (a 1-D index, the graph case), whole rows are reduced with the feature dims vectorised;
otherwise every position along the other dims is reduced on its own.
"""

# No `from __future__ import annotations` here: TorchScript needs ScatterPlan's field types as real
# types, not strings.
from typing import List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from ._arguments import (check_has_dims, check_index_dtype, check_index_values, check_same_device, check_size,
                         check_type, scatter_arg_types, scatter_dim_and_size, scatter_index_shape, size_arg)
from ._reductions import has_arg, reduction_of
from ._segment import lead_to_dim, reduce_by_index, scatter_nothing, sort_index


class ScatterPlan(NamedTuple):
    """A sorted index, kept to reuse across scatter calls with the same index.

    perm: ``[*lead, N]`` int64, the stable sort permutation of the index along its last dim.
    indptr: ``[*lead, dim_size + 1]`` int64, CSR offsets of the sorted index.
    """

    perm: Tensor
    indptr: Tensor


def scatter_plan(index: Tensor, dim_size: Optional[int] = None) -> ScatterPlan:
    """Sort ``index`` (stably, along its last dim) once, for :func:`scatter` calls with ``plan=``.

    ``index`` is the row index in the form scatter reads it along ``dim``: ``[N]`` for a 1-D index, or
    ``[*lead, N]`` whose leading dims broadcast against ``src.shape[:dim]``. The output size is
    ``dim_size``, else ``max(index) + 1`` (read from the index: a host synchronisation on the GPU).
    Values must lie in ``[0, dim_size)`` (checked as in the COO functions)."""
    fn = "scatter_plan"
    if not torch.jit.is_scripting():
        check_type(fn, "index", index)
        dim_size = size_arg(fn, "dim_size", dim_size)
    check_has_dims(fn, "index", index)
    check_size(fn, "dim_size", dim_size)
    size = -1 if dim_size is None else dim_size
    check_index_dtype(fn, index)
    perm, indptr = sort_index(fn, index, size, index)
    return ScatterPlan(perm, indptr)


def _rows_before(src: Tensor, dim: int) -> int:
    n = 1
    for d in range(dim):
        n *= src.size(d)
    return n


def _scatter(fn: str, src: Tensor, index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int],
             reduce: str, plan: Optional[ScatterPlan]) -> Tuple[Tensor, Tensor]:
    if not torch.jit.is_scripting():
        dim, dim_size = scatter_arg_types(fn, src, index, dim, out, dim_size)
        # a ScatterPlan, or the named tuple a scripted scatter_plan returns (a class of TorchScript's making)
        if plan is not None and not all(isinstance(getattr(plan, f, None), Tensor) for f in ScatterPlan._fields):
            raise TypeError(f"torch_segops.{fn}: plan must be a ScatterPlan (made by scatter_plan) or None, "
                            f"got {type(plan).__name__}")
    check_same_device(fn, ["src", "index"], [src, index])
    if plan is not None:
        check_same_device(fn, ["src", "plan.perm", "plan.indptr"], [src, plan.perm, plan.indptr])
    dim, size = scatter_dim_and_size(fn, src, index, dim, out, dim_size)
    shape = scatter_index_shape(fn, index, src, dim)
    check_index_dtype(fn, index)
    if plan is not None and size == -1:
        size = plan.indptr.size(-1) - 1  # the plan's dim_size
    if plan is None and src.numel() == 0:
        check_index_values(fn, index, size)
    if src.numel() == 0:
        return scatter_nothing(fn, src, dim, out, size, reduce)
    rows_only = True
    for d in range(dim + 1, src.dim()):
        rows_only = rows_only and shape[d] == 1
    if plan is not None:
        if not rows_only:
            raise ValueError(f"torch_segops.{fn}: plan= needs an index that does not vary along the dims after dim")
        if plan.perm.size(-1) != src.size(dim) or plan.perm.dim() > dim + 1:
            raise ValueError(f"torch_segops.{fn}: plan.perm has shape {list(plan.perm.shape)}, which does not fit "
                             f"src.shape = {list(src.shape)} at dim {dim}")
        if size != -1 and plan.indptr.size(-1) - 1 != size:
            raise ValueError(f"torch_segops.{fn}: the plan was made for dim_size={plan.indptr.size(-1) - 1}, "
                             f"not {size}")
        one_feature = src.numel() == _rows_before(src, dim) * src.size(dim)
        if not (one_feature and src.device.type == "cpu"):
            perm, indptr = lead_to_dim(plan.perm, dim), lead_to_dim(plan.indptr, dim)
            # pytorch_scatter's scatter_mean divides integers with floor
            return reduce_by_index(fn, src, perm, -1, out, reduce, "floor", False, None, perm, indptr)
        # one feature on the CPU: the index is read in one pass in row order, a sort saves nothing
        # (docs/design.md, "scatter on the CPU")
    if rows_only:  # whole rows: the index as [*lead, N] (a 1-D index of src's rows along dim 0 already is)
        rows = index
        if not (dim == 0 and index.dim() == 1 and index.size(0) == src.size(0)):
            rows = index.reshape(shape[: dim + 1]).expand(shape[:dim] + [src.size(dim)])
        return reduce_by_index(fn, src, rows, size, out, reduce, "floor", False, index)
    # the index varies along the feature dims: every position of the other dims is reduced on its own
    last = src.dim() - 1
    full = index.reshape(shape).expand(src.shape).movedim(dim, last)
    moved_out = out.movedim(dim, last) if out is not None else None
    values, arg = reduce_by_index(fn, src.movedim(dim, last), full, size, moved_out, reduce, "floor", False, index)
    if has_arg(reduce):
        arg = arg.movedim(last, dim)
    if out is not None:
        return out, arg
    return values.movedim(last, dim), arg


def scatter_sum(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None, plan: Optional[ScatterPlan] = None) -> Tensor:
    """Sum of the values of ``src`` scattered to ``index`` along ``dim``; with ``out``, added to it.
    Deterministic (see the module docstring); ``plan`` reuses a :func:`scatter_plan` of this index."""
    return _scatter("scatter_sum", src, index, dim, out, dim_size, "sum", plan)[0]


scatter_add = scatter_sum


def scatter_mul(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None, plan: Optional[ScatterPlan] = None) -> Tensor:
    """Product of the values of ``src`` scattered to ``index`` along ``dim``: 1 where nothing is scattered;
    with ``out``, multiplied into it (pytorch_scatter's scatter_mul). Integer products wrap on overflow.
    Deterministic; the gradient is exact where a target's entries hold zeros (pytorch_scatter's gives 0
    there)."""
    return _scatter("scatter_mul", src, index, dim, out, dim_size, "mul", plan)[0]


def scatter_mean(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                 dim_size: Optional[int] = None, plan: Optional[ScatterPlan] = None) -> Tensor:
    """Mean per target (0 where nothing is scattered); integer src divides with floor, as
    pytorch_scatter's scatter_mean; with ``out``, ``(out + sum) / max(count, 1)``."""
    return _scatter("scatter_mean", src, index, dim, out, dim_size, "mean", plan)[0]


def scatter_min(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None, plan: Optional[ScatterPlan] = None) -> Tuple[Tensor, Tensor]:
    """(min, argmin) per target: argmin is the position along dim in src (the first one of ties),
    ``src.size(dim)`` where nothing is scattered (value 0) or where ``out``'s value is kept."""
    return _scatter("scatter_min", src, index, dim, out, dim_size, "min", plan)


def scatter_max(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None, plan: Optional[ScatterPlan] = None) -> Tuple[Tensor, Tensor]:
    """(max, argmax) per target; see :func:`scatter_min`."""
    return _scatter("scatter_max", src, index, dim, out, dim_size, "max", plan)


def scatter(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None, dim_size: Optional[int] = None,
            reduce: str = "sum", plan: Optional[ScatterPlan] = None) -> Tensor:
    """pytorch_scatter's ``scatter`` with reduce sum/add/mul/mean/min/max, deterministic."""
    return _scatter("scatter", src, index, dim, out, dim_size, reduction_of("scatter", reduce), plan)[0]
