"""What the public functions raise: errors that name the function the user called, in the types torch users catch.

The kernels name their op family ("torch_segops.segment_csr: indptr must ..."), the index ops none
("torch_segops: index must ..."), and a public function may call another; the public wrapper (``public``) raises
every such error of ours as "torch_segops.<the function called>: ...". The C++ side (src/csrc/torch_errors.h)
keeps torch's own message when a torch call inside an op fails, but an exception crossing an extension's
stable-ABI boundary arrives in Python as a plain RuntimeError. torch raises ``torch.OutOfMemoryError`` when the
CUDA caching allocator runs out, and users catch that type (to shrink a batch and retry); the public functions
therefore re-raise a CUDA out-of-memory RuntimeError as ``torch.OutOfMemoryError`` with the same message. On the
CPU torch raises RuntimeError for a failed allocation, and so do we.

torch.jit.script compiles the wrapped function instead of the wrapper (it honours the marks torch's own
``torch.jit._script_if_tracing`` wrappers carry): scripted code raises the kernels' RuntimeError as it is.
torch.compile traces through the wrapper.
"""

from __future__ import annotations

import functools

import torch

CUDA_OOM = "CUDA out of memory"
_PREFIX = "torch_segops"


def naming(fn: str, e: Exception) -> Exception:
    """An error raised under the public function ``fn`` as ``fn`` raises it, or ``e`` itself (an error not of ours:
    torch's, the dispatcher's). Ours start "torch_segops: " (the index ops) or "torch_segops.<name>: " (the kernels
    name their op family, segment_csr; a public function called by another names itself): the message then names
    ``fn``. A value problem the native index kernels report (a RuntimeError "... index must ...") becomes the
    ValueError that the Python checks raise."""
    message = str(e)
    head, sep, rest = message.partition(": ")
    if not sep or not (head == _PREFIX or (head.startswith(_PREFIX + ".") and " " not in head)):
        return e
    kind = type(e)
    if kind is RuntimeError and head == _PREFIX and rest.startswith("index must"):
        kind = ValueError
    return kind(f"{_PREFIX}.{fn}: {rest}")


def public(fn, module: str, name: str):
    """fn as the public function ``<module>.<name>``: its errors name it (naming), and a CUDA out-of-memory error is
    raised as torch.OutOfMemoryError. pickle finds functions by module and name, and the module that defined fn holds
    fn itself, not this wrapper: the wrapper says it is ``module``'s ``name`` (an alias such as segment_add_csr, the
    same fn as segment_sum_csr, is a wrapper of its own, so that its errors and pickle say segment_add_csr)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (TypeError, ValueError, RuntimeError) as e:
            if isinstance(e, RuntimeError) and CUDA_OOM in str(e) and not isinstance(e, torch.OutOfMemoryError):
                raise torch.OutOfMemoryError(str(e)) from e
            named = naming(name, e)
            if named is e:
                raise
            raise named from e

    # torch.jit.script (and scripted callers) compile __original_fn with its own globals
    setattr(wrapper, "__script_if_tracing_wrapper", True)
    setattr(wrapper, "__original_fn", fn)
    wrapper.__module__ = module
    wrapper.__name__ = wrapper.__qualname__ = name
    return wrapper
