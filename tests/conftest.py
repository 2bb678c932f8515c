"""Shared pytest setup for the torch_segops tests.

- Hypothesis profiles: "default" keeps every property test modest (the whole CPU suite runs in a few
  minutes on 2 cores); "thorough" (HYPOTHESIS_PROFILE=thorough) runs 10x more examples.
- Every test starts from a fixed torch seed and the process's thread count is restored afterwards
  (the determinism tests change it).
- torch.compile's caches go to a fresh folder per session (unless TORCHINDUCTOR_CACHE_DIR is set): the
  AOTAutograd cache keys a graph by its forward, not by the Python autograd formulas of custom ops, so a cache
  written by an older torch_segops replays its backward (an op that no longer exists, e.g. segment_reduce).
"""

from __future__ import annotations

import os
import sys
import tempfile

import pytest
import torch
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # `import reference` from every folder, any rootdir
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    import atexit
    import shutil

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="torchinductor-segops-")
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)

_COMMON = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=False,
    print_blob=True,
)
settings.register_profile("default", max_examples=60, **_COMMON)
settings.register_profile("thorough", max_examples=600, **_COMMON)
settings.register_profile("sanitizer", max_examples=3, **_COMMON)  # under compute-sanitizer (tools/gpu_check.sh)
settings.register_profile("second_pass", max_examples=15, **_COMMON)  # a suite rerun on other kernels (test_cpu_isa)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def pytest_report_header(config):
    lines = [f"torch {torch.__version__}, {torch.get_num_threads()} threads, cuda available: {torch.cuda.is_available()}"]
    try:
        import torch_segops

        info = torch_segops.build_info()
        lines.append(f"torch_segops {torch_segops.__version__} variant={info.get('variant')} library={info.get('library')}")
    except Exception as e:  # the tests themselves will fail loudly; the header only reports
        lines.append(f"torch_segops not importable: {type(e).__name__}: {e}")
    return lines


class _RecordingOps:
    """Stands in for torch.ops.torch_segops in the Python modules that call ops, and records which ops were
    called."""

    def __init__(self, ops):
        self._ops, self.called = ops, []

    def __getattr__(self, name):
        self.called.append(name)
        return getattr(self._ops, name)


@pytest.fixture
def recorded_ops(monkeypatch):
    """The ops called through torch_segops.csr and torch_segops._reductions (run / run_out), in order."""
    import torch_segops._reductions as reductions_module
    import torch_segops.csr as csr_module

    rec = _RecordingOps(csr_module._ops)
    monkeypatch.setattr(csr_module, "_ops", rec)
    monkeypatch.setattr(reductions_module, "_ops", rec)
    return rec


# ---- running the suite in parallel (pytest-xdist, tools/test.sh; docs/ci.md) -------------------------------
# The groups that take minutes, longest first: started first, they do not leave one worker busy at the end.
HEAVY_FIRST = ["test_recipe_e2e.py:cuda130", "emulation-kernels-0", "test_cuda_build.py", "emulation-kernels-1",
               "test_recipe_e2e.py:cpu", "cuda-scatter-sm90", "emulation-kernels-2", "test_aarch64.py",
               "test_torch_headers.py", "torch-headers-newest", "test_gpu_model.py", "test_cpu_isa.py"]


def _group(item) -> str:
    """The module's name, or module:param where the module splits its tests by the value of one parametrized
    fixture (XDIST_SPLIT_BY, a module fixture that is slow to set up for each value)."""
    split = getattr(item.module, "XDIST_SPLIT_BY", None)
    params = getattr(item, "callspec", None) and item.callspec.params
    if split and params and split in params:
        return f"{item.path.name}:{params[split]}"  # no "]": xdist would not read the group of a name ending in one
    return item.path.name


@pytest.hookimpl(hookwrapper=True)
def pytest_collection_modifyitems(config, items):
    """Under --dist loadgroup, each module (or module:param, see _group) is one unit of work, so that its module
    fixtures are built once, by one worker, unless a test names its own xdist_group; the HEAVY_FIRST groups are
    queued first. The marks go on before the other hooks run (xdist's puts the group into the node ids), the
    order is set after them (pytest's own reorders by fixture parameters)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(_group(item)))
    yield
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.get_closest_marker("xdist_group").args[0], len(rank)))  # stable

@pytest.fixture(scope="session")
def shared_dir(request, tmp_path_factory):
    """A folder all xdist workers of this run share (the run's basetemp root); without xdist, the session's."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(request.config, "workerinput") else base  # workerinput: set on xdist workers
