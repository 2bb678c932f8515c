"""``install_as_torch_scatter()``: an opt-in ``torch_scatter`` module backed by torch_segops.

Code that does ``import torch_scatter`` (PyTorch Geometric above all: it decides at its own import,
in ``torch_geometric.typing``, whether torch_scatter exists) then gets torch_segops' functions. Nothing
installs it implicitly, and there is no package file named ``torch_scatter``: the module exists only in
``sys.modules`` of the process that asked for it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import sys
import types
import warnings

_NAME = "torch_scatter"
# The pytorch_scatter release whose functions and arguments the alias follows
# (docs/compat-pytorch-scatter.md compares against it).
API_VERSION = "2.1.2"
_OP_PREFIXES = ("scatter", "segment", "gather")


def _op_names(package: types.ModuleType) -> list[str]:
    # every public op function of torch_segops, so a new one (e.g. scatter_mul) comes through by itself
    return [name for name in package.__all__ if name.split("_", 1)[0] in _OP_PREFIXES and callable(getattr(package, name))]


def _alias_version(segops_version: str) -> str:
    # PEP 440: the base version is the pytorch_scatter API level (what version checks compare), the
    # local label says which torch_segops serves it, e.g. 2.1.2+segops.0.1.0
    label = ".".join(filter(None, re.split(r"[^A-Za-z0-9]+", segops_version)))
    return f"{API_VERSION}+segops.{label}" if label else f"{API_VERSION}+segops"


def _build_module(package: types.ModuleType) -> types.ModuleType:
    module = types.ModuleType(_NAME, f"torch_segops {package.__version__} standing in for pytorch_scatter "
                                     f"{API_VERSION} (torch_segops.install_as_torch_scatter()).")
    # a spec, so importlib.util.find_spec("torch_scatter") answers instead of raising ValueError
    module.__spec__ = importlib.machinery.ModuleSpec(_NAME, None, origin="torch_segops.install_as_torch_scatter")
    names = _op_names(package)
    for name in names:
        setattr(module, name, getattr(package, name))
    module.__version__ = _alias_version(package.__version__)
    module.__all__ = [*names, "__version__"]
    module.__torch_segops_alias__ = True
    return module


def _where(module: types.ModuleType) -> str:
    return getattr(module, "__file__", None) or repr(module)


def install_as_torch_scatter(force: bool = False) -> types.ModuleType:
    """Make ``import torch_scatter`` return a module of torch_segops' pytorch_scatter-compatible functions.

    Call it before importing torch_geometric (PyG looks for torch_scatter once, at its import). It refuses
    (``RuntimeError``) when another ``torch_scatter`` is already imported, or when one is installed (a real
    pytorch_scatter would otherwise be shadowed without a word); ``force=True`` replaces it in
    ``sys.modules`` anyway (modules that imported it before keep theirs). Calling it again returns the
    module installed before. Returns the module.
    """
    if not isinstance(force, bool):
        raise TypeError(f"torch_segops.install_as_torch_scatter: force must be a bool, got {type(force).__name__}")
    current = sys.modules.get(_NAME)
    if current is not None and getattr(current, "__torch_segops_alias__", False):
        return current
    if not force:
        if current is not None:
            raise RuntimeError(
                f"torch_segops.install_as_torch_scatter: a torch_scatter module is already imported "
                f"({_where(current)}); code that imported it keeps using it. Call install_as_torch_scatter() "
                "before anything imports torch_scatter, or pass force=True to replace it in sys.modules.")
        spec = importlib.util.find_spec(_NAME)
        if spec is not None:
            where = spec.origin or ", ".join(spec.submodule_search_locations or []) or "unknown location"
            raise RuntimeError(
                f"torch_segops.install_as_torch_scatter: pytorch_scatter is installed ({where}); the alias would "
                "hide it. Uninstall it (pip uninstall torch-scatter) or pass force=True to use torch_segops "
                "instead.")

    import torch_segops

    module = _build_module(torch_segops)
    sys.modules[_NAME] = module
    typing = sys.modules.get("torch_geometric.typing")
    if typing is not None and getattr(typing, "torch_scatter", None) is not module:
        warnings.warn(
            "torch_segops.install_as_torch_scatter: torch_geometric was imported before the alias was installed; "
            "PyG looks for torch_scatter only at its import and will not use torch_segops in this process. Call "
            "install_as_torch_scatter() before `import torch_geometric`.", RuntimeWarning, stacklevel=2)
    return module
