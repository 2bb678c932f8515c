"""The core below the public modules (csr.py: CSR, coo.py, scatter.py, composite.py): the reductions along
offsets (``reduce_segments``) and by an index (``reduce_by_index``: the scatter ops, a scatter plan, or the CSR
route of the devices where the scatter ops have no kernel), ``out=`` written in place or combined with
out's values (``combine_with_out``), and the stable sort of an index (``sort_index``). The public modules check
their arguments (_arguments.py) and call down here; this module calls the compiled ops through _reductions.py.

Scriptable with ``torch.jit.script`` like the public wrappers (eager-only code sits under
``if not torch.jit.is_scripting():``).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ._arguments import check_csr_tensors, check_index_values, check_out, reduced_shape
from ._reductions import (combine_into, combines_sums, divide_by_counts, has_arg, multiplies, no_arg, run, run_out,
                          run_scatter, run_scatter_plan, segment_lengths, sum_then_divide, sums_integers_then_divides,
                          target_counts)

_ops = torch.ops.torch_segops


# ---- along offsets (CSR) ---------------------------------------------------------------------------------------


def nonempty_indptr(indptr: Tensor) -> Tensor:
    """An indptr with an empty last dim means zero segments (as in pytorch_scatter): the same as a
    single offset. The kernels want at least one offset, so give them that."""
    if indptr.size(-1) == 0:
        shape: List[int] = list(indptr.shape)
        shape[-1] = 1
        return indptr.new_zeros(shape)
    return indptr


def in_place(out, src: Tensor, indptr: Tensor) -> bool:
    """Whether the kernel may write straight into ``out`` (no temporary, no copy): nothing records a
    gradient, nothing traces (the compiler gets the functional op), and out is a plain contiguous
    tensor sharing no memory with the inputs. Otherwise out= computes a result and copies it in.
    Eager only (never called from TorchScript)."""
    if type(out) is not Tensor or not out.is_contiguous() or out.requires_grad:
        return False
    inputs = (src, indptr)
    if torch.compiler.is_compiling() or any(type(t) is not Tensor for t in inputs):
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        return False
    if out.numel() == 0:
        return True
    return not any(t.numel() > 0 and _memory_overlaps(out, t) for t in inputs)


def _memory_overlaps(a: Tensor, b: Tensor) -> bool:
    """Whether the memory of a's and b's storages overlaps: also two storages over one buffer (two
    ``torch.from_numpy`` views of one array), which torch's own out= ops do not detect."""
    sa, sb = a.untyped_storage(), b.untyped_storage()
    return sa.data_ptr() < sb.data_ptr() + sb.nbytes() and sb.data_ptr() < sa.data_ptr() + sa.nbytes()


def write_out(fn: str, out: Optional[Tensor], result: Tensor, name: str = "out") -> Tensor:
    """Overwrite ``out`` in full with ``result`` (never accumulate) and return it."""
    if out is None:
        return result
    check_out(fn, out, result.dtype, result.device, list(result.shape), name)
    return out.copy_(result)


def reduce_segments(fn: str, src: Tensor, indptr: Tensor, reduce: str,
                    out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """(values, arg) of the reduction named ``reduce`` (_reductions.py); values written into ``out`` when
    given (arg is empty for a reduction without one)."""
    check_csr_tensors(fn, src, indptr)
    indptr = nonempty_indptr(indptr)
    integer_mean = sums_integers_then_divides(reduce) and not src.is_floating_point() and not src.is_complex()
    if not torch.jit.is_scripting():
        if out is not None and not integer_mean and in_place(out, src, indptr):
            shape = reduced_shape(src, indptr, indptr.size(-1) - 1)
            check_out(fn, out, src.dtype, src.device, shape)
            return out, run_out(src, indptr, reduce, out)
    if integer_mean:
        values, arg = sum_then_divide(src, indptr, "trunc"), no_arg(src)  # C++ integer division
    else:
        values, arg = run(src, indptr, reduce)
    return write_out(fn, out, values), arg


# ---- by an index (COO, scatter) -------------------------------------------------------------------------


def index_offsets(index: Tensor, size: int, check_sorted: bool) -> Tensor:
    """``torch.ops.torch_segops.index_to_indptr`` (the callers have checked the index's dtype and dims)."""
    return torch.ops.torch_segops.index_to_indptr(index, size, check_sorted)


def combine_with_out(fn: str, out: Tensor, reduce: str, values: Tensor, arg: Tensor, n: int,
                     counts: Tensor, rounding: str) -> Tuple[Tensor, Tensor]:
    """Combine a fresh reduction with ``out``'s current values (COO and scatter semantics) by the combine function
    of the reduction ``reduce`` (_reductions.combine_into) and write the result into ``out``. ``values`` holds the
    segment sums where combines_sums(reduce) (divided there, after adding out's values)."""
    check_out(fn, out, values.dtype, values.device, list(values.shape))
    result, arg = combine_into(reduce, out, values, arg, n, counts, rounding)
    return out.copy_(result), arg


def _registered_for_cuda() -> bool:
    """Whether the loaded library has the scatter ops' CUDA kernels (a CUDA build)."""
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key("torch_segops::scatter_sum", "CUDA"))
    except RuntimeError:  # the library is not loaded (the doctor's process)
        return False


_CUDA_SCATTER_OPS = _registered_for_cuda()


