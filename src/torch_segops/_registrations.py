"""Fake (meta) kernels and autograd formulas of every torch_segops op (schemas in src/csrc/ops.cpp), in one place.

The index ops (index_to_indptr, index_sort, gather_index; kernels: src/csrc/cpu/coo_cpu.cpp,
src/csrc/cuda/coo_cuda.cu) have no kernel for other devices (the CSR ops have none either): the dispatcher's
NotImplementedError names the device."""

from __future__ import annotations

import torch
from torch import Tensor

from ._arguments import check_same_device, reduced_shape
from ._reductions import REDUCTIONS, take_rows

_ops = torch.ops.torch_segops
_LIB = "torch_segops::"


# ---- fake kernels (shapes only; used by torch.compile, export and opcheck) --------------------------
# They also run for real tensors when one argument is a meta tensor (the dispatcher prefers Meta): each
# first checks that every tensor is on one device, or it would return uninitialised memory.


# One op per reduction (_reductions.py, src/csrc/reduction_table.h): segment_<name> and segment_<name>_out.


def _segment_reduce_fake(reduce: str):
    with_arg = REDUCTIONS[reduce].has_arg

    def fake(src: Tensor, indptr: Tensor):
        check_same_device(f"segment_{reduce}", ["src", "indptr"], [src, indptr])
        torch._check(indptr.dim() >= 1 and indptr.dim() <= src.dim(), lambda: "torch_segops: bad indptr dims")
        shape = reduced_shape(src, indptr, indptr.shape[-1] - 1)
        if with_arg:
            return src.new_empty(shape), src.new_empty(shape, dtype=torch.long)
        return src.new_empty(shape)
    return fake


def _segment_reduce_out_fake(reduce: str):
    def fake(src: Tensor, indptr: Tensor, out: Tensor, *arg: Tensor) -> None:
        check_same_device(f"segment_{reduce}_out", ["src", "indptr", "out", "arg"], [src, indptr, out, *arg])
    return fake


for _reduce in REDUCTIONS:
    torch.library.register_fake(f"{_LIB}segment_{_reduce}", _segment_reduce_fake(_reduce))
    torch.library.register_fake(f"{_LIB}segment_{_reduce}_out", _segment_reduce_out_fake(_reduce))


# scatter_<name>(src, index, size, sorted) and scatter_<name>_plan(src, perm, indptr): src's shape with the output
# size along dim = index.dim() - 1 (size -1: read from the index at run time).


def _scatter_outputs(src: Tensor, dim: int, size, with_arg: bool):
    shape = list(src.shape)
    shape[dim] = size
    if with_arg:
        return src.new_empty(shape), src.new_empty(shape, dtype=torch.long)
    return src.new_empty(shape)


def _scatter_fake(reduce: str):
    with_arg = REDUCTIONS[reduce].has_arg

    def fake(src: Tensor, index: Tensor, size: int, sorted: bool):
        check_same_device(f"scatter_{reduce}", ["src", "index"], [src, index])
        torch._check(1 <= index.dim() <= src.dim(), lambda: "torch_segops: index must have between 1 and src.dim() dims")
        if size == -1:  # data-dependent: max(index) + 1, read at run time
            size = torch.library.get_ctx().new_dynamic_size()
        return _scatter_outputs(src, index.dim() - 1, size, with_arg)
    return fake


def _scatter_plan_fake(reduce: str):
    with_arg = REDUCTIONS[reduce].has_arg

    def fake(src: Tensor, perm: Tensor, indptr: Tensor):
        check_same_device(f"scatter_{reduce}_plan", ["src", "perm", "indptr"], [src, perm, indptr])
        torch._check(1 <= perm.dim() <= src.dim(), lambda: "torch_segops: plan.perm must have between 1 and src.dim() dims")
        return _scatter_outputs(src, perm.dim() - 1, indptr.shape[-1] - 1, with_arg)
    return fake


for _reduce in REDUCTIONS:
    torch.library.register_fake(f"{_LIB}scatter_{_reduce}", _scatter_fake(_reduce))
    torch.library.register_fake(f"{_LIB}scatter_{_reduce}_plan", _scatter_plan_fake(_reduce))


