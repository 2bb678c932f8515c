"""pytorch_scatter's ``scatter`` for an index in any order, deterministic: each target's rows are folded in
their order in ``src``, bitwise as the CSR segment reductions fold them on the stably sorted index.

``torch.Tensor.scatter_reduce_`` / ``index_add_`` add in whatever order threads (CPU) or atomics (CUDA)
arrive, so float results change from run to run on the GPU. Here the ops ``torch.ops.torch_segops.scatter_<name>``
fix, for every output row, the order of its inputs (their order in ``src``) and the chunk borders of the CSR
reduction of the sorted index, whatever the thread count: the result is bitwise the same run to run, for any
thread count, and the same as on the sorted index; min/max ties go to the first position in ``src``. On the CPU
they read ``src`` in place: a sorted index in one pass over index and ``src``; any other order by a stable
partition of the rows by ranges of targets and a counting sort of each range in cache (docs/design.md,
"scatter on the CPU"). Elsewhere (CUDA: these ops have no CUDA kernel yet) a stable torch.sort of the
index, src's rows gathered in that order and the CSR ops, with the same bits (coo._csr_route). A sort of the
index can be kept (:func:`scatter_plan`) and reused by every call with the same index (the ``plan=``
argument): on the CPU the rows are then read through its permutation, never copied.

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

from ._arguments import check_index_dtype, check_index_values, check_same_device, dim_arg, size_arg
from ._coo_kernel import index_offsets
from ._reductions import combine_rule, has_arg, reduction_of
from .coo import _reduce_by_index, _reduce_into
from .ops import _check_index_types, _check_type, _rows_of_out


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
        _check_type(fn, "index", index)
        dim_size = size_arg(fn, "dim_size", dim_size)
    if index.dim() == 0:
        raise ValueError("torch_segops.scatter_plan: index must have at least one dimension, got a 0-dim tensor")
    if dim_size is not None and dim_size < 0:
        raise ValueError(f"torch_segops.scatter_plan: dim_size must be a non-negative int, got {dim_size}")
    size = -1 if dim_size is None else dim_size
    check_index_dtype(fn, index)
    return _plan(fn, index, size, index)


def _native_order(index: Tensor) -> bool:
    """Whether the native index_sort orders ``index``: on the CPU, and not while torch.compile traces
    (its fake kernel cannot know whether a permutation comes back)."""
    if not torch.jit.is_scripting():
        if torch.compiler.is_compiling():
            return False
    return index.device.type == "cpu"


def _index_sort(fn: str, rows: Tensor, size: int, caller_index: Tensor) -> Tuple[Tensor, Tensor]:
    if not torch.jit.is_scripting():
        return _index_sort_eager(fn, rows, size, caller_index)
    return torch.ops.torch_segops.index_sort(rows, size)  # scripted: the values were checked first


def _index_sort_eager(fn: str, rows: Tensor, size: int, caller_index: Tensor) -> Tuple[Tensor, Tensor]:
    # eager only: TorchScript compiles no try statement
    try:
        return torch.ops.torch_segops.index_sort(rows, size)
    except RuntimeError as e:
        if str(e).startswith("torch_segops: index must"):
            check_index_values(fn, caller_index, size)  # the error path only: the position in the caller's index
        raise


def _order(fn: str, rows: Tensor, size: int, caller_index: Tensor) -> Tuple[Tensor, Tensor]:
    """(perm, indptr) of the index ``rows`` ([*lead, N]; size -1: max(index) + 1), its values checked (errors
    name their position in ``caller_index``). perm has no entries when the native sort found rows sorted."""
    if _native_order(rows):
        if torch.jit.is_scripting():
            check_index_values(fn, caller_index, size)
        return _index_sort(fn, rows, size, caller_index)
    check_index_values(fn, caller_index, size)  # before the sort: the caller's positions
    ordered, perm = torch.sort(rows, dim=-1, stable=True)
    return perm, index_offsets(ordered, size, False)


def _plan(fn: str, index: Tensor, size: int, caller_index: Tensor) -> ScatterPlan:
    """scatter_plan of ``index`` (size -1: max(index) + 1), always with its permutation."""
    perm, indptr = _order(fn, index, size, caller_index)
    n = index.size(-1)
    if perm.size(-1) != n:  # already sorted
        perm = torch.arange(n, device=index.device).expand(index.shape).contiguous()
    return ScatterPlan(perm, indptr)


def _index_shape(fn: str, index: Tensor, src: Tensor, dim: int) -> List[int]:
    """index's shape after pytorch_scatter's broadcast rule (before expanding to src.shape): a 1-D index
    sits at dim; a longer one gets trailing size-1 dims. Every dim must be 1 or src's."""
    if index.dim() == 1:
        shape = [1] * src.dim()
        shape[dim] = index.size(0)
    else:
        if index.dim() > src.dim():
            raise ValueError(f"torch_segops.{fn}: index has {index.dim()} dims but src only {src.dim()}")
        shape = list(index.shape) + [1] * (src.dim() - index.dim())
    for d in range(src.dim()):
        if shape[d] != 1 and shape[d] != src.size(d):
            raise ValueError(f"torch_segops.{fn}: index (broadcast to {shape}) does not match src.shape = "
                             f"{list(src.shape)} at dim {d} (must be equal or 1)")
    return shape


def _rows_plan(fn: str, index: Tensor, shape: List[int], src: Tensor, dim: int, size: int) -> ScatterPlan:
    """The plan of an index that does not vary along the dims after dim (shape: _index_shape's), as ``[*lead, N]``
    rows; size -1: read from the index (for several scatters with one index: the composite functions)."""
    rows = index.reshape(shape[: dim + 1]).expand(shape[:dim] + [src.size(dim)])
    return _plan(fn, rows, size, index)