def has_scatter_ops(src: Tensor) -> bool:
    """Whether the ops scatter_<name> have a kernel for src's device: the CPU, and CUDA in a CUDA build (scripted
    code, which cannot ask the dispatcher, takes the CSR route on CUDA). Elsewhere the COO and scatter reductions
    take the CSR route: offsets of the index (scatter: of its stable torch.sort, src's rows gathered in that
    order), then the CSR ops, with the same bits."""
    if src.device.type == "cpu":
        return True
    if not torch.jit.is_scripting():
        return src.device.type == "cuda" and _CUDA_SCATTER_OPS
    return False


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
    if out is None and integer and sums_integers_then_divides(reduce):
        return sum_then_divide(src, indptr, rounding), indptr.new_empty([0])
    if out is not None and combines_sums(reduce):  # the sum now, divided by the counts after out's values are added
        total = _ops.segment_sum(src, indptr)
        counts = segment_lengths(indptr, total)
        return combine_with_out(fn, out, reduce, total, indptr.new_empty([0]), n, counts, rounding)
    values, arg = run(src, indptr, reduce)
    if perm is not None and has_arg(reduce):
        arg = _original_arg(arg, perm, dim, n)
    if out is None:
        return values, arg
    return combine_with_out(fn, out, reduce, values, arg, n, values, rounding)


def _csr_route(fn: str, src: Tensor, index: Tensor, size: int, out: Optional[Tensor], reduce: str, rounding: str,
               sorted: bool, caller_index: Optional[Tensor], perm: Optional[Tensor],
               indptr: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """reduce_by_index where the scatter ops have no kernel (has_scatter_ops)."""
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


def reduce_by_index(fn: str, src: Tensor, index: Tensor, size: int, out: Optional[Tensor], reduce: str,
                     rounding: str, sorted: bool, caller_index: Optional[Tensor], perm: Optional[Tensor] = None,
                     indptr: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """The COO and scatter reductions by an index (one pass, no offsets: the ops scatter_<name>), or along a
    scatter plan (perm and indptr given: scatter_<name>sort_index): (values, arg), reduced into ``out`` when given.
    Integer mean divides with ``rounding``."""
    if not has_scatter_ops(src):
        return _csr_route(fn, src, index, size, out, reduce, rounding, sorted, caller_index, perm, indptr)
    dim = index.dim() - 1
    n = src.size(dim)
    integer = not src.is_floating_point() and not src.is_complex()
    what = reduce
    if (out is None and integer and sums_integers_then_divides(reduce)) or (out is not None and combines_sums(reduce)):
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
        return combine_with_out(fn, out, reduce, values, arg, n, counts, rounding)
    if out is None:
        return values, arg
    return combine_with_out(fn, out, reduce, values, arg, n, values, rounding)


# ---- the sort of an index (scatter plans) -----------------------------------------------------------------


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


def sort_index(fn: str, index: Tensor, size: int, caller_index: Tensor) -> Tuple[Tensor, Tensor]:
    """(perm, indptr): the fields of scatter_plan of ``index`` (size -1: max(index) + 1), always with the
    permutation."""
    perm, indptr = _order(fn, index, size, caller_index)
    n = index.size(-1)
    if perm.size(-1) != n:  # already sorted
        perm = torch.arange(n, device=index.device).expand(index.shape).contiguous()
    return perm, indptr


def sort_rows(fn: str, index: Tensor, shape: List[int], src: Tensor, dim: int, size: int) -> Tuple[Tensor, Tensor]:
    """sort_index of an index that does not vary along the dims after dim (shape: scatter_index_shape's), as
    ``[*lead, N]`` rows; size -1: read from the index (for several scatters with one index: the composite functions)."""
    rows = index.reshape(shape[: dim + 1]).expand(shape[:dim] + [src.size(dim)])
    return sort_index(fn, rows, size, index)


def lead_to_dim(t: Tensor, dim: int) -> Tensor:
    """A ``[*lead, k]`` tensor of a 1-D index used at dim > 0 with size-1 dims in front, to dim + 1 dims."""
    if t.dim() < dim + 1:
        return t.reshape([1] * (dim + 1 - t.dim()) + list(t.shape))
    return t


def scatter_nothing(fn: str, src: Tensor, dim: int, out: Optional[Tensor], size: int,
                    reduce: str) -> Tuple[Tensor, Tensor]:
    """An empty src scatters nothing, whatever the index holds (pytorch_scatter reads the size from the
    index expanded to src: 0 without dim_size): zeros, arg src.size(dim), out unchanged."""
    shape: List[int] = list(src.shape)
    shape[dim] = max(size, 0)
    # zeros (ones for mul) that stay connected to src for autograd (a reduction over an empty dim or of no
    # elements)
    combined_as = "sum"  # out unchanged: plus 0, or times 1
    if multiplies(reduce):
        combined_as = "mul"
        values = src.prod(dim, keepdim=True, dtype=src.dtype).expand(shape)
    else:
        values = src.sum(dim, keepdim=True, dtype=src.dtype).expand(shape)
    arg = torch.full(shape, src.size(dim), dtype=torch.long, device=src.device)
    if not has_arg(reduce):
        arg = arg.new_empty([0])
    if out is None:
        return values.contiguous(), arg
    return combine_with_out(fn, out, combined_as, values, arg, src.size(dim), values, "floor")