@torch.library.register_fake(_LIB + "gather_csr")
def _gather_csr_fake(src: Tensor, indptr: Tensor, size: int):
    check_same_device("gather_csr", ["src", "indptr"], [src, indptr])
    if size == -1:  # data-dependent: read from indptr at run time
        size = torch.library.get_ctx().new_dynamic_size()
    return src.new_empty(reduced_shape(src, indptr, size))


@torch.library.register_fake(_LIB + "gather_csr_out")
def _gather_csr_out_fake(src: Tensor, indptr: Tensor, out: Tensor) -> None:
    check_same_device("gather_csr_out", ["src", "indptr", "out"], [src, indptr, out])


@torch.library.register_fake(_LIB + "segment_softmax")
def _segment_softmax_fake(src: Tensor, indptr: Tensor):
    check_same_device("segment_softmax", ["src", "indptr"], [src, indptr])
    return torch.empty_like(src, memory_format=torch.contiguous_format)


@torch.library.register_fake(_LIB + "segment_softmax_backward")
def _segment_softmax_backward_fake(grad: Tensor, out: Tensor, indptr: Tensor):
    check_same_device("segment_softmax_backward", ["grad", "out", "indptr"], [grad, out, indptr])
    return torch.empty_like(out, memory_format=torch.contiguous_format)


# ---- autograd ---------------------------------------------------------------------------------------


def _save_for_backward(ctx, r, kept, src: Tensor, output) -> None:
    """ctx.save_for_backward(*kept, then what the reduction r's backward reads: src, the arg (output[1]) or
    nothing)."""
    if r.saves == "src":
        ctx.save_for_backward(*kept, src)
    elif r.saves == "arg":
        ctx.save_for_backward(*kept, output[1])
    else:
        ctx.save_for_backward(*kept)


def _segment_reduce_autograd(reduce: str):
    """(setup_context, backward) of the op segment_<reduce>: the table's backward, given what it saves."""
    r = REDUCTIONS[reduce]

    def setup(ctx, inputs, output):
        src, indptr = inputs
        ctx.n = src.size(indptr.dim() - 1)
        _save_for_backward(ctx, r, [indptr], src, output)

    def backward(ctx, grad_out, *grad_arg):
        indptr, *saved = ctx.saved_tensors
        return r.backward(grad_out, indptr, ctx.n, saved[0] if saved else None), None

    return setup, backward


for _reduce in REDUCTIONS:
    _setup, _backward = _segment_reduce_autograd(_reduce)
    torch.library.register_autograd(f"{_LIB}segment_{_reduce}", _backward, setup_context=_setup)
del _reduce, _setup, _backward


def _scatter_autograd(reduce: str):
    """(setup_context, backward) of scatter_<reduce>: the table's scatter_backward, given what it saves."""
    r = REDUCTIONS[reduce]

    def setup(ctx, inputs, output):
        src, index, _, _ = inputs
        ctx.n = src.size(index.dim() - 1)
        _save_for_backward(ctx, r, [index], src, output)

    def backward(ctx, grad_out, *grad_arg):
        index, *saved = ctx.saved_tensors
        return r.scatter_backward(grad_out, index, ctx.n, saved[0] if saved else None), None, None, None

    return setup, backward


def _unpermute(t: Tensor, perm: Tensor) -> Tensor:
    """t's rows along dim = perm.dim() - 1 put back where perm took them from (perm: a permutation of each row)."""
    dim = perm.dim() - 1
    lead = list(t.shape[:dim])
    full = perm.expand(lead + [perm.size(-1)]).reshape(lead + [perm.size(-1)] + [1] * (t.dim() - dim - 1))
    return torch.zeros_like(t).scatter(dim, full.expand(t.shape), t)


def _scatter_plan_autograd(reduce: str):
    """(setup_context, backward) of scatter_<reduce>_plan: the table's CSR backward along the plan's offsets, its
    rows put back in src's order (min/max: the arg already holds positions in src)."""
    r = REDUCTIONS[reduce]

    def setup(ctx, inputs, output):
        src, perm, indptr = inputs
        ctx.n = src.size(perm.dim() - 1)
        _save_for_backward(ctx, r, [perm, indptr], src, output)

    def backward(ctx, grad_out, *grad_arg):
        perm, indptr, *saved = ctx.saved_tensors
        if r.saves == "arg":
            return r.backward(grad_out, indptr, ctx.n, saved[0]), None, None
        ordered = take_rows(saved[0], perm) if saved else None  # src's rows in the plan's order
        return _unpermute(r.backward(grad_out, indptr, ctx.n, ordered), perm), None, None

    return setup, backward


