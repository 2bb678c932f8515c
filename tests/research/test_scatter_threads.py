"""benchmarks/scatter_threads.py on a small scale: a row per output size and index dtype with positive times,
and the 2-thread path named by the kernels' rule (serial below 2**17 rows; a sum's one pass up to 8 MiB)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import torch

from benchmarks import scatter_threads as B


def test_the_table_has_every_case(tmp_path, monkeypatch):
    out = tmp_path / "threads.md"
    monkeypatch.setattr(sys, "argv", ["scatter_threads.py", "--rows", "140000", "--targets", "1000,2200000",
                                      "--rounds", "2", "--markdown", str(out)])
    B.main()
    rows = re.findall(r"^\| (\d+) \| [0-9.]+ \| (int\d+) \| ([0-9.]+) \| ([0-9.]+) \| [0-9.]+ \[.*\] \| ([a-z ()]+) \|$",
                      out.read_text(), re.M)
    assert [(t, i) for t, i, *_ in rows] == [("1000", "int64"), ("1000", "int32"), ("2200000", "int64"),
                                             ("2200000", "int32")], rows
    assert all(float(a) > 0 and float(b) > 0 for _, _, a, b, _ in rows)
    assert [p for *_, p in rows] == ["one pass"] * 2 + ["partition"] * 2


def test_the_rule_follows_the_kernels():
    assert B.two_thread_path(1000, "sum", 10**7, torch.float32) == "one pass (serial)"
    assert B.two_thread_path(10**6, "sum", 2 * 2**20, torch.float32) == "one pass"  # exactly 8 MiB
    assert B.two_thread_path(10**6, "sum", 2 * 2**20 + 1, torch.float32) == "partition"
    assert B.two_thread_path(10**6, "mean", 1000, torch.float32) == "partition"


def test_the_rule_s_constants_are_the_kernels():
    """The benchmark restates two constants of cpu/scatter_kernels.cpp: they must not drift apart."""
    src = (Path(__file__).resolve().parents[2] / "src" / "csrc" / "cpu" / "scatter_kernels.cpp").read_text()

    def value(name):  # "a << b"
        a, b = re.search(rf"constexpr int64_t {name} = (\d+) << (\d+);", src).groups()
        return int(a) << int(b)

    assert value("kCachedOutputBytes") == B.ONE_PASS_OUTPUT_BYTES
    assert value("kSerialElems") == B.SERIAL_ELEMS
