"""Checks of the public functions' arguments that several modules share: sizes and ``dim`` given as
any Python or numpy integer, dtype names that read the same in TorchScript, tensors on one device,
and the user's index values (scatter reports positions in the index it was given, not in its sorted copy).

``size_arg`` and ``dim_arg`` are eager only (TorchScript checks ``Optional[int]`` and ``int`` itself);
the others compile with ``torch.jit.script``.
"""

from __future__ import annotations

import operator
from typing import List, Optional

import torch
from torch import Tensor


def _integer(fn: str, name: str, value, what: str) -> int:
    # bool is an int to Python, but dim_size=True is a mistake, not the size 1
    if isinstance(value, bool):
        raise TypeError(f"torch_segops.{fn}: {name} must be {what}, got the bool {value!r}")
    try:
        return operator.index(value)  # int, numpy integers, anything else that is an integer
    except TypeError:
        raise TypeError(f"torch_segops.{fn}: {name} must be {what}, got {value!r} "
                        f"of type {type(value).__name__}") from None


def size_arg(fn: str, name: str, value) -> Optional[int]:
    """Eager only: ``None``, a SymInt (torch.compile), or an integer (numpy's too) as a Python int."""
    if value is None or isinstance(value, torch.SymInt):
        return value
    size = _integer(fn, name, value, "a non-negative int or None")
    if size >= 2**63:  # the ops take int64 (a larger int reached them as "Expected a value of type 'int'")
        raise ValueError(f"torch_segops.{fn}: {name} must be < 2**63, got {size}")
    return size


def dim_arg(fn: str, value) -> int:
    """Eager only: ``dim`` as a Python int (numpy integers accepted; floats, None and bools refused)."""
    if isinstance(value, torch.SymInt):
        return value
    return _integer(fn, "dim", value, "an int")


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` and so on, also under TorchScript (where ``str(dtype)`` gives a number)."""
    if not torch.jit.is_scripting():
        return str(dtype)
    names = ["torch.float16", "torch.bfloat16", "torch.float32", "torch.float64", "torch.complex64",
             "torch.complex128", "torch.uint8", "torch.int8", "torch.int16", "torch.int32", "torch.int64",
             "torch.bool"]
    dtypes = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
              torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool]
    for i in range(len(dtypes)):
        if dtype == dtypes[i]:
            return names[i]
    return "another dtype"


def _reduced_shape(src: Tensor, indptr: Tensor, n: int) -> List[int]:
    """src's shape with n rows along the reduced dim (indptr.dim() - 1)."""
    shape: List[int] = list(src.shape)
    shape[indptr.dim() - 1] = n
    return shape


def check_same_device(fn: str, names: List[str], tensors: List[Tensor]) -> None:
    """Every tensor on the device of the first: a meta tensor among CPU tensors would otherwise send the
    call to the shape-only (fake) kernels, which return uninitialised memory."""
    first = tensors[0].device
    for i in range(1, len(tensors)):
        if tensors[i].device != first:
            raise RuntimeError(f"torch_segops.{fn}: {names[i]} is on {tensors[i].device} but {names[0]} is on "
                               f"{first}: every tensor argument must be on the same device")


def check_index_dtype(fn: str, index: Tensor) -> None:
    if index.dtype != torch.int64 and index.dtype != torch.int32:
        raise TypeError(f"torch_segops.{fn}: index must be int64 or int32, got {dtype_name(index.dtype)}")


def _position(shape: List[int], flat: int) -> str:
    """``[i, j, k]`` of the element at row-major position ``flat`` of a tensor of this shape."""
    coords: List[str] = []
    for d in range(len(shape) - 1, -1, -1):
        coords.insert(0, str(flat % shape[d]))
        flat = flat // shape[d]
    return "[" + ", ".join(coords) + "]"


def check_index_values(fn: str, index: Tensor, size: int) -> None:
    """``0 <= index < size`` (no upper bound when ``size`` is -1), reported at the position of the first
    bad value in the index as given. Reads the values: skipped on CUDA (no host synchronisation; the
    CSR op reports a bad row there), for meta tensors and while torch.compile traces (the traced op
    checks the values it gets)."""
    if not torch.jit.is_scripting():
        if torch.compiler.is_compiling():
            return
    if index.numel() == 0 or index.device.type == "cuda" or index.device.type == "meta":
        return
    bad = index < 0
    if size >= 0:
        bad = bad | (index.long() >= size)  # as int64: a size past int32 must not wrap
    if bool(bad.any()):
        flat = int(bad.reshape(-1).to(torch.uint8).argmax())  # the first bad position
        value = int(index.reshape(-1)[flat])
        where = "index" + _position(index.shape, flat)
        if value < 0:
            raise ValueError(f"torch_segops.{fn}: index must be non-negative, got {where} = {value}")
        raise ValueError(f"torch_segops.{fn}: index must be < dim_size = {size}, got {where} = {value}")
