"""The fake kernels of ``torch_segops::index_to_indptr`` and ``index_sort`` (schemas in src/csrc/ops.cpp),
and index_to_indptr's fallback for devices without a native kernel: a sorted COO ``index`` to CSR
offsets with device-generic ATen ops (searchsorted). The CPU and CUDA kernels are native (one pass over
the index: src/csrc/cpu/coo_cpu.cpp, src/csrc/cuda/coo_cuda.cu) and take precedence over the fallback.
Used by the COO functions and by ``scatter``, through ``index_offsets``, whose errors name the public
function (eager): the native CPU kernel's value errors arrive as RuntimeError "torch_segops: index must
..." and are raised as the ValueError the Python checks raised."""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor

_LIB = "torch_segops::index_to_indptr"
_PREFIX = "torch_segops: "
_INT32_MAX = 2**31 - 1


def _first_bad(index: Tensor, size: int, check_sorted: bool) -> str:
    """A readable description of the first problem in index (CPU; "" when there is none)."""
    flat = index.reshape(-1, index.size(-1))
    if check_sorted and flat.size(1) > 1:
        down = (flat[:, 1:] < flat[:, :-1]).nonzero()
        if down.numel():
            r, c = down[0].tolist()
            return (f"index must be sorted (non-decreasing) along its last dim, got index[..., {c + 1}] = "
                    f"{int(flat[r, c + 1])} < index[..., {c}] = {int(flat[r, c])} (in row {r} of the flattened "
                    "leading dims); use scatter() for an unsorted index")
    low = (flat < 0).nonzero()
    if low.numel():
        r, c = low[0].tolist()
        return f"index must be non-negative, got index[..., {c}] = {int(flat[r, c])} (row {r})"
    high = (flat >= size).nonzero()
    if high.numel():
        r, c = high[0].tolist()
        return f"index must be < dim_size = {size}, got index[..., {c}] = {int(flat[r, c])} (row {r})"
    return ""


@torch.library.impl(_LIB, "CompositeExplicitAutograd")
def _index_to_indptr(index: Tensor, size: int, check_sorted: bool) -> Tensor:
    _check_arguments(index, size)
    index = index.contiguous()
    lead, n = list(index.shape[:-1]), index.size(-1)
    if size == -1:  # read max(index) + 1 (pytorch_scatter's default output size)
        size = int(index.max()) + 1 if index.numel() else 0
    if index.dtype == torch.int32 and size >= _INT32_MAX:
        index = index.long()  # the checks and the offsets count up to size, past int32
    if index.device.type != "cuda":  # synchronous check; a CUDA check would stall the host
        problem = _first_bad(index, size, check_sorted) if index.numel() else ""
        if problem:
            raise ValueError("torch_segops: " + problem)
    try:
        bounds = torch.arange(size + 1, dtype=index.dtype, device=index.device).expand(lead + [size + 1]).contiguous()
        indptr = torch.searchsorted(index, bounds)
    except RuntimeError as e:
        rows = index.numel() // n if n else 1
        raise type(e)(
            f"{_PREFIX}allocating the CSR offsets of index for dim_size = {size} (shape ({rows}, {size + 1}), "
            f"int64, {rows * (size + 1) * 8} bytes, on {index.device}) failed: {e}"
        ) from e
    if index.device.type == "cuda" and n > 0:
        bad = (index[..., 0] < 0) | (index[..., -1] >= size)
        if check_sorted and n > 1:
            bad |= (index[..., 1:] < index[..., :-1]).any(-1)
        # an invalid first offset: the CSR op that reads this indptr reports it (see ops.cpp)
        indptr[..., 0] = torch.where(bad, -1, indptr[..., 0])
    return indptr


@torch.library.register_fake(_LIB)
def _index_to_indptr_fake(index: Tensor, size: int, check_sorted: bool) -> Tensor:
    torch._check(index.dim() >= 1, lambda: "torch_segops: index must have at least one dimension")
    if size == -1:  # data-dependent: max(index) + 2 offsets, read at run time (a bare symbol: the
        offsets = torch.library.get_ctx().new_dynamic_size(min=1)  # output's shape must bind it)
    else:
        offsets = size + 1
    return index.new_empty([*index.shape[:-1], offsets], dtype=torch.long)


