"""torch_segops.install_as_torch_scatter() and PyTorch Geometric through it (issue #30).

The alias's own behaviour is tested in this process with sys.modules restored after each test. PyG's paths
that reach torch_scatter run in one child process (tests/pyg_scenarios.py: the alias must be installed
before torch_geometric is imported, and must not leak into the other tests), natively and through the
alias; the tests here compare what it recorded. CI installs torch-geometric (tools/bootstrap.sh); without it
the PyG tests skip, saying so.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import pyg_scenarios
import torch_segops

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_pyg = pytest.mark.skipif(importlib.util.find_spec("torch_geometric") is None,
                               reason="torch_geometric is not installed (tools/bootstrap.sh installs torch-geometric==2.8.1)")


@pytest.fixture
def clean_torch_scatter():
    """No torch_scatter in sys.modules during the test, and the session's state (none) back afterwards."""
    saved = sys.modules.pop("torch_scatter", None)
    yield
    sys.modules.pop("torch_scatter", None)
    if saved is not None:
        sys.modules["torch_scatter"] = saved


@pytest.fixture
def no_installed_torch_scatter(clean_torch_scatter):
    if importlib.util.find_spec("torch_scatter") is not None:
        pytest.skip("a real torch_scatter is installed here: the alias refuses without force=True (tested below)")


def _op_names():
    return [n for n in torch_segops.__all__ if n.split("_")[0] in ("scatter", "segment", "gather")]


def test_alias_module_serves_torch_segops(no_installed_torch_scatter):
    module = torch_segops.install_as_torch_scatter()
    import torch_scatter

    assert torch_scatter is module is sys.modules["torch_scatter"]
    assert torch_segops.install_as_torch_scatter() is module  # idempotent
    names = _op_names()
    assert {"segment_csr", "segment_coo", "gather_csr", "gather_coo", "scatter", "scatter_max", "scatter_mean",
            "scatter_softmax", "scatter_std"} <= set(names)
    assert sorted(module.__all__) == sorted([*names, "__version__"])
    for name in names:
        assert getattr(module, name) is getattr(torch_segops, name), name
    assert importlib.util.find_spec("torch_scatter") is module.__spec__  # PyG's has_package() asks this
    src, index = torch.randn(6, 3), torch.tensor([0, 0, 2, 1, 2, 2])
    torch.testing.assert_close(torch_scatter.scatter(src, index, 0, reduce="sum"),
                               torch.zeros(3, 3).index_add_(0, index, src))


def test_alias_version_reads_as_pytorch_scatter_api_level():
    packaging_version = pytest.importorskip("packaging.version")
    from torch_segops._alias import API_VERSION, _alias_version

    for segops in (torch_segops.__version__, "0.1.0", "0.2.0.dev3+g1234abc", "unknown"):
        version = packaging_version.Version(_alias_version(segops))
        assert version.base_version == API_VERSION, segops
        assert version.local.startswith("segops"), segops


def test_refuses_an_imported_torch_scatter(clean_torch_scatter):
    import types

    other = types.ModuleType("torch_scatter")
    sys.modules["torch_scatter"] = other
    with pytest.raises(RuntimeError, match="already imported.*force=True"):
        torch_segops.install_as_torch_scatter()
    assert sys.modules["torch_scatter"] is other
    module = torch_segops.install_as_torch_scatter(force=True)
    assert sys.modules["torch_scatter"] is module is not other


def test_refuses_to_shadow_an_installed_torch_scatter(clean_torch_scatter, tmp_path, monkeypatch):
    package = tmp_path / "torch_scatter"
    package.mkdir()
    (package / "__init__.py").write_text("raise AssertionError('the real torch_scatter must not be imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    with pytest.raises(RuntimeError, match=f"pytorch_scatter is installed.*{re.escape(str(tmp_path))}.*force=True"):
        torch_segops.install_as_torch_scatter()
    assert "torch_scatter" not in sys.modules
    module = torch_segops.install_as_torch_scatter(force=True)
    import torch_scatter

    assert torch_scatter is module


def test_force_must_be_a_bool(clean_torch_scatter):
    with pytest.raises(TypeError, match="force must be a bool"):
        torch_segops.install_as_torch_scatter(force="yes")


def test_never_installed_implicitly():
    """Importing torch_segops adds no torch_scatter, and the distribution ships no file named torch_scatter."""
    code = "import sys, torch_segops; print('torch_scatter' in sys.modules)"
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0 and cp.stdout.strip() == "False", cp.stdout + cp.stderr
    files = importlib.metadata.files("torch-segops") or []
    assert files and not [f for f in files if "torch_scatter" in str(f)]


@needs_pyg
def test_warns_when_torch_geometric_came_first(no_installed_torch_scatter):
    """(Where a real torch_scatter is installed, PyG finds it at its import: the case does not arise.)"""
    code = textwrap.dedent("""
        import warnings, torch_geometric.typing as t, torch_segops
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch_segops.install_as_torch_scatter(force=True)
        print(t.WITH_TORCH_SCATTER, [str(w.message) for w in caught if w.category is RuntimeWarning])
    """)
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr[-4000:]
    assert cp.stdout.startswith("False ") and "before `import torch_geometric`" in cp.stdout, cp.stdout


@pytest.fixture(scope="module")
def pyg_results(tmp_path_factory):
    if importlib.util.find_spec("torch_geometric") is None:
        pytest.skip("torch_geometric is not installed (tools/bootstrap.sh installs torch-geometric==2.8.1)")
    path = tmp_path_factory.mktemp("pyg") / "results.pt"
    cp = subprocess.run([sys.executable, os.path.join(TESTS, "pyg_scenarios.py"), str(path)], capture_output=True,
                        text=True, timeout=600)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-6000:]
    return torch.load(path, weights_only=False)


