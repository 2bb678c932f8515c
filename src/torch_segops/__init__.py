"""torch_segops: fast, load-balanced CSR segment operations for PyTorch.

API-compatible with pytorch_scatter's segment module (``segment_csr``, ``segment_coo``, ``gather_csr``,
``gather_coo`` and their named forms) and ``scatter`` (deterministic): switch by import, or call
``install_as_torch_scatter()`` so that ``import torch_scatter`` (PyG's) gets them. Plus segment
softmax/logsumexp. The compiled ops live under ``torch.ops.torch_segops``.
"""

from __future__ import annotations

import os
import sys

def _doctor_is_starting() -> bool:
    # `python -m torch_segops.doctor` and the console script must run even when the library is broken.
    argv = getattr(sys, "orig_argv", sys.argv)
    return "torch_segops.doctor" in argv or os.path.basename(sys.argv[0] or "") == "torch-segops-doctor"


__version__: str = "unknown"
if not _doctor_is_starting():  # the doctor loads the library in a child process only: a damaged one kills its loader
    try:
        from ._library import (LibraryLoadError, build_info, check_errors, cuda_plan_counts, cuda_plans, library_path,
                               load, set_cuda_plans)

        load()
    except SystemExit as _e:  # a broken torch can even exit from its import
        from ._libfile import describe_torch_import_error

        raise ImportError(f"torch_segops: {describe_torch_import_error(_e)}. Run `python -m torch_segops.doctor` "
                          "for the fix.") from _e
    __version__ = build_info()["version"]

    from . import _registrations  # noqa: F401  (fake kernels and autograd)
    from .coo import (
        gather_coo,
        segment_add_coo,
        segment_coo,
        segment_max_coo,
        segment_mean_coo,
        segment_min_coo,
        segment_sum_coo,
    )
    from .composite import scatter_log_softmax, scatter_logsumexp, scatter_softmax, scatter_std
    from .scatter import (
        ScatterPlan,
        scatter,
        scatter_add,
        scatter_max,
        scatter_mean,
        scatter_min,
        scatter_mul,
        scatter_plan,
        scatter_sum,
    )
    from .csr import (
        gather_csr,
        segment_add_csr,
        segment_csr,
        segment_logsumexp_csr,
        segment_max_csr,
        segment_mean_csr,
        segment_min_csr,
        segment_softmax_csr,
        segment_sum_csr,
    )
    from ._alias import install_as_torch_scatter
    from ._errors import public as _public

    # every public op function: errors name it; a CUDA out-of-memory error is raised as torch.OutOfMemoryError
    # (_errors.py)
    for _name in (
        "gather_coo", "gather_csr", "scatter", "scatter_add", "scatter_log_softmax", "scatter_logsumexp",
        "scatter_max", "scatter_mean", "scatter_min", "scatter_mul", "scatter_plan", "scatter_softmax", "scatter_std",
        "scatter_sum", "segment_add_coo", "segment_add_csr", "segment_coo", "segment_csr",
        "segment_logsumexp_csr", "segment_max_coo", "segment_max_csr", "segment_mean_coo", "segment_mean_csr",
        "segment_min_coo", "segment_min_csr", "segment_softmax_csr", "segment_sum_coo", "segment_sum_csr",
    ):
        globals()[_name] = _public(globals()[_name], __name__, _name)
    del _name

__all__ = [
    "LibraryLoadError",
    "ScatterPlan",
    "__version__",
    "build_info",
    "check_errors",
    "cuda_plan_counts",
    "cuda_plans",
    "gather_coo",
    "gather_csr",
    "install_as_torch_scatter",
    "library_path",
    "scatter",
    "scatter_add",
    "scatter_log_softmax",
    "scatter_logsumexp",
    "scatter_max",
    "scatter_mean",
    "scatter_min",
    "scatter_mul",
    "scatter_plan",
    "scatter_softmax",
    "scatter_std",
    "scatter_sum",
    "segment_add_coo",
    "segment_add_csr",
    "segment_coo",
    "segment_csr",
    "segment_logsumexp_csr",
    "segment_max_coo",
    "segment_max_csr",
    "segment_mean_coo",
    "segment_mean_csr",
    "segment_min_coo",
    "segment_min_csr",
    "segment_softmax_csr",
    "segment_sum_coo",
    "segment_sum_csr",
    "set_cuda_plans",
]
