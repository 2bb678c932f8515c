"""The fake kernels of ``torch_segops::index_to_indptr``, ``index_sort`` and ``gather_index`` (schemas in
src/csrc/ops.cpp; kernels: src/csrc/cpu/coo_cpu.cpp, src/csrc/cuda/coo_cuda.cu), gather_index's autograd, and
``index_offsets``, through which the COO functions and ``scatter`` call index_to_indptr (their public wrappers name
the errors: _errors.py). There is no kernel for other devices (the CSR ops have none either): the dispatcher's
NotImplementedError names the device."""

from __future__ import annotations

import torch
from torch import Tensor

from ._arguments import check_same_device

_LIB = "torch_segops::index_to_indptr"
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
    check_same_device("gather_index", ["src", "index"], [src, index])
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
    full = index.long().reshape(list(index.shape) + [1] * (grad.dim() - dim - 1)).expand(grad.shape)
    return grad.new_zeros(ctx.shape).scatter_add(dim, full, grad), None, None


torch.library.register_autograd("torch_segops::gather_index", _gather_index_backward, setup_context=_gather_index_setup)


def index_offsets(index: Tensor, size: int, check_sorted: bool) -> Tensor:
    """``torch.ops.torch_segops.index_to_indptr``, its arguments checked first in eager (TorchScript: by the op)."""
    if not torch.jit.is_scripting():
        _check_arguments(index, size)
    return torch.ops.torch_segops.index_to_indptr(index, size, check_sorted)


def _check_arguments(index: Tensor, size: int) -> None:
    if index.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"torch_segops: index must be int64 or int32, got {index.dtype}")
    if index.dim() == 0:
        raise ValueError("torch_segops: index must have at least one dimension, got a 0-dim tensor")
    if size < -1:
        raise ValueError(f"torch_segops: dim_size must be non-negative, got {size}")
