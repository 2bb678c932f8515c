"""The CUDA kernels, emulated on the host (tests/cuda_emulation/emulate_kernels.cpp) under AddressSanitizer/UBSan:
the real kernel functors against a naive reference, thread orders, invalid indptr, the error protocol, COO, special
values, messages; and the block emulation's own controls. The scatter ops' drivers: emulate_scatter.cpp, its own
executable (one test, and its control).

The executable is compiled once per run (by the first xdist worker that needs it; the others wait for it) and run
in parts, each part a test of its own, so that two workers share the run (docs/ci.md). Together the parts check
what one `--quick` run checks: the kernels part is cut into shards of its shapes (every shard draws all the
problems, in the same order, and checks its own), the invalid offsets go with shard 0.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

import cpp_checks

SOURCE = "tests/cuda_emulation/emulate_kernels.cpp"
SCATTER_SOURCE = "tests/cuda_emulation/emulate_scatter.cpp"  # the scatter ops' drivers (cuda/scatter_kernels.cuh)
FIBER_CONTROL = os.path.join(cpp_checks.REPO, "tests", "cuda_emulation", "fiber_stack_control.cpp")
FLAGS = ("-O1", "-DSEGOPS_EMU_QUICK", "-fno-strict-aliasing")  # -O1 pays for its compile (docs/ci.md)
KERNEL_SHARDS = 3
# (arguments, the fewest checks that part runs): the kernels part in shards of its shapes
PARTS = {f"kernels-{i}": (["--only", "kernels", "--shard", f"{i}/{KERNEL_SHARDS}"], 350_000) for i in range(KERNEL_SHARDS)}
PARTS["others"] = (["--only", "protocol,coo,specials,messages"], 1)  # seconds together; the kernels take minutes
ALL_PARTS_CHECK_AT_LEAST = 1_000_000


def _built_once(shared_dir, source: str) -> str:
    """The executable of an emulation source, built once for all workers (its compile takes minutes with the
    sanitizers)."""
    from filelock import FileLock

    name = os.path.splitext(os.path.basename(source))[0]
    exe, failed = shared_dir / name, shared_dir / f"{name}.failed"
    with FileLock(str(shared_dir / f"{name}.lock")):
        if failed.exists():
            pytest.fail(f"the emulation did not compile (another worker tried):\n{failed.read_text()}")
        if not exe.exists():
            work = shared_dir / f"{name}-build"
            work.mkdir(exist_ok=True)
            try:
                built = cpp_checks.build(work, source, *FLAGS)
            except AssertionError as e:
                failed.write_text(str(e))
                raise
            os.replace(built, exe)
    return str(exe)


@pytest.fixture(scope="session")
def emulator(shared_dir):
    return _built_once(shared_dir, SOURCE)


@pytest.fixture(scope="session")
def scatter_emulator(shared_dir):
    return _built_once(shared_dir, SCATTER_SOURCE)


def _assert_every_row_checked(out: str, label: str) -> None:
    """The line `label: sum N mean N ...` names every row of the registry, in its order, each checked."""
    row_checks = re.search(label + r": (.*)", out)
    assert row_checks, out
    by_row = dict(re.findall(r"(\w+) (\d+)", row_checks.group(1)))
    assert list(by_row) == [name for _, name, *_ in cpp_checks.registry_rows()], by_row
    assert all(int(n) > 0 for n in by_row.values()), by_row


def _counts(out: str) -> tuple[int, int]:
    m = re.search(r"(\d+) passed, (\d+) failed", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


@cpp_checks.needs_gxx_and_torch
@pytest.mark.parametrize("part", [pytest.param(p, marks=pytest.mark.xdist_group(f"emulation-{p}")) for p in PARTS])
def test_kernels_emulated_on_host(emulator, part):
    args, at_least = PARTS[part]
    out = cpp_checks.run(emulator, "--quick", *args, tail=8000, ASAN_OPTIONS="detect_leaks=1")
    passed, failed = _counts(out)
    assert passed >= at_least and failed == 0, out
    if "kernels" in args:  # every row of the registry, its CUDA kernels checked against its reference
        _assert_every_row_checked(out, "reference checks by reduction")
    # the host twin of compute-sanitizer initcheck: no kernel loaded workspace bytes that no kernel stored
    assert "reads of never-written workspace bytes: 0" in out, out


@cpp_checks.needs_gxx_and_torch
@pytest.mark.xdist_group("emulation-scatter")
def test_scatter_emulated_on_host(scatter_emulator):
    """The CUDA scatter ops' drivers (index check, offsets, src read through the stable order, args mapped back,
    plans) against what scatter did on CUDA before them (a gathered copy reduced by the CSR kernels: bitwise), a
    float64 reference and the CPU's index messages, for every row of the registry, in every thread order."""
    out = cpp_checks.run(scatter_emulator, tail=8000, ASAN_OPTIONS="detect_leaks=1")
    passed, failed = _counts(out)
    assert passed >= 20_000 and failed == 0, out
    _assert_every_row_checked(out, "scatter checks by reduction")
    assert "reads of never-written workspace bytes: 0" in out, out


