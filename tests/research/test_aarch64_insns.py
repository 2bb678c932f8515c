"""benchmarks/aarch64_insns.py, the aarch64 instruction counts of issue #39, on a small scale: the driver
(benchmarks/aarch64_insns.cpp: the library's kernel code and plain loops on float arrays, with kernels.cpp's
expansions copied in) cross-compiles with Debian's aarch64-linux-gnu-g++ at -O3, its known loop
(segops_tiny_loop) disassembles to one loop, and, where qemu-aarch64 is installed, the counting method gives
exactly that loop's length per iteration (both ways of counting) and one case (max with arg over 64 features,
--quick's size) runs with the library's result equal to the plain loops' and a positive, finite number of
instructions per element for each.

GCC only (clang's aarch64 build is the full script's). Skipped, with the reason, without the cross compiler,
Highway's headers or torch's headers; the counting tests are skipped without qemu-aarch64 (Debian's qemu-user,
which tools/bootstrap.sh does not install: CI checks the build and the disassembly only). About 10 s with qemu
(the compile: about 6 s).
"""

from __future__ import annotations

import math
import shutil

import pytest

from benchmarks import aarch64_insns as A

pytestmark = pytest.mark.skipif(shutil.which(A.GCC) is None,
                                reason=f"{A.GCC} not found (Debian's g++-aarch64-linux-gnu; tools/bootstrap.sh "
                                       "installs it): the aarch64 instruction counts are not checked")

needs_qemu = pytest.mark.skipif(shutil.which("qemu-aarch64") is None,
                                reason="qemu-aarch64 not found (Debian: apt-get install qemu-user): the driver was "
                                       "built and disassembled, but no instructions were counted")


@pytest.fixture(scope="module")
def tools() -> A.Tools:
    t = A.Tools.find()
    if t.objdump is None:
        pytest.skip("no aarch64 objdump (aarch64-linux-gnu-objdump, from binutils-aarch64-linux-gnu)")
    return t


@pytest.fixture(scope="module")
def binary(tools, tmp_path_factory):
    try:
        torch_inc, hwy_inc = A.torch_include(), A.hwy_include()
    except A.ToolError as e:
        pytest.skip(str(e))
    path, _ = A.build(tools, "gcc", tmp_path_factory.mktemp("aarch64_insns"), torch_inc, hwy_inc)
    return path


def test_tiny_loop_disassembles_to_one_loop(tools, binary):
    n, body = A.loop_length(A.disassemble(tools.objdump, binary, "segops_tiny_loop"))
    mnemonics = [b.split()[0] for b in body]
    # one element per iteration: one load, the xor and the multiply, the loop's count and branch
    assert 4 <= n <= 6 and mnemonics.count("ldr") == 1 and "mul" in mnemonics and "eor" in mnemonics, body


@needs_qemu
def test_counting_matches_the_disassembly(tools, binary):
    v = A.validate(tools, binary, "neoverse-n1", n=500)
    assert v["ok"], v
    assert v["measured"] == {"tb": v["disassembly"], "singlestep": v["disassembly"]}


@needs_qemu
def test_one_case_library_against_plain(tools, binary):
    case = next(c for c in A.CASES if c.key == "max64")
    [m] = A.measure_cases(tools, {"gcc": binary}, [case], L=10, elements=A.QUICK_ELEMENTS, cpu="neoverse-n1",
                          method="tb")  # each run checks lib == plain (values and rows exactly) and prints "ok"
    assert set(m.ipe) == {("lib", "gcc"), ("plain", "gcc")}
    assert all(math.isfinite(x) and x > 0 for x in m.ipe.values()), m.ipe
    # every run's count is exact: the smaller size's call and the larger's differ by the added segments only
    for d in m.detail.values():
        assert d["call_2S"] > d["call_S"] > 0
    row = A.table([m], ["gcc"]).splitlines()[-1]
    assert row.startswith("| max+arg | 64 | 10 |") and row.count("|") == 8
