"""Locate and load the compiled library, and read what it was built as.

The library is a plain shared object (no CPython API) registered with the torch dispatcher through
the LibTorch stable ABI, so one binary serves every Python >= 3.10 and every torch >= its target.
``load`` checks the file against its own ELF headers first (a few KB read); it does not hash it at every
import: the doctor checks the sha256 against the install record (docs/environments.md, "The doctor").
"""

from __future__ import annotations

import ctypes
import json
import os
from functools import lru_cache

import torch

from ._libfile import library_file_problem, library_path

PLANS_ENV = "TORCH_SEGOPS_CUDA_PLANS"  # the CUDA reduction plans allowed (cuda_plans())


class LibraryLoadError(ImportError):
    """The compiled part of torch_segops could not be found or loaded."""


@lru_cache(maxsize=None)
def load() -> str:
    """Load the library into torch's dispatcher once; returns its path."""
    path = library_path()
    if not os.path.exists(path):
        raise LibraryLoadError(
            f"torch_segops: compiled library not found at {path}. The package was not built; "
            "reinstall it (pip install --no-build-isolation .) and run `python -m torch_segops.doctor`."
        )
    problem = library_file_problem(path)  # checked first: the loader dies of SIGBUS on a truncated file, hangs on a FIFO
    if problem:
        raise LibraryLoadError(
            f"torch_segops: the compiled library cannot be loaded: {problem}. Reinstall torch_segops; "
            "`python -m torch_segops.doctor` gives the command for this install."
        )
    try:
        torch.ops.load_library(path)
    except OSError as e:
        raise LibraryLoadError(
            f"torch_segops: loading {path} failed with torch {torch.__version__}: {e}\n"
            "This usually means the binary does not match this torch (or a CUDA build on a machine "
            "without the CUDA runtime). Run `python -m torch_segops.doctor` for the concrete fix."
        ) from e
    return path


@lru_cache(maxsize=None)
def _cdll() -> ctypes.CDLL:
    """The loaded library, for its plain C entry points (build info, CUDA error record)."""
    return ctypes.CDLL(load())


@lru_cache(maxsize=None)
def _built_as() -> dict:
    lib = _cdll()
    fn = lib.torch_segops_build_info
    fn.restype = ctypes.c_char_p
    info = json.loads(fn().decode())
    archs = info.get("cuda_archs") or ""
    info["cuda_archs"] = [a for a in archs.replace(",", ";").split(";") if a]
    info["cuda_version"] = info.get("cuda_version") or None
    # CPU kernel sets compiled in, and the one this process runs (TORCH_SEGOPS_CPU_ISA=baseline forces it)
    info["cpu_isas"] = [a for a in (info.get("cpu_isas") or "").split(",") if a]
    isa = getattr(lib, "torch_segops_cpu_isa", None)
    if isa is not None:
        isa.restype = ctypes.c_char_p
        info["cpu_isa"] = isa().decode()
    targets = getattr(lib, "torch_segops_cpu_targets", None)
    if targets is not None:  # each set's Highway target: {"baseline": "sse2", "avx2": "avx2", ...}
        targets.restype = ctypes.c_char_p
        info["cpu_targets"] = dict(kv.split("=", 1) for kv in targets().decode().split(",") if kv)
    info["library"] = load()
    return info


def build_info() -> dict:
    """What the loaded binary was built as: version, variant (cpu/cuda), CUDA version and archs, CPU kernel sets
    (``cpu_isas``) and each one's Google Highway target (``cpu_targets``); and what this process runs: the CPU kernel set (``cpu_isa``) and the CUDA reduction plans allowed
    (``cuda_plans``, see :func:`cuda_plans`)."""
    info = dict(_built_as())
    try:
        info["cuda_plans"] = cuda_plans()
    except ValueError as e:
        info["cuda_plans"] = f"invalid: {e}"
    return info


def _plans_call(fn_name: str, *args) -> str:
    fn = getattr(_cdll(), fn_name)
    buf = ctypes.create_string_buffer(512)
    if fn(*args, buf, len(buf)):
        raise ValueError(buf.value.decode(errors="replace"))
    return buf.value.decode()


def cuda_plans() -> str:
    """The CUDA reduction plans this process may use, e.g. ``"short,merge,block"`` (every plan, the default).

    The plans (docs/cuda.md): ``short`` (groups of lanes own whole short segments; long ones in pieces),
    ``merge`` (the merge-path plan) and ``block`` (the one-feature block kernel). Set once per process by the
    environment variable ``TORCH_SEGOPS_CUDA_PLANS`` (read at first use, e.g. ``TORCH_SEGOPS_CUDA_PLANS=merge``),
    or at run time with :func:`set_cuda_plans`. Raises ``ValueError`` if the variable holds an invalid set (every
    CUDA reduction then raises the same error). The CPU kernels ignore the setting.
    """
    return _plans_call("torch_segops_cuda_plans")


def set_cuda_plans(plans: str | None) -> str:
    """Restrict the CUDA reductions of this process to ``plans`` and return the previous setting.

    ``plans``: a comma-separated subset of ``short``, ``merge``, ``block`` holding ``short`` or ``merge`` (each
    handles every shape; ``block`` only one-feature inputs), or ``"all"`` / ``None`` for every plan. A way
    around a plan that misbehaves on some GPU: ``set_cuda_plans("merge")`` runs every reduction on the
    merge-path plan. Takes effect at the next op call; results stay deterministic for a fixed setting, and
    may differ in the last bits between plans (another summation order).
    """
    if plans is not None and not isinstance(plans, str):
        raise TypeError(f"torch_segops.set_cuda_plans: plans must be a str or None, got {type(plans).__name__}")
    try:
        previous = cuda_plans()
    except ValueError:  # an invalid TORCH_SEGOPS_CUDA_PLANS, being replaced
        previous = "all"
    _plans_call("torch_segops_set_cuda_plans", (plans or "all").encode())
    return previous


def cuda_plan_counts() -> dict:
    """How many CUDA reductions ran on each plan since the library was loaded (``none``: nothing to reduce).
    All zero for the CPU build. For tests and diagnosis."""
    counts = (ctypes.c_ulonglong * 4)()
    n = _cdll().torch_segops_cuda_plan_counts(counts, 4)
    return dict(zip(("none", "short", "merge", "block"), list(counts)[:n]))


def check_errors() -> None:
    """Raise the pending asynchronous error of a torch_segops CUDA op, if there is one.

    CUDA ops validate ``indptr`` on the GPU without synchronising the host: an invalid ``indptr``
    raises at the next torch_segops CUDA op call, or here. This waits for every CUDA device torch
    has initialised, then raises ``RuntimeError`` with the same message as the CPU backend (naming
    ``indptr``, the bad position and values) and clears the error. A no-op for the CPU build.
    """
    take = getattr(_cdll(), "torch_segops_cuda_take_error", None)
    if take is None:  # CPU build: errors are raised synchronously
        return
    if torch.cuda.is_initialized():
        for device in range(torch.cuda.device_count()):
            torch.cuda.synchronize(device)
    take.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    take.restype = ctypes.c_int
    buf = ctypes.create_string_buffer(4096)
    if take(buf, len(buf)):
        raise RuntimeError(buf.value.decode(errors="replace"))