# Per scenario: the alias functions PyG must call, and the torch_segops ops that must run (forward, and
# gather_csr: the backward of sum and mean; the max/min backward is torch's scatter at the arg). PyG keeps
# the others on its own path (on the CPU, scatter min/max/mul use scatter_reduce_; an aggregation with an
# index outside deterministic mode uses scatter).
_SUM, _MEAN, _MAX, _MIN, _GATHER = (f"torch_segops::{op}" for op in
                                    ("segment_sum", "segment_mean", "segment_max", "segment_min", "gather_csr"))
_CSR = {"segment_csr"}
REACHES = {
    "segment_sum": (_CSR, {_SUM, _GATHER}),
    "segment_mean": (_CSR, {_MEAN, _GATHER}),
    "segment_max": (_CSR, {_MAX}),
    "segment_min": (_CSR, {_MIN}),
    "softmax_ptr": (_CSR, {_MAX, _SUM, _GATHER}),
    "scatter_argmax": ({"scatter_max"}, {"torch_segops::scatter_max"}),  # the CPU scatter op (#38): no sort
    "scatter_max_cpu": (set(), set()),
    "SumAggregation_ptr": (_CSR, {_SUM, _GATHER}),
    "MeanAggregation_ptr": (_CSR, {_MEAN, _GATHER}),
    "MaxAggregation_ptr": (_CSR, {_MAX}),
    "MinAggregation_ptr": (_CSR, {_MIN}),
    "SumAggregation_sorted_index_deterministic": (_CSR, {_SUM, _GATHER}),
    "MeanAggregation_sorted_index_deterministic": (_CSR, {_MEAN, _GATHER}),
    "MaxAggregation_sorted_index_deterministic": (_CSR, {_MAX}),
    "SumAggregation_sorted_index": (set(), set()),
    "sage_max_deterministic": (_CSR, {_MAX}),
    "sage_mean_deterministic": (_CSR, {_MEAN, _GATHER}),
    "gat_deterministic": (_CSR, {_MAX, _SUM, _GATHER}),  # softmax over the edges, then the sum aggregation
    "segment_max_ties": (_CSR, {_MAX}),
}


def test_every_scenario_has_an_expectation():
    assert set(REACHES) == set(pyg_scenarios.SCENARIOS)


@needs_pyg
@pytest.mark.parametrize("name", sorted(pyg_scenarios.SCENARIOS))
def test_pyg_reaches_torch_segops(pyg_results, name):
    native, alias = pyg_results[name]["native"], pyg_results[name]["alias"]
    assert native["alias_calls"] == {} and native["segops_ops"] == {}, (native["alias_calls"], native["segops_ops"])
    functions, ops = REACHES[name]
    assert set(alias["alias_calls"]) == functions, alias["alias_calls"]
    assert set(alias["segops_ops"]) == ops, alias["segops_ops"]
    # every call ran at least one compiled op
    assert sum(alias["segops_ops"].values()) >= sum(alias["alias_calls"].values()), alias["segops_ops"]


@needs_pyg
@pytest.mark.parametrize("name", sorted(set(pyg_scenarios.SCENARIOS) - {"segment_max_ties"}))
def test_pyg_same_outputs_and_gradients(pyg_results, name):
    native, alias = pyg_results[name]["native"], pyg_results[name]["alias"]
    assert len(native["outputs"]) == len(alias["outputs"]) >= 1
    for a, n in zip(alias["outputs"], native["outputs"]):
        assert a.dtype == n.dtype
        torch.testing.assert_close(a, n, rtol=1e-5, atol=1e-6)
    assert len(native["grads"]) == len(alias["grads"])
    for a, n in zip(alias["grads"], native["grads"]):
        torch.testing.assert_close(a, n, rtol=1e-5, atol=1e-6)


@needs_pyg
def test_pyg_max_ties_gradient(pyg_results):
    """Same maxima; the gradient of a tied maximum goes whole to its first row (torch_segops, as pytorch_scatter).
    PyG's native path (torch._segment_reduce, torch 2.13 CPU) splits a positive gradient evenly over the tied
    rows, and gives a negative one whole to every tied row (its backward divides only positive gradients: the
    sum over the rows is then the tie count times the gradient), so only the positive entries are compared."""
    native, alias = pyg_results["segment_max_ties"]["native"], pyg_results["segment_max_ties"]["alias"]
    torch.testing.assert_close(alias["outputs"][0], native["outputs"][0], rtol=0, atol=0)
    (src,), (weight,), ptr = alias["inputs"], alias["weights"], alias["info"]["ptr"]
    first, even = torch.zeros_like(src), torch.zeros_like(src)
    ties = 0
    for s in range(ptr.numel() - 1):
        rows = src[ptr[s]:ptr[s + 1]]
        if rows.numel() == 0:
            continue
        is_max = rows == rows.amax(0)
        ties += int((is_max.sum(0) > 1).sum())
        first[ptr[s]:ptr[s + 1]] = (is_max.cumsum(0) == 1) & is_max
        even[ptr[s]:ptr[s + 1]] = is_max / is_max.sum(0)
    assert ties > 0  # the scenario does tie
    seg = torch.repeat_interleave(torch.arange(ptr.numel() - 1), ptr.diff())
    upstream = weight[seg]
    torch.testing.assert_close(alias["grads"][0], first * upstream)
    positive = upstream > 0
    assert positive.any() and (~positive).any()
    torch.testing.assert_close(native["grads"][0][positive], (even * upstream)[positive])
