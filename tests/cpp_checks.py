"""Build a C++ check (tests/cpp/*.cpp, tests/cuda_emulation/*.cpp) with g++ under ASan/UBSan, against the torch
headers and src/csrc, and run it: the harness of the tests that run C++ on the host."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.find_spec("torch")
TORCH_DIR = list(_spec.submodule_search_locations)[0] if _spec else None
_ROW = re.compile(r'X\((\w+), "(\w+)", (\w+), (true|false), (true|false)\)')


def registry_rows() -> list[tuple[str, str, str, bool, bool]]:
    """The rows of the C++ registry (src/csrc/reduction_table.h's SEGOPS_REDUCTIONS), in its order:
    (Enum, name, Reducer, has_arg, integers)."""
    with open(os.path.join(REPO, "src", "csrc", "reduction_table.h")) as fh:
        text = fh.read()
    block = text[text.index("#define SEGOPS_REDUCTIONS(X)"):]
    block = block[:block.index("\n\n")]
    return [(e, n, op, a == "true", i == "true") for e, n, op, a, i in _ROW.findall(block)]



def needs_gxx_and_torch(test):
    """Skips the test where g++ or the torch headers are missing."""
    test = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")(test)
    return pytest.mark.skipif(TORCH_DIR is None, reason="torch not installed (its headers are needed)")(test)


def build(tmp_path, source: str, *flags: str) -> str:
    """Compiles REPO/source with these flags (optimisation, warnings, defines) to an executable; its path."""
    exe = str(tmp_path / os.path.splitext(os.path.basename(source))[0])
    cmd = ["g++", "-std=c++17", *flags, "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
           "-isystem", os.path.join(TORCH_DIR, "include"), "-I", os.path.join(REPO, "src", "csrc"),
           os.path.join(REPO, source), "-o", exe]
    cp = subprocess.run(cmd, capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr[-5000:]
    return exe


def run(exe: str, *args: str, tail: int = 5000, **env: str) -> str:
    """Runs a built check, which must exit 0; its stdout."""
    cp = subprocess.run([exe, *args], capture_output=True, text=True, env=dict(os.environ, **env))
    assert cp.returncode == 0, (cp.stdout + cp.stderr)[-tail:]
    return cp.stdout
