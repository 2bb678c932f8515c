"""Every check of the public functions' arguments, each in one place and one wording: types (eager), sizes and
``dim`` given as any Python or numpy integer, dtype names that read the same in TorchScript, tensors on one
device, shapes of ``indptr``, ``index`` and ``out``, and the user's index values (scatter reports positions in
the index it was given, not in its sorted copy).

``check_type``, ``check_tensor_types``, ``size_arg``, ``dim_arg`` and ``scatter_arg_types`` are eager only
(TorchScript checks types itself); the others compile with ``torch.jit.script``.
"""

from __future__ import annotations

import operator
from typing import List, Optional, Tuple

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


def reduced_shape(src: Tensor, indptr: Tensor, n: int) -> List[int]:
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


def check_type(fn: str, name: str, value) -> None:
    """Eager only: a clear TypeError for a non-tensor argument (TorchScript checks types itself)."""
    if not isinstance(value, Tensor):
        raise TypeError(f"torch_segops.{fn}: {name} must be a torch.Tensor, got {type(value).__name__}")


def check_tensor_types(fn: str, src, index, out) -> None:
    """Eager only: src, index and (when given) out are tensors."""
    check_type(fn, "src", src)
    check_type(fn, "index", index)
    if out is not None:
        check_type(fn, "out", out)


def check_size(fn: str, name: str, size: Optional[int]) -> None:
    """An output size given by the caller (dim_size, size) is not negative."""
    if size is not None and size < 0:
        raise ValueError(f"torch_segops.{fn}: {name} must be a non-negative int, got {size}")


def check_has_dims(fn: str, name: str, t: Tensor) -> None:
    if t.dim() == 0:
        raise ValueError(f"torch_segops.{fn}: {name} must have at least one dimension, got a 0-dim tensor")


def check_csr_tensors(fn: str, src: Tensor, indptr: Tensor) -> None:
    """src and indptr of the CSR functions: tensors on one device, indptr with 1 to src.dim() dims."""
    if not torch.jit.is_scripting():
        check_type(fn, "src", src)
        check_type(fn, "indptr", indptr)
    check_same_device(fn, ["src", "indptr"], [src, indptr])
    check_has_dims(fn, "indptr", indptr)
    if indptr.dim() > src.dim():
        raise ValueError(
            f"torch_segops.{fn}: indptr has {indptr.dim()} dims but src only {src.dim()}; "
            "the reduction runs along dim indptr.dim() - 1 of src"
        )


def check_out(fn: str, out: Tensor, dtype: torch.dtype, device: torch.device, shape: Optional[List[int]],
              name: str = "out") -> None:
    """``out`` (or the tensor named ``name``) has this dtype, device and (when given) shape."""
    if not torch.jit.is_scripting():
        if not isinstance(out, Tensor):
            raise TypeError(f"torch_segops.{fn}: {name} must be a torch.Tensor or None, got {type(out).__name__}")
    if out.dtype != dtype:
        raise TypeError(f"torch_segops.{fn}: {name} has dtype {dtype_name(out.dtype)}, expected {dtype_name(dtype)}")
    if out.device != device:
        raise ValueError(f"torch_segops.{fn}: {name} is on {out.device}, expected {device}")
    if shape is not None and list(out.shape) != shape:
        raise ValueError(f"torch_segops.{fn}: {name} has shape {list(out.shape)}, expected {shape}")


def rows_of_out(fn: str, out: Tensor, src: Tensor, dim: int, size_name: str, size: Optional[int]) -> int:
    """out.size(dim), the output's rows along dim, once out has src's dims and agrees with a size also given."""
    if out.dim() != src.dim():
        raise ValueError(f"torch_segops.{fn}: out has {out.dim()} dims, expected src.dim() = {src.dim()}")
    n = out.size(dim)
    if size is not None and size != n:
        raise ValueError(f"torch_segops.{fn}: {size_name}={size} disagrees with out.size(dim)={n}")
    return n


def output_size(fn: str, src: Tensor, dim: int, out: Optional[Tensor], size_name: str, size: Optional[int]) -> int:
    """Rows of the output along dim: out.size(dim), else the size given, else -1 (read from the index or indptr)."""
    if out is not None:
        return rows_of_out(fn, out, src, dim, size_name, size)
    check_size(fn, size_name, size)
    return -1 if size is None else size


def check_index_args(fn: str, src: Tensor, index: Tensor, out: Optional[Tensor], with_dim: bool) -> int:
    """The COO functions' reduced dim (index.dim() - 1) after checking src, index and out: tensors (eager), src and
    index on one device, index's dims against src's: 1 to src.dim() dims, each leading dim (and dim itself when
    with_dim) equal to src's or 1 (broadcast)."""
    if not torch.jit.is_scripting():
        check_tensor_types(fn, src, index, out)
    check_same_device(fn, ["src", "index"], [src, index])
    if index.dim() == 0 or index.dim() > src.dim():
        raise ValueError(f"torch_segops.{fn}: index must have between 1 and src.dim() = {src.dim()} dims, "
                         f"got {index.dim()}")
    dim = index.dim() - 1
    for d in range(dim + 1 if with_dim else dim):
        if index.size(d) != 1 and index.size(d) != src.size(d):
            raise ValueError(f"torch_segops.{fn}: index.size({d}) = {index.size(d)} does not match "
                             f"src.size({d}) = {src.size(d)} (must be equal or 1 to broadcast)")
    return dim


def scatter_arg_types(fn: str, src, index, dim, out, dim_size) -> Tuple[int, Optional[int]]:
    """Eager only (TorchScript types the arguments itself): tensors are tensors, dim and dim_size integers
    (numpy's too); returns (dim, dim_size) as Python ints."""
    check_tensor_types(fn, src, index, out)
    return dim_arg(fn, dim), size_arg(fn, "dim_size", dim_size)


def scatter_dim_and_size(fn: str, src: Tensor, index: Tensor, dim: int, out: Optional[Tensor],
                         dim_size: Optional[int]) -> Tuple[int, int]:
    """dim in [0, src.dim()) and the output size along it: out.size(dim), else dim_size, else -1 (read from the
    index), with the shape checks of every scatter function."""
    if src.dim() == 0:
        raise ValueError(f"torch_segops.{fn}: src must have at least one dimension")
    if dim < -src.dim() or dim >= src.dim():
        raise ValueError(f"torch_segops.{fn}: dim {dim} is out of range for src with {src.dim()} dims")
    if dim < 0:
        dim += src.dim()
    check_has_dims(fn, "index", index)
    return dim, output_size(fn, src, dim, out, "dim_size", dim_size)


def scatter_index_shape(fn: str, index: Tensor, src: Tensor, dim: int) -> List[int]:
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
