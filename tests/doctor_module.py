"""The doctor package loaded by path, for tests/test_doctor.py and tests/test_environments.py.

Loaded from src/ as a package of its own name (its modules import each other relatively), so that
these tests need neither the compiled library nor an installed torch_segops: importing
``torch_segops`` would load the library first.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

DOCTOR_DIR = Path(__file__).resolve().parents[1] / "src" / "torch_segops" / "doctor"


def load_doctor(name: str = "_doctor_under_test"):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, DOCTOR_DIR / "__init__.py", submodule_search_locations=[str(DOCTOR_DIR)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
