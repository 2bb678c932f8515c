"""The public functions over CSR offsets (segment_csr, segment_<reduction>_csr, segment_softmax_csr, gather_csr):
pytorch_scatter-compatible signatures over torch.ops.torch_segops.

Shapes follow pytorch_scatter: the reduction runs along ``dim = indptr.dim() - 1`` of ``src``,
leading dims of ``indptr`` broadcast against ``src`` and trailing dims of ``src`` are features.
Offsets are validated by the kernels (clear RuntimeError naming ``indptr``); these wrappers check
what only Python sees (argument types, ``reduce``, ``out``: _arguments.py) and call the core (_segment.py).

Every public function here can be compiled with ``torch.jit.script`` (pytorch_scatter's are, and
models that script them exist): code that TorchScript cannot compile (type checks of arbitrary
Python objects, the in-place ``out=`` fast path) sits under ``if not torch.jit.is_scripting():``,
which the scripting compiler skips; scripted calls take the functional path and give the same values.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from ._arguments import check_csr_tensors, check_out, check_type, output_size, reduced_shape, size_arg
from ._reductions import reduction_of
from ._segment import in_place, nonempty_indptr, reduce_segments, write_out

_ops = torch.ops.torch_segops


def segment_sum_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Sum of each segment ``src[..., indptr[i]:indptr[i+1], ...]``; empty segments give 0."""
    return reduce_segments("segment_sum_csr", src, indptr, "sum", out)[0]


segment_add_csr = segment_sum_csr


def segment_mean_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Mean of each segment; empty segments give 0. Integer src: the integer sum divided by the length
    with truncation toward zero (pytorch_scatter's C++ integer division)."""
    return reduce_segments("segment_mean_csr", src, indptr, "mean", out)[0]


def segment_min_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """(min, argmin) per segment. argmin holds absolute positions along dim; ties take the first;
    empty segments give value 0 and argmin ``src.size(dim)``."""
    return reduce_segments("segment_min_csr", src, indptr, "min", out)


def segment_max_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """(max, argmax) per segment; see :func:`segment_min_csr`."""
    return reduce_segments("segment_max_csr", src, indptr, "max", out)


def segment_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None, reduce: str = "sum") -> Tensor:
    """pytorch_scatter's ``segment_csr``: reduce each CSR segment with sum/add/mean/min/max; also mul
    (not in pytorch_scatter's segment_csr): the product, 1 for an empty segment (the empty product, what
    pytorch_scatter's scatter_mul leaves where nothing is scattered); integer products wrap on overflow."""
    return reduce_segments("segment_csr", src, indptr, reduction_of("segment_csr", reduce), out)[0]


def gather_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None, size: Optional[int] = None) -> Tensor:
    """Repeat segment row ``src[..., i, ...]`` over output rows ``[indptr[i], indptr[i+1])``.

    The output has ``size`` rows along dim: ``out.size(dim)`` when ``out`` is given, else ``size``, else
    ``max(indptr[..., -1])``, read from indptr (a host synchronisation on the GPU: pass ``size`` or
    ``out`` to avoid it). Rows outside ``[indptr[0], indptr[-1])`` are 0.
    """
    fn = "gather_csr"
    check_csr_tensors(fn, src, indptr)
    indptr = nonempty_indptr(indptr)
    if not torch.jit.is_scripting():
        if out is not None:
            check_type(fn, "out", out)
        size = size_arg(fn, "size", size)
    rows = output_size(fn, src, indptr.dim() - 1, out, "size", size)
    if not torch.jit.is_scripting():
        if out is not None and in_place(out, src, indptr):
            check_out(fn, out, src.dtype, src.device, reduced_shape(src, indptr, rows))
            _ops.gather_csr_out(src, indptr, out)
            return out
    return write_out(fn, out, _ops.gather_csr(src, indptr, rows))


def segment_softmax_csr(src: Tensor, indptr: Tensor) -> Tensor:
    """Softmax within each segment (same shape as src); rows outside ``[indptr[0], indptr[-1])`` give 0."""
    check_csr_tensors("segment_softmax_csr", src, indptr)
    return _ops.segment_softmax(src, nonempty_indptr(indptr))


def segment_logsumexp_csr(src: Tensor, indptr: Tensor) -> Tensor:
    """log(sum(exp(x))) of each segment, computed stably in one pass; empty segments give 0."""
    return reduce_segments("segment_logsumexp_csr", src, indptr, "logsumexp")[0]
