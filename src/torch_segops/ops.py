"""Public wrappers: pytorch_scatter-compatible signatures over torch.ops.torch_segops.

Shapes follow pytorch_scatter: the reduction runs along ``dim = indptr.dim() - 1`` of ``src``,
leading dims of ``indptr`` broadcast against ``src`` and trailing dims of ``src`` are features.
Offsets are validated by the kernels (clear RuntimeError naming ``indptr``); these wrappers check
what only Python sees (argument types, ``reduce``, ``out``).

Every public function here can be compiled with ``torch.jit.script`` (pytorch_scatter's are, and
models that script them exist): code that TorchScript cannot compile (type checks of arbitrary
Python objects, the in-place ``out=`` fast path) sits under ``if not torch.jit.is_scripting():``,
which the scripting compiler skips; scripted calls take the functional path and give the same values.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ._arguments import _reduced_shape, check_same_device, dtype_name, size_arg
from ._reductions import no_arg, reduction_of, run, run_out, sum_then_divide, sums_integers_then_divides

_ops = torch.ops.torch_segops


def _check_type(fn: str, name: str, value) -> None:
    """Eager only: a clear TypeError for a non-tensor argument (TorchScript checks types itself)."""
    if not isinstance(value, Tensor):
        raise TypeError(f"torch_segops.{fn}: {name} must be a torch.Tensor, got {type(value).__name__}")


def _check_index_types(fn: str, src, index, out) -> None:
    """Eager only: src, index and (when given) out are tensors."""
    _check_type(fn, "src", src)
    _check_type(fn, "index", index)
    if out is not None:
        _check_type(fn, "out", out)


def _rows_of_out(fn: str, out: Tensor, src: Tensor, dim: int, size_name: str, size: Optional[int]) -> int:
    """out.size(dim), the output's rows along dim, once out has src's dims and agrees with a size also given."""
    if out.dim() != src.dim():
        raise ValueError(f"torch_segops.{fn}: out has {out.dim()} dims, expected src.dim() = {src.dim()}")
    n = out.size(dim)
    if size is not None and size != n:
        raise ValueError(f"torch_segops.{fn}: {size_name}={size} disagrees with out.size(dim)={n}")
    return n


def _check_tensors(fn: str, src: Tensor, indptr: Tensor) -> None:
    if not torch.jit.is_scripting():
        _check_type(fn, "src", src)
        _check_type(fn, "indptr", indptr)
    check_same_device(fn, ["src", "indptr"], [src, indptr])
    if indptr.dim() == 0:
        raise ValueError(f"torch_segops.{fn}: indptr must have at least one dimension, got a 0-dim tensor")
    if indptr.dim() > src.dim():
        raise ValueError(
            f"torch_segops.{fn}: indptr has {indptr.dim()} dims but src only {src.dim()}; "
            "the reduction runs along dim indptr.dim() - 1 of src"
        )


def _nonempty_indptr(indptr: Tensor) -> Tensor:
    """An indptr with an empty last dim means zero segments (as in pytorch_scatter): the same as a
    single offset. The kernels want at least one offset, so give them that."""
    if indptr.size(-1) == 0:
        shape: List[int] = list(indptr.shape)
        shape[-1] = 1
        return indptr.new_zeros(shape)
    return indptr


def _check_out(fn: str, out: Tensor, dtype: torch.dtype, device: torch.device, shape: Optional[List[int]],
               name: str = "out") -> None:
    if not torch.jit.is_scripting():
        if not isinstance(out, Tensor):
            raise TypeError(f"torch_segops.{fn}: {name} must be a torch.Tensor or None, got {type(out).__name__}")
    if out.dtype != dtype:
        raise TypeError(f"torch_segops.{fn}: {name} has dtype {dtype_name(out.dtype)}, expected {dtype_name(dtype)}")
    if out.device != device:
        raise ValueError(f"torch_segops.{fn}: {name} is on {out.device}, expected {device}")
    if shape is not None and list(out.shape) != shape:
        raise ValueError(f"torch_segops.{fn}: {name} has shape {list(out.shape)}, expected {shape}")


def _write_out(fn: str, out: Optional[Tensor], result: Tensor, name: str = "out") -> Tensor:
    """Overwrite ``out`` in full with ``result`` (never accumulate) and return it."""
    if out is None:
        return result
    _check_out(fn, out, result.dtype, result.device, list(result.shape), name)
    return out.copy_(result)


def _in_place(out, src: Tensor, indptr: Tensor) -> bool:
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


def _reduce(fn: str, src: Tensor, indptr: Tensor, reduce: str, out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """(values, arg) of the reduction named ``reduce`` (_reductions.py); values written into ``out`` when
    given (arg is empty for a reduction without one)."""
    _check_tensors(fn, src, indptr)
    indptr = _nonempty_indptr(indptr)
    integer_mean = sums_integers_then_divides(reduce) and not src.is_floating_point() and not src.is_complex()
    if not torch.jit.is_scripting():
        if out is not None and not integer_mean and _in_place(out, src, indptr):
            shape = _reduced_shape(src, indptr, indptr.size(-1) - 1)
            _check_out(fn, out, src.dtype, src.device, shape)
            return out, run_out(src, indptr, reduce, out)
    if integer_mean:
        values, arg = sum_then_divide(src, indptr, "trunc"), no_arg(src)  # C++ integer division
    else:
        values, arg = run(src, indptr, reduce)
    return _write_out(fn, out, values), arg


def segment_sum_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Sum of each segment ``src[..., indptr[i]:indptr[i+1], ...]``; empty segments give 0."""
    return _reduce("segment_sum_csr", src, indptr, "sum", out)[0]


