"""The merge-path search that the CPU kernels use to find a chunk's end (merge_path_search_near: a guess
near the previous chunk's count, then doubling steps) against the plain binary search, in C++ under
ASan/UBSan (tests/cpp/merge_path_search.cpp)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
_spec = importlib.util.find_spec("torch")
TORCH_DIR = _spec.submodule_search_locations[0] if _spec else None


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
@pytest.mark.skipif(TORCH_DIR is None, reason="torch not installed (its headers are needed)")
def test_merge_path_search_near_agrees_with_binary_search(tmp_path):
    exe = str(tmp_path / "merge_path_search")
    cmd = ["g++", "-std=c++17", "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
           "-isystem", os.path.join(TORCH_DIR, "include"), "-I", os.path.join(REPO, "src", "csrc"),
           os.path.join(HERE, "cpp", "merge_path_search.cpp"), "-o", exe]
    cp = subprocess.run(cmd, capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr[-5000:]
    run = subprocess.run([exe], capture_output=True, text=True)
    assert run.returncode == 0, (run.stdout + run.stderr)[-5000:]
    m = re.search(r"(\d+) passed, (\d+) failed", run.stdout)
    assert m and int(m.group(1)) > 1_000_000 and m.group(2) == "0", run.stdout
