"""Errors of the compiled ops in the types torch users catch.

The C++ side (src/csrc/torch_errors.h) keeps torch's own message when a torch call inside an op fails,
but an exception crossing an extension's stable-ABI boundary arrives in Python as a plain RuntimeError.
torch raises ``torch.OutOfMemoryError`` when the CUDA caching allocator runs out, and users catch that
type (to shrink a batch and retry); the public functions therefore re-raise a CUDA out-of-memory
RuntimeError as ``torch.OutOfMemoryError`` with the same message. On the CPU torch raises RuntimeError
for a failed allocation, and so do we.

torch.jit.script compiles the wrapped function instead of the wrapper (it honours the marks torch's own
``torch.jit._script_if_tracing`` wrappers carry): scripted code raises the RuntimeError. torch.compile
traces through the wrapper.
"""

from __future__ import annotations

import functools

import torch

CUDA_OOM = "CUDA out of memory"


def torch_error_types(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RuntimeError as e:
            if CUDA_OOM in str(e) and not isinstance(e, torch.OutOfMemoryError):
                raise torch.OutOfMemoryError(str(e)) from e
            raise

    # torch.jit.script (and scripted callers) compile __original_fn with its own globals
    setattr(wrapper, "__script_if_tracing_wrapper", True)
    setattr(wrapper, "__original_fn", fn)
    return wrapper
