"""The Python package as a stack (issue #40), read from its imports with ast (no import of torch_segops): the public
modules (csr, coo, scatter, composite) call down into the private ones (_segment: the core; _arguments: every
argument check; _reductions: the table) and never take a private name from a sibling; the private modules never
import a public one; the fake kernels and autograd are registered in _registrations.py only."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "torch_segops"


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _relative_imports(path: Path):
    """(module imported from, names) of each relative import: ``from .x import a`` gives ("x", ["a"]), ``from . import
    x`` gives ("x", []) (a module, no name)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            if node.module:
                yield node.module.split(".")[-1], [a.name for a in node.names]
            else:
                for a in node.names:
                    yield a.name, []


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_imports_a_private_name_of_a_sibling():
    bad = [f"{p.relative_to(PACKAGE)}: {name} from {module}" for p in _modules()
           for module, names in _relative_imports(p) for name in names if _private(name)]
    assert not bad, bad


def test_private_modules_import_no_public_module():
    """The stack goes down: _segment, _arguments, _reductions, _registrations, ... import no public module."""
    public = {p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_")}
    bad = [f"{p.name} imports {module}" for p in PACKAGE.glob("_*.py") if p.name != "__init__.py"
           for module, _ in _relative_imports(p) if module in public]
    assert not bad, bad


def test_fake_kernels_and_autograd_are_registered_in_one_module():
    calls = {"register_fake", "register_autograd", "register_kernel", "impl_abstract"}
    where = sorted({p.name for p in _modules() for node in ast.walk(ast.parse(p.read_text()))
                    if isinstance(node, ast.Attribute) and node.attr in calls})
    assert where == ["_registrations.py"], where


def test_the_checks_find_what_they_look_for(tmp_path):
    """The helpers above see a private import, and a relative import of a module."""
    f = tmp_path / "m.py"
    f.write_text("from .ops import _check, gather\nfrom . import _segment\nfrom .._x import y\n")
    assert list(_relative_imports(f)) == [("ops", ["_check", "gather"]), ("_segment", []), ("_x", ["y"])]
