"""pytorch_scatter's COO segment functions: ``segment_coo``, ``segment_{sum,add,mean,min,max}_coo`` and
``gather_coo``.

``index`` holds the output segment of every row of ``src`` along ``dim = index.dim() - 1`` and is
sorted along that dim; its leading dims broadcast against ``src`` (size 1 or equal), and a size-1 last
dim broadcasts over ``src.size(dim)``. The reductions are the scatter ops with ``sorted=True``
(``torch.ops.torch_segops.scatter_<name>``: one pass over index and src that validates the index and
reduces, with no CSR offsets, so no memory in proportion to the output size beyond the output; the
results are bitwise those of the CSR ops on the offsets of the index); on devices where these ops have
no kernel (CUDA), ``index_to_indptr``'s offsets and the CSR ops (_segment.py's CSR route). ``gather_coo`` on the CPU is one
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

from ._arguments import (check_index_args, check_index_dtype, check_out, check_type, output_size, reduced_shape,
                         size_arg)
from ._reductions import reduction_of
from ._segment import index_offsets, reduce_by_index, write_out

_ops = torch.ops.torch_segops


def _coo_rows(fn: str, src: Tensor, index: Tensor) -> Tensor:
    """A sorted COO index with one entry per row of src along dim (leading dims broadcast as in pytorch_scatter)."""
    dim = check_index_args(fn, src, index, None, True)
    check_index_dtype(fn, index)
    if index.size(dim) != src.size(dim):  # one index for every row along dim
        shape: List[int] = list(index.shape)
        shape[dim] = src.size(dim)
        index = index.expand(shape)
    return index


def _segment_coo(fn: str, src: Tensor, index: Tensor, out: Optional[Tensor], dim_size: Optional[int],
                 reduce: str) -> Tuple[Tensor, Tensor]:
    if not torch.jit.is_scripting():
        dim_size = size_arg(fn, "dim_size", dim_size)
        if out is not None:
            check_type(fn, "out", out)
    size = output_size(fn, src, index.dim() - 1, out, "dim_size", dim_size)
    return reduce_by_index(fn, src, _coo_rows(fn, src, index), size, out, reduce, "trunc", True, None)


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
    return src.device.type == "cpu"


def gather_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Row ``e`` of the output along dim is ``src``'s row ``index[e]`` (index sorted along its last
    dim); ``out``, when given, is overwritten. The gradient is a segment sum (deterministic)."""
    fn = "gather_coo"
    dim = check_index_args(fn, src, index, out, False)
    check_index_dtype(fn, index)
    if _one_pass_gather(src, index):
        result = _ops.gather_index(src, index.expand(list(src.shape[:dim]) + [index.size(dim)]), True)
    else:
        result = _ops.gather_csr(src, index_offsets(index, src.size(dim), True), index.size(dim))
    if out is not None:
        check_out(fn, out, src.dtype, src.device, reduced_shape(src, index, index.size(dim)))
    return write_out(fn, out, result)
