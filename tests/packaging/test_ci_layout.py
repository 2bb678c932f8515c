"""The parallel CI layout of tests/conftest.py (docs/ci.md): every test's xdist group is one pytest-xdist reads
back from the node id, so a module's (or a module parameter's) tests stay one unit of work on one worker."""

from __future__ import annotations

import pytest

import conftest


def test_every_group_is_read_back_by_xdist(request):
    loadgroup = pytest.importorskip("xdist.scheduler.loadgroup", reason="pytest-xdist not installed (tools/bootstrap.sh)")
    split = loadgroup.LoadGroupScheduling._split_scope
    base = "tests/test_x.py::test_y[a-b]"
    for group in conftest.HEAVY_FIRST:  # the groups run first, the e2e packages' among them
        assert split(None, f"{base}@{group}") == group, group
    for item in request.session.items:  # the groups of the tests collected with this one
        group = item.get_closest_marker("xdist_group").args[0]
        assert split(None, f"{item.nodeid.split('@')[0]}@{group}") == group, (item.nodeid, group)
    assert {"test_recipe_e2e.py:cpu", "test_recipe_e2e.py:cuda130"} <= set(conftest.HEAVY_FIRST)
