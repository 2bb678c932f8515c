"""tools/ and benchmarks/ are packages: their modules import their siblings through the package (from tools import
x), so that no module is loaded twice under two names (two copies of its state, caches included), and each still
runs as a script (python tools/x.py) from any folder."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _modules(package: str) -> list[str]:
    folder = os.path.join(REPO, package)
    return sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py")


TOOLS = _modules("tools")
# the benchmarks the tests and research import (the others import torch_geometric or need a GPU only when run)
BENCHMARKS = ["bench_cuda", "common", "cuda_kernel_times", "memory_cases"]


def test_every_module_is_loaded_once():
    for name in [f"tools.{m}" for m in TOOLS] + [f"benchmarks.{m}" for m in BENCHMARKS]:
        importlib.import_module(name)
    twice = [m for m in TOOLS + BENCHMARKS if m in sys.modules]
    assert not twice, f"loaded both as x and as package.x: {twice}"


@pytest.mark.parametrize("package,name", [("tools", m) for m in TOOLS] + [("benchmarks", m) for m in BENCHMARKS])
def test_module_imports_as_a_script_from_another_folder(package, name, tmp_path):
    """What `python tools/x.py` does up to main(): the file run with no package, sys.path[0] its own folder, the
    working directory elsewhere; its sibling imports must resolve, through the package, once."""
    code = (f"import runpy, sys; sys.path.insert(0, {os.path.join(REPO, package)!r}); "
            f"runpy.run_path({os.path.join(REPO, package, name + '.py')!r}, run_name='script_check'); "
            f"twice = [m for m in sys.modules if '{package}.' + m in sys.modules]; "
            f"assert not twice, twice")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cp = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env,
                        timeout=300)
    assert cp.returncode == 0, cp.stderr[-3000:]
