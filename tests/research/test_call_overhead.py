"""benchmarks/call_overhead.py on a small scale: every candidate runs (its call is valid: an error would end the
run), the table has a row per candidate with a positive time, and the reference row's ratio is 1."""

from __future__ import annotations

import re
import sys

from benchmarks import call_overhead as B


def test_the_table_has_every_call(tmp_path, monkeypatch, capsys):
    out = tmp_path / "calls.md"
    monkeypatch.setattr(sys, "argv", ["call_overhead.py", "--rounds", "2", "--repeats", "1", "--calls", "5",
                                      "--markdown", str(out)])
    B.main()
    text = out.read_text()
    assert text.strip() == capsys.readouterr().out.strip()
    rows = {m.group(1): (float(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"^\| ([^|]+?) \| ([0-9.]+) \| ([0-9.]+) \[", text, re.M)}
    assert set(rows) == set(B.cases()), rows
    assert all(us > 0 for us, _ in rows.values())
    assert rows["torch scatter_add_ (1-D)"][1] == 1.0
