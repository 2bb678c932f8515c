"""The merge-path search that the CPU kernels use to find a chunk's end (merge_path_search_near: a guess
near the previous chunk's count, then doubling steps) against the plain binary search, in C++ under
ASan/UBSan (tests/cpp/merge_path_search.cpp)."""

from __future__ import annotations

import re

import cpp_checks


@cpp_checks.needs_gxx_and_torch
def test_merge_path_search_near_agrees_with_binary_search(tmp_path):
    exe = cpp_checks.build(tmp_path, "tests/cpp/merge_path_search.cpp", "-O1")
    out = cpp_checks.run(exe)
    m = re.search(r"(\d+) passed, (\d+) failed", out)
    assert m and int(m.group(1)) > 1_000_000 and m.group(2) == "0", out