@cpp_checks.needs_gxx_and_torch
@pytest.mark.xdist_group("emulation-scatter")
def test_scatter_emulation_fails_an_off_by_one(scatter_emulator):
    """The control: the same checks with one offset of every index row off by one (the scatter then folds a row
    into the wrong target) fail."""
    bad = subprocess.run([scatter_emulator, "--control"], capture_output=True, text=True,
                         env=dict(os.environ, ASAN_OPTIONS="detect_leaks=1"))
    assert bad.returncode != 0, bad.stdout[-3000:]
    passed, failed = _counts(bad.stdout)
    assert failed > 100 and "differs from the gathered copy" in bad.stderr, (failed, bad.stderr[-3000:])


def test_parts_cover_the_whole_run():
    """Every part main() runs is one of PARTS (a part added to the executable is not left out of CI), and the
    fewest checks the parts run add up to what the whole run was held to before it was split."""
    with open(os.path.join(cpp_checks.REPO, SOURCE)) as fh:
        in_main = set(re.findall(r'if \(part\("(\w+)"\)\)', fh.read()))
    assert in_main == {part for args, _ in PARTS.values() for part in args[1].split(",")}, in_main
    assert sum(at_least for _, at_least in PARTS.values()) > ALL_PARTS_CHECK_AT_LEAST


@cpp_checks.needs_gxx_and_torch
@pytest.mark.xdist_group("emulation-controls")
@pytest.mark.parametrize("kind, reason", [(0, "a thread returned while others wait at a block barrier"),
                                          (1, "threads wait at different barriers"),
                                          (2, "race: the result depends on the thread order"),
                                          (3, "shared memory race: a warp stores to bytes another warp loaded")])
def test_block_emulation_rejects_broken_kernels(emulator, kind, reason):
    """The block emulation rejects kernels that break the barrier rules (each would hang or race on a GPU)."""
    bad = subprocess.run([emulator, "--bad-block", str(kind)], capture_output=True, text=True)
    assert bad.returncode != 0 and reason in bad.stdout + bad.stderr, (kind, bad.stdout + bad.stderr)


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
@pytest.mark.xdist_group("emulation-controls")
def test_reused_fiber_stacks_under_asan(tmp_path):
    """A finished fiber never unwinds, so the pooled stack it leaves holds its frames' poisoned redzones; the next
    fiber on it (an optimised build lays its frames elsewhere) got a false stack-buffer-overflow until start()
    unpoisoned the stack. ASan still reports a real overflow on a fiber's stack. (A small program, -O1, seconds.)"""
    exe = str(tmp_path / "fiber_stack_control")
    cp = subprocess.run(["g++", "-std=c++17", "-O1", "-fsanitize=address", "-I", os.path.dirname(FIBER_CONTROL),
                         FIBER_CONTROL, "-o", exe], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr[-5000:]
    clean = subprocess.run([exe, "0"], capture_output=True, text=True)
    assert clean.returncode == 0 and clean.stdout.strip() == "ok", clean.stderr[-5000:]
    overflow = subprocess.run([exe, "8"], capture_output=True, text=True)
    assert overflow.returncode != 0 and "AddressSanitizer: stack-buffer-overflow" in overflow.stderr, overflow.stderr[-5000:]