segment_add_csr = segment_sum_csr


def segment_mean_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Mean of each segment; empty segments give 0. Integer src: the integer sum divided by the length
    with truncation toward zero (pytorch_scatter's C++ integer division)."""
    return _reduce("segment_mean_csr", src, indptr, "mean", out)[0]


def segment_min_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """(min, argmin) per segment. argmin holds absolute positions along dim; ties take the first;
    empty segments give value 0 and argmin ``src.size(dim)``."""
    return _reduce("segment_min_csr", src, indptr, "min", out)


def segment_max_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """(max, argmax) per segment; see :func:`segment_min_csr`."""
    return _reduce("segment_max_csr", src, indptr, "max", out)


def segment_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None, reduce: str = "sum") -> Tensor:
    """pytorch_scatter's ``segment_csr``: reduce each CSR segment with sum/add/mean/min/max; also mul
    (not in pytorch_scatter's segment_csr): the product, 1 for an empty segment (the empty product, what
    pytorch_scatter's scatter_mul leaves where nothing is scattered); integer products wrap on overflow."""
    return _reduce("segment_csr", src, indptr, reduction_of("segment_csr", reduce), out)[0]


def gather_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None, size: Optional[int] = None) -> Tensor:
    """Repeat segment row ``src[..., i, ...]`` over output rows ``[indptr[i], indptr[i+1])``.

    The output has ``size`` rows along dim: ``out.size(dim)`` when ``out`` is given, else ``size``, else
    ``max(indptr[..., -1])``, read from indptr (a host synchronisation on the GPU: pass ``size`` or
    ``out`` to avoid it). Rows outside ``[indptr[0], indptr[-1])`` are 0.
    """
    _check_tensors("gather_csr", src, indptr)
    indptr = _nonempty_indptr(indptr)
    if not torch.jit.is_scripting():
        if out is not None:
            _check_type("gather_csr", "out", out)
        size = size_arg("gather_csr", "size", size)
    if out is not None:
        size = _rows_of_out("gather_csr", out, src, indptr.dim() - 1, "size", size)
    if size is not None and size < 0:
        raise ValueError(f"torch_segops.gather_csr: size must be a non-negative int, got {size}")
    if not torch.jit.is_scripting():
        if out is not None and size is not None and _in_place(out, src, indptr):
            _check_out("gather_csr", out, src.dtype, src.device, _reduced_shape(src, indptr, size))
            _ops.gather_csr_out(src, indptr, out)
            return out
    return _write_out("gather_csr", out, _ops.gather_csr(src, indptr, -1 if size is None else size))


def segment_softmax_csr(src: Tensor, indptr: Tensor) -> Tensor:
    """Softmax within each segment (same shape as src); rows outside ``[indptr[0], indptr[-1])`` give 0."""
    _check_tensors("segment_softmax_csr", src, indptr)
    return _ops.segment_softmax(src, _nonempty_indptr(indptr))


def segment_logsumexp_csr(src: Tensor, indptr: Tensor) -> Tensor:
    """log(sum(exp(x))) of each segment, computed stably in one pass; empty segments give 0."""
    return _reduce("segment_logsumexp_csr", src, indptr, "logsumexp")[0]