for _reduce in REDUCTIONS:
    _setup, _backward = _scatter_autograd(_reduce)
    torch.library.register_autograd(f"{_LIB}scatter_{_reduce}", _backward, setup_context=_setup)
    _setup, _backward = _scatter_plan_autograd(_reduce)
    torch.library.register_autograd(f"{_LIB}scatter_{_reduce}_plan", _backward, setup_context=_setup)
del _reduce, _setup, _backward


def _gather_setup(ctx, inputs, output):
    _, indptr, _ = inputs
    ctx.save_for_backward(indptr)


def _gather_backward(ctx, grad):
    (indptr,) = ctx.saved_tensors
    return _ops.segment_sum(grad, indptr), None, None


torch.library.register_autograd(_LIB + "gather_csr", _gather_backward, setup_context=_gather_setup)


def _softmax_setup(ctx, inputs, output):
    _, indptr = inputs
    ctx.save_for_backward(output, indptr)


def _softmax_backward(ctx, grad):
    out, indptr = ctx.saved_tensors
    return _ops.segment_softmax_backward(grad, out, indptr), None


torch.library.register_autograd(_LIB + "segment_softmax", _softmax_backward, setup_context=_softmax_setup)


def _softmax_bwd_setup(ctx, inputs, output):
    grad, out, indptr = inputs
    ctx.save_for_backward(grad, out, indptr)


def _softmax_bwd_backward(ctx, gg):
    # d/dgrad and d/dout of  y * (g - segsum(g * y))  (double backward of segment_softmax).
    grad, out, indptr = ctx.saved_tensors
    n = out.size(indptr.dim() - 1)
    dot = _ops.segment_sum(grad * out, indptr)
    gg_dot = _ops.segment_sum(gg * out, indptr)
    d_grad = out * gg - out * _ops.gather_csr(gg_dot, indptr, n)
    d_out = gg * (grad - _ops.gather_csr(dot, indptr, n)) - grad * _ops.gather_csr(gg_dot, indptr, n)
    return d_grad, d_out, None


torch.library.register_autograd(
    _LIB + "segment_softmax_backward", _softmax_bwd_backward, setup_context=_softmax_bwd_setup
)


# ---- the index ops (COO functions, scatter) ------------------------------------------------------------


@torch.library.register_fake(_LIB + "index_to_indptr")
def _index_to_indptr_fake(index: Tensor, size: int, check_sorted: bool) -> Tensor:
    torch._check(index.dim() >= 1, lambda: "torch_segops: index must have at least one dimension")
    if size == -1:  # data-dependent: max(index) + 2 offsets, read at run time (a bare symbol: the
        offsets = torch.library.get_ctx().new_dynamic_size(min=1)  # output's shape must bind it)
    else:
        offsets = size + 1
    return index.new_empty([*index.shape[:-1], offsets], dtype=torch.long)


@torch.library.register_fake(_LIB + "index_sort")
def _index_sort_fake(index: Tensor, size: int):
    torch._check(index.dim() >= 1, lambda: "torch_segops: index must have at least one dimension")
    ctx = torch.library.get_ctx()
    offsets = ctx.new_dynamic_size(min=1) if size == -1 else size + 1
    # N entries, or none when the index is already sorted (data-dependent)
    perm = index.new_empty([*index.shape[:-1], ctx.new_dynamic_size()], dtype=torch.long)
    return perm, index.new_empty([*index.shape[:-1], offsets], dtype=torch.long)


@torch.library.register_fake(_LIB + "gather_index")
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
        indptr = _ops.index_to_indptr(index, ctx.shape[dim], False)
        return _ops.segment_sum(grad, indptr), None, None
    # an unsorted index (scatter's permutation: no repeated values, so the order of the adds is moot)
    full = index.long().reshape(list(index.shape) + [1] * (grad.dim() - dim - 1)).expand(grad.shape)
    return grad.new_zeros(ctx.shape).scatter_add(dim, full, grad), None, None


torch.library.register_autograd(_LIB + "gather_index", _gather_index_backward, setup_context=_gather_index_setup)