def _lead_to_dim(t: Tensor, dim: int) -> Tensor:
    """A ``[*lead, k]`` tensor of a 1-D index used at dim > 0 with size-1 dims in front, to dim + 1 dims."""
    if t.dim() < dim + 1:
        return t.reshape([1] * (dim + 1 - t.dim()) + list(t.shape))
    return t


def _scatter_nothing(fn: str, src: Tensor, dim: int, out: Optional[Tensor], size: int,
                     reduce: str) -> Tuple[Tensor, Tensor]:
    """An empty src scatters nothing, whatever the index holds (pytorch_scatter reads the size from the
    index expanded to src: 0 without dim_size): zeros, arg src.size(dim), out unchanged."""
    shape: List[int] = list(src.shape)
    shape[dim] = max(size, 0)
    # zeros (ones for mul) that stay connected to src for autograd (a reduction over an empty dim or of no
    # elements)
    rule = "mul" if combine_rule(reduce) == "mul" else "add"  # out unchanged: times 1, or plus 0
    if rule == "mul":
        values = src.prod(dim, keepdim=True, dtype=src.dtype).expand(shape)
    else:
        values = src.sum(dim, keepdim=True, dtype=src.dtype).expand(shape)
    arg = torch.full(shape, src.size(dim), dtype=torch.long, device=src.device)
    if not has_arg(reduce):
        arg = arg.new_empty([0])
    if out is None:
        return values.contiguous(), arg
    return _reduce_into(fn, out, rule, values, arg, src.size(dim), values, "floor")


def _eager_arg_types(fn: str, src, index, dim, out, dim_size) -> Tuple[int, Optional[int]]:
    """Eager only (TorchScript types the arguments itself): tensors are tensors, dim and dim_size integers
    (numpy's too); returns (dim, dim_size) as Python ints."""
    _check_index_types(fn, src, index, out)
    return dim_arg(fn, dim), size_arg(fn, "dim_size", dim_size)


def _dim_and_size(fn: str, src: Tensor, index: Tensor, dim: int, out: Optional[Tensor],
                  dim_size: Optional[int]) -> Tuple[int, int]:
    """dim in [0, src.dim()) and the output size along it: out.size(dim), else dim_size, else -1 (read from the
    index), with the shape checks of every scatter function."""
    if src.dim() == 0:
        raise ValueError(f"torch_segops.{fn}: src must have at least one dimension")
    if dim < -src.dim() or dim >= src.dim():
        raise ValueError(f"torch_segops.{fn}: dim {dim} is out of range for src with {src.dim()} dims")
    if dim < 0:
        dim += src.dim()
    if index.dim() == 0:
        raise ValueError(f"torch_segops.{fn}: index must have at least one dimension, got a 0-dim tensor")
    size = -1
    if out is not None:
        size = _rows_of_out(fn, out, src, dim, "dim_size", dim_size)
    elif dim_size is not None:
        if dim_size < 0:
            raise ValueError(f"torch_segops.{fn}: dim_size must be a non-negative int, got {dim_size}")
        size = dim_size
    return dim, size


def _scatter(fn: str, src: Tensor, index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int],
             reduce: str, plan: Optional[ScatterPlan]) -> Tuple[Tensor, Tensor]:
    if not torch.jit.is_scripting():
        dim, dim_size = _eager_arg_types(fn, src, index, dim, out, dim_size)
        # a ScatterPlan, or the named tuple a scripted scatter_plan returns (a class of TorchScript's making)
        if plan is not None and not all(isinstance(getattr(plan, f, None), Tensor) for f in ScatterPlan._fields):
            raise TypeError(f"torch_segops.{fn}: plan must be a ScatterPlan (made by scatter_plan) or None, "
                            f"got {type(plan).__name__}")
    check_same_device(fn, ["src", "index"], [src, index])
    if plan is not None:
        check_same_device(fn, ["src", "plan.perm", "plan.indptr"], [src, plan.perm, plan.indptr])
    dim, size = _dim_and_size(fn, src, index, dim, out, dim_size)
    shape = _index_shape(fn, index, src, dim)
    check_index_dtype(fn, index)
    if plan is not None and size == -1:
        size = plan.indptr.size(-1) - 1  # the plan's dim_size
    if plan is None and src.numel() == 0:
        check_index_values(fn, index, size)
    if src.numel() == 0:
        return _scatter_nothing(fn, src, dim, out, size, reduce)
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
        perm, indptr = _lead_to_dim(plan.perm, dim), _lead_to_dim(plan.indptr, dim)
        # pytorch_scatter's scatter_mean divides integers with floor
        return _reduce_by_index(fn, src, perm, -1, out, reduce, "floor", False, None, perm, indptr)
    if rows_only:  # whole rows: the index as [*lead, N]
        rows = index.reshape(shape[: dim + 1]).expand(shape[:dim] + [src.size(dim)])
        return _reduce_by_index(fn, src, rows, size, out, reduce, "floor", False, index)
    # the index varies along the feature dims: every position of the other dims is reduced on its own
    last = src.dim() - 1
    full = index.reshape(shape).expand(src.shape).movedim(dim, last)
    moved_out = out.movedim(dim, last) if out is not None else None
    values, arg = _reduce_by_index(fn, src.movedim(dim, last), full, size, moved_out, reduce, "floor", False, index)
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