@torch.library.register_fake("torch_segops::index_sort")
def _index_sort_fake(index: Tensor, size: int):
    torch._check(index.dim() >= 1, lambda: "torch_segops: index must have at least one dimension")
    ctx = torch.library.get_ctx()
    offsets = ctx.new_dynamic_size(min=1) if size == -1 else size + 1
    # N entries, or none when the index is already sorted (data-dependent)
    perm = index.new_empty([*index.shape[:-1], ctx.new_dynamic_size()], dtype=torch.long)
    return perm, index.new_empty([*index.shape[:-1], offsets], dtype=torch.long)


@torch.library.register_fake("torch_segops::gather_index")
def _gather_index_fake(src: Tensor, index: Tensor, check_sorted: bool):
    torch._check(1 <= index.dim() <= src.dim(), lambda: "torch_segops: index must have between 1 and src.dim() dims")
    shape = list(src.shape)
    shape[index.dim() - 1] = index.shape[-1]
    return src.new_empty(shape)


def _gather_index_setup(ctx, inputs, output) -> None:
    src, index, check_sorted = inputs
    ctx.save_for_backward(index)
    ctx.shape = list(src.shape)
    ctx.sorted = check_sorted


def _gather_index_backward(ctx, grad):
    (index,) = ctx.saved_tensors
    dim = index.dim() - 1
    if ctx.sorted:  # a segment sum over the offsets of the (validated, sorted) index: deterministic
        indptr = torch.ops.torch_segops.index_to_indptr(index, ctx.shape[dim], False)
        return torch.ops.torch_segops.segment_sum(grad, indptr), None, None
    # an unsorted index (scatter's permutation: no repeated values, so the order of the adds is moot)
    full = index.reshape(list(index.shape) + [1] * (grad.dim() - dim - 1)).expand(grad.shape)
    return grad.new_zeros(ctx.shape).scatter_add(dim, full, grad), None, None


torch.library.register_autograd("torch_segops::gather_index", _gather_index_backward, setup_context=_gather_index_setup)


def index_offsets(fn: str, index: Tensor, size: int, check_sorted: bool) -> Tensor:
    """``torch.ops.torch_segops.index_to_indptr`` called by the public function ``fn``: in eager its errors
    name ``fn`` ("torch_segops.segment_coo: index must be ..."); scripted code calls the op itself."""
    if not torch.jit.is_scripting():
        return _offsets_naming(fn, index, size, check_sorted)
    return torch.ops.torch_segops.index_to_indptr(index, size, check_sorted)


def _check_arguments(index: Tensor, size: int) -> None:
    if index.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"torch_segops: index must be int64 or int32, got {index.dtype}")
    if index.dim() == 0:
        raise ValueError("torch_segops: index must have at least one dimension, got a 0-dim tensor")
    if size < -1:
        raise ValueError(f"torch_segops: dim_size must be non-negative, got {size}")


def naming(fn: str, e: Exception) -> Exception:
    """An error of an index op (message "torch_segops: ...") as the public function ``fn`` raises it, or
    ``e`` itself: a value problem the native kernel reports (a RuntimeError) becomes a ValueError."""
    message = str(e)
    if not message.startswith(_PREFIX):
        return e
    kind = type(e)
    if kind is RuntimeError and message.startswith(_PREFIX + "index must"):
        kind = ValueError
    return kind(f"torch_segops.{fn}: {message[len(_PREFIX):]}")


@contextlib.contextmanager
def naming_errors(fn: str, kinds):
    """Eager only: an error of one of these kinds that the kernels raised leaves as naming(fn, e) (from e); any
    other goes on unchanged."""
    try:
        yield
    except kinds as e:
        named = naming(fn, e)
        if named is e:
            raise
        raise named from e


def _offsets_naming(fn: str, index: Tensor, size: int, check_sorted: bool) -> Tensor:
    # eager only: TorchScript compiles no try statement
    with naming_errors(fn, (TypeError, ValueError, RuntimeError)):
        _check_arguments(index, size)
        return torch.ops.torch_segops.index_to_indptr(index, size, check_sorted)
