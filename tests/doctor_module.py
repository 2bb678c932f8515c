"""The doctor package loaded by path, for tests/packaging/test_doctor.py and tests/packaging/test_environments.py.

Loaded from src/ under a package name of its own whose ``__init__`` is not run (importing ``torch_segops`` loads
the compiled library first): these tests need neither the library nor an installed torch_segops. The doctor's
relative imports reach its siblings there (``from .._libfile import ...``).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "src" / "torch_segops"
PARENT = "_segops_under_test"


def load_doctor():
    if f"{PARENT}.doctor" not in sys.modules:
        parent = types.ModuleType(PARENT)
        parent.__path__ = [str(PACKAGE_DIR)]
        sys.modules[PARENT] = parent
        importlib.import_module(f"{PARENT}.doctor")
    return sys.modules[f"{PARENT}.doctor"]


def load_libfile():
    """src/torch_segops/_libfile.py, the module below the loader and the doctor."""
    load_doctor()
    return importlib.import_module(f"{PARENT}._libfile")
