"""CUDA: the same ops on GPU tensors against the CPU results (which test_ops.py checks against the
reference), gradients, opcheck, torch.compile, run-to-run determinism and device-mismatch errors.

Every test here is skipped, with the reason shown by `pytest -ra`, when there is no CUDA GPU or when
the installed torch_segops binary was built without CUDA.

Every reduction plan is forced explicitly (set_cuda_plans; docs/cuda.md) and checked to be the one that ran
(cuda_plan_counts), instead of hoping that the shapes reach it.

Dry run of this file's own logic without a GPU: TORCH_SEGOPS_CUDA_TESTS_DEVICE=cpu runs every test with
"cuda" replaced by the CPU (so GPU-vs-CPU comparisons become CPU-vs-CPU) on 100x smaller large shapes. That
only checks the test code (decorators, fixtures, helpers); it says nothing about CUDA kernels. Tests that need
two distinct devices are skipped then. CI runs it (tests/packaging/test_test_files.py).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import cpp_checks
import reference as R
import torch_segops as so

DEV = os.environ.get("TORCH_SEGOPS_CUDA_TESTS_DEVICE", "cuda")
DRY_RUN = DEV != "cuda"
_NO_GPU = not torch.cuda.is_available()
_CPU_BUILD = so.build_info().get("variant") != "cuda"

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(_NO_GPU and not DRY_RUN, reason="no CUDA GPU on this machine"),
    pytest.mark.skipif(not _NO_GPU and _CPU_BUILD and not DRY_RUN,
                       reason="torch_segops was built without CUDA (build_info()['variant'] == 'cpu')"),
]
needs_two_devices = pytest.mark.skipif(DRY_RUN, reason="dry run on one device: no device mismatch possible")

_ops = torch.ops.torch_segops
REDUCES = {
    "sum": so.segment_sum_csr,
    "mean": so.segment_mean_csr,
    "min": so.segment_min_csr,
    "max": so.segment_max_csr,
    "logsumexp": so.segment_logsumexp_csr,
    "softmax": so.segment_softmax_csr,
    "mul": lambda src, indptr: so.segment_csr(src, indptr, reduce="mul"),
}


def _values(result):
    """The values of a (values, arg) result, or the result itself."""
    return result[0] if isinstance(result, tuple) else result


def _compare_with_cpu(name, src, indptr):
    if name == "mul":
        src = R.near_one(src)  # products that neither overflow nor vanish, in any order
    cpu = REDUCES[name](src, indptr)
    gpu = REDUCES[name](src.to(DEV), indptr.to(DEV))
    if isinstance(cpu, tuple):
        cpu_v, cpu_a = cpu
        gpu_v, gpu_a = gpu
        assert gpu_v.device.type == DEV and gpu_a.device.type == DEV
        R.assert_equal(gpu_v.cpu(), cpu_v, f"cuda {name} values")
        R.assert_equal(gpu_a.cpu(), cpu_a, f"cuda {name} arg")
        return
    assert gpu.device.type == DEV
    if name == "softmax":
        R.assert_softmax_close(gpu.cpu(), R.segment_softmax(src, indptr), src, indptr, what="cuda softmax")
    else:
        expected, _ = R.segment(src, indptr, name)
        R.assert_reduction_close(gpu.cpu(), expected, src, indptr, name, what=f"cuda {name}")


@pytest.mark.skipif(DRY_RUN, reason="dry run: the binary's CUDA build is not what is being checked")
def test_build_info_reports_cuda():
    info = so.build_info()
    assert info["variant"] == "cuda" and info["cuda_version"] and info["cuda_archs"]


@settings(max_examples=min(40, settings.default.max_examples))
@given(case=R.csr_cases(), data=st.data())
def test_matches_cpu_and_reference(case, data):
    src, indptr = case["src"], case["indptr"]
    names = list(REDUCES) if src.dtype.is_floating_point else ["sum", "min", "max", "mul"]
    _compare_with_cpu(data.draw(st.sampled_from(names)), src, indptr)


@settings(max_examples=min(40, settings.default.max_examples))
@given(case=R.csr_cases(gather=True))
def test_gather_matches_cpu(case):
    src, indptr, size = case["src"], case["indptr"], case["size"]
    got = so.gather_csr(src.to(DEV), indptr.to(DEV), size=size)
    assert got.device.type == DEV
    R.assert_equal(got.cpu(), so.gather_csr(src, indptr, size=size), f"cuda gather {case['desc']}")


def _cut_indptr(rows: int, n_seg: int, g: torch.Generator, hub: bool = False) -> torch.Tensor:
    """n_seg segments with random cut points; hub: the first holds a quarter of the rows (the short-segment
    plan's long-segment pieces, FinishLongSegments)."""
    start = rows // 4 if hub else 0
    cuts = torch.randint(start, rows + 1, (n_seg - 1,), generator=g).sort().values
    head = [0, start] if hub else [0]
    return torch.cat([torch.tensor(head), cuts[: n_seg - len(head)], torch.tensor([rows])])


# The reduction plans (docs/cuda.md, TORCH_SEGOPS_CUDA_PLANS): each case forces the one it is for, and checks on
# a GPU that it ran. set_cuda_plans takes a set holding short or merge; "block" alone is spelt "block,merge".
PLAN_SPECS = {"short": "short", "merge": "merge", "block": "block,merge"}


@pytest.fixture
def force_plan():
    """force_plan(plan) restricts the CUDA reductions to `plan` until the test ends; returns a function that
    asserts (on a GPU) that every reduction since then ran on that plan."""
    previous = so.set_cuda_plans(None)

    def force(plan: str):
        so.set_cuda_plans(PLAN_SPECS[plan])
        before = so.cuda_plan_counts()

        def ran_only_on_plan():
            if DRY_RUN:
                return  # the CPU kernels have no plans
            after = so.cuda_plan_counts()
            grew = {k for k in after if after[k] > before[k]}
            assert grew == {plan}, f"forced plan {plan}, but the reductions ran on {sorted(grew)} ({before} -> {after})"

        return ran_only_on_plan

    yield force
    so.set_cuda_plans(previous)


def _scaled(rows: int, n_seg: int) -> tuple[int, int]:
    """The dry run (CPU device) checks the test code on shapes 100x smaller."""
    return (max(rows // 100, 40), max(n_seg // 100, 3)) if DRY_RUN else (rows, n_seg)


def _cpu_and_forced(name, src, indptr, plan, force_plan):
    """REDUCES[name] on the CPU and, forced onto `plan`, on DEV: (cpu, gpu); min/max's values and arg are compared
    here (exact), and (None, None) returned."""
    cpu = REDUCES[name](src, indptr)
    ran_only_on_plan = force_plan(plan)
    gpu = REDUCES[name](src.to(DEV), indptr.to(DEV))
    ran_only_on_plan()
    if isinstance(cpu, tuple):
        R.assert_equal(gpu[0].cpu(), cpu[0], f"{name} values")
        R.assert_equal(gpu[1].cpu(), cpu[1], f"{name} arg")
        return None, None
    return cpu, gpu


# (id, plan, rows, F, segments, hub): every plan with vector and scalar lanes, the F = 1 block kernel, the short
# plan's hub pieces (400k rows: 1563 pieces of 256 rows, two levels of piece states: 1563 -> 25; 1.1M rows:
# 4297 -> 68 -> 2, three levels), one-feature inputs on the plans TORCH_SEGOPS_CUDA_PLANS can force instead of
# the block kernel, and short-segment shapes forced onto the merge-path plan.
LARGE = [
    ("merge-F16", "merge", 300_000, 16, 3, False),
    ("merge-F300", "merge", 20_000, 300, 7, False),
    ("merge-F16-short-segments", "merge", 400_000, 16, 50_000, False),
    ("merge-F3-short-segments", "merge", 300_000, 3, 100_000, False),
    ("merge-F1", "merge", 500_000, 1, 5_000, False),
    ("block-F1", "block", 2_000_000, 1, 50_000, False),
    ("block-F1-short-segments", "block", 500_000, 1, 100_000, False),
    ("short-F16", "short", 400_000, 16, 50_000, False),
    ("short-F3", "short", 300_000, 3, 100_000, False),
    ("short-F16-hub-levels", "short", 400_000, 16, 50_000, True),
    ("short-F3-hub-levels", "short", 300_000, 3, 100_000, True),
    ("short-F4-hub-three-levels", "short", 1_100_000, 4, 130_000, True),
    ("short-F1", "short", 500_000, 1, 100_000, False),
    ("short-F16-long-segments", "short", 300_000, 16, 3, False),
]


@pytest.mark.parametrize("dtype", R.FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(REDUCES))
@pytest.mark.parametrize("case", LARGE, ids=[c[0] for c in LARGE])
def test_large_matches_cpu(case, name, dtype, force_plan):
    _, plan, rows, feat, n_seg, hub = case
    rows, n_seg = _scaled(rows, n_seg)
    g = torch.Generator().manual_seed(rows)
    src = torch.randn(rows, feat, generator=g).to(dtype)
    if name == "mul":
        src = R.near_one(src)
    indptr = _cut_indptr(rows, n_seg, g, hub)
    cpu, gpu = _cpu_and_forced(name, src, indptr, plan, force_plan)
    if cpu is None:
        return
    # Both sides accumulate in the compute dtype in different orders. The tolerance scales are computed
    # with the (separately tested) CPU ops in float64, as the loop reference is too slow for 50k segments.
    eps = torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps
    # rounding to a 16-bit dtype: up to an ulp apart, and a subnormal step apart below its smallest normal
    fi = torch.finfo(dtype)
    rounding = 2 * fi.eps * cpu.double().abs() + 2 * fi.eps * fi.smallest_normal if dtype in R.LOW_PRECISION else 0
    counts = (indptr[1:] - indptr[:-1]).double().unsqueeze(-1)
    if name == "softmax":
        longest = float(counts.max())
        tol = 8 * eps * (1 + longest ** 0.5) * (cpu.double().abs() + eps) + rounding
    elif name == "logsumexp":
        tol = 8 * eps * (1 + cpu.double().abs() + counts.sqrt()) + rounding
    elif name == "mul":  # n factors: n roundings on each side, in different orders
        tol = 2 * eps * (counts + 1) * cpu.double().abs() + rounding
    else:
        scale = so.segment_sum_csr(src.double().abs(), indptr)
        if name == "mean":
            scale = scale / counts.clamp(min=1)
        tol = 8 * eps * scale + rounding
    diff = (gpu.cpu().double() - cpu.double()).abs()
    assert bool((diff <= tol).all()), f"large {name} {dtype}: max excess {(diff - tol).max().item():.3g}"


def test_publish_only_plan_reports_bad_indptr():
    """Nothing to reduce (no features, or no segments): the validation and publish launches alone."""
    before = so.cuda_plan_counts()
    with pytest.raises(RuntimeError, match="indptr must be non-decreasing"):
        so.segment_sum_csr(torch.randn(6, 0, device=DEV), torch.tensor([0, 4, 2, 6], device=DEV))  # no features
        so.check_errors()
    empty = so.segment_max_csr(torch.randn(6, 3, device=DEV), torch.tensor([3], device=DEV))  # no segments
    assert empty[0].shape == (0, 3) and empty[1].shape == (0, 3)
    if not DRY_RUN:
        after = so.cuda_plan_counts()
        assert after["none"] >= before["none"] + 2 and {k for k in after if after[k] > before[k]} == {"none"}


def test_set_cuda_plans_rejects_bad_sets():
    previous = so.set_cuda_plans("merge")
    try:
        assert so.cuda_plans() == "merge" and so.build_info()["cuda_plans"] == "merge"
        for bad, match in [("block", "add short or merge"), ("merge,fast", "unknown CUDA reduction plan 'fast'")]:
            with pytest.raises(ValueError, match=match):
                so.set_cuda_plans(bad)
            assert so.cuda_plans() == "merge"  # unchanged
    finally:
        so.set_cuda_plans(previous)
    assert so.cuda_plans() == "short,merge,block"


@pytest.mark.parametrize("name", list(REDUCES))
def test_gradcheck_cuda(name):
    indptr = torch.tensor([[1, 3, 3, 7]], device=DEV)
    x = (torch.randperm(2 * 8 * 2, device=DEV).double() / 10).reshape(2, 8, 2).requires_grad_()
    fn = REDUCES[name]
    assert torch.autograd.gradcheck(lambda t: _values(fn(t, indptr)), (x,), eps=1e-6, atol=1e-8)


def test_gradcheck_gather_cuda():
    indptr = torch.tensor([[1, 3, 3, 7]], device=DEV)
    x = torch.randn(2, 3, 2, device=DEV, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: so.gather_csr(t, indptr), (x,), eps=1e-6, atol=1e-8)
    assert torch.autograd.gradcheck(lambda t: so.gather_csr(t, indptr, size=9), (x,), eps=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", ["sum", "mean", "max", "logsumexp", "softmax"])
def test_gradients_match_cpu(name):
    g = torch.Generator().manual_seed(2)
    src = torch.randn(5000, 8, generator=g)
    indptr = torch.tensor([0, 10, 10, 4000, 4990])
    grads = []
    for device in ("cpu", DEV):
        x = src.to(device).requires_grad_()
        out = REDUCES[name](x, indptr.to(device))
        out = out[0] if isinstance(out, tuple) else out
        w = torch.randn(out.shape, generator=g.manual_seed(3)).to(device)
        grads.append(torch.autograd.grad(out, x, w)[0].cpu())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduce,dtype", [pytest.param(r, d, id=f"{r}-{str(d)[6:]}")
                                          for d in (torch.float32, torch.bfloat16, torch.int64)
                                          for r in ("sum", "mean", "min", "max", "logsumexp", "mul")
                                          if d.is_floating_point or r in ("sum", "min", "max", "mul")])
def test_opcheck_cuda(reduce, dtype):
    src = torch.randn(2, 9, 3, device=DEV).to(dtype).requires_grad_(dtype.is_floating_point)
    indptr = torch.tensor([[1, 3, 3, 8]], device=DEV)
    torch.library.opcheck(getattr(_ops, f"segment_{reduce}").default, (src, indptr))


@pytest.mark.parametrize("size", [8, 11, -1])
def test_opcheck_gather_softmax_cuda(size):
    indptr = torch.tensor([[1, 3, 3, 8]], device=DEV)
    seg = torch.randn(2, 3, 3, device=DEV, requires_grad=True)
    torch.library.opcheck(_ops.gather_csr.default, (seg, indptr, size))
    x = torch.randn(2, 9, 3, device=DEV, requires_grad=True)
    torch.library.opcheck(_ops.segment_softmax.default, (x, indptr))
    y = _ops.segment_softmax(x.detach(), indptr)
    torch.library.opcheck(_ops.segment_softmax_backward.default, (torch.randn_like(y), y, indptr))


@pytest.mark.parametrize("name", ["sum", "max", "softmax", "gather"])
def test_compile_cuda(name):
    torch._dynamo.reset()
    src = torch.randn(100, 4, device=DEV)
    indptr = torch.tensor([0, 10, 10, 60, 99], device=DEV)
    if name == "gather":
        fn = lambda s, i: so.gather_csr(s[:4] * 2, i)  # noqa: E731
    else:
        fn = lambda s, i: _values(REDUCES[name](s * 2, i))  # noqa: E731
    compiled = torch.compile(fn, fullgraph=True)
    torch.testing.assert_close(compiled(src, indptr), fn(src, indptr))


@pytest.mark.parametrize("shape", [("merge", 2_000_000, 4, 1000), ("block", 2_000_000, 1, 250_000),
                                   ("short", 400_000, 16, 50_000), ("short", 400_000, 16, 50_000, True),
                                   ("merge", 2_000_000, 1, 250_000)],
                         ids=["merge-path", "block-F1", "short-segments", "short-segments-hub", "merge-path-F1"])
@pytest.mark.parametrize("name", ["sum", "mean", "max", "logsumexp", "softmax"])
def test_determinism_run_to_run(name, shape, force_plan):
    plan, rows, feat, n_seg, *hub = shape
    rows, n_seg = _scaled(rows, n_seg)
    g = torch.Generator().manual_seed(4)
    src = torch.randn(rows, feat, generator=g).to(DEV)
    indptr = _cut_indptr(rows, n_seg, g, bool(hub)).to(DEV)
    ran_only_on_plan = force_plan(plan)
    first = REDUCES[name](src, indptr)
    first = first if isinstance(first, tuple) else (first,)
    for _ in range(3):
        again = REDUCES[name](src, indptr)
        again = again if isinstance(again, tuple) else (again,)
        for a, b in zip(first, again):
            assert torch.equal(a, b), f"cuda {name}: results differ between runs"
    ran_only_on_plan()


@pytest.mark.parametrize("reduce", ["sum", "mean", "min", "max"])
def test_out_ops_write_in_place_cuda(reduce):
    """The mutating out= ops on the GPU: written in place, equal to the functional op, and opcheck."""
    src = torch.randn(2, 40, 3, device=DEV)
    indptr = torch.tensor([[0, 7, 7, 33, 40]], device=DEV)
    result = getattr(_ops, f"segment_{reduce}")(src, indptr)
    expected = result if isinstance(result, tuple) else (result,)
    outs = [torch.full_like(expected[0], float("nan"))] + [torch.full_like(a, -7) for a in expected[1:]]
    ptr = outs[0].data_ptr()
    op_out = getattr(_ops, f"segment_{reduce}_out")
    op_out(src, indptr, *outs)
    assert outs[0].data_ptr() == ptr
    assert all(torch.equal(o, e) for o, e in zip(outs, expected))
    torch.library.opcheck(op_out.default, (src, indptr, *outs))
    seg = torch.randn(2, 4, 3, device=DEV)
    gout = torch.full((2, 45, 3), float("nan"), device=DEV)
    _ops.gather_csr_out(seg, indptr, gout)
    assert torch.equal(gout, _ops.gather_csr(seg, indptr, 45))
    torch.library.opcheck(_ops.gather_csr_out.default, (seg, indptr, gout))


@pytest.mark.parametrize("plan", ["merge", "short"])
@pytest.mark.parametrize("reduce", ["sum", "max"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_misaligned_out(reduce, dtype, plan, force_plan):
    """A contiguous out= that starts 2 or 4 bytes past a 16-byte boundary (storage offset 1): the kernels must
    not take the vector path into it. The 16-bit dtypes are the regression tests of the GPU defect (sm_90
    stores a float32 result vector element by element, which a 4-byte offset does not trap; 16-bit results
    go out in 32-bit pieces, which a 2-byte offset does: cudaErrorMisalignedAddress, a poisoned context)."""
    src = torch.randn(4000, 16, device=DEV).to(dtype)
    indptr = torch.tensor([0, 3, 3, 1000, 2500, 4000] if plan == "merge" else list(range(0, 4001, 8)), device=DEV)
    force_plan(plan)
    n_seg = indptr.numel() - 1
    out = torch.empty(n_seg * 16 + 1, device=DEV, dtype=dtype)[1:].view(n_seg, 16)
    assert out.data_ptr() % 16 != 0
    assert so.segment_csr(src, indptr, out=out, reduce=reduce) is out
    so.check_errors()
    want = REDUCES[reduce](src.cpu(), indptr.cpu())
    want = want[0] if isinstance(want, tuple) else want
    torch.testing.assert_close(out.cpu().float(), want.float(), rtol=1e-2 if dtype == torch.bfloat16 else 1e-5, atol=1e-3)
    seg = torch.randn(n_seg, 16, device=DEV).to(dtype)
    gout = torch.empty(4000 * 16 + 1, device=DEV, dtype=dtype)[1:].view(4000, 16)
    so.gather_csr(seg, indptr, out=gout)
    R.assert_equal(gout.cpu(), so.gather_csr(seg.cpu(), indptr.cpu()), "gather into a misaligned out")


@needs_two_devices
def test_out_on_cuda():
    src = torch.randn(12, 3, device=DEV)
    indptr = torch.tensor([0, 5, 5, 12], device=DEV)
    out = torch.full((3, 3), float("nan"), device=DEV)
    assert so.segment_sum_csr(src, indptr, out=out) is out
    torch.testing.assert_close(out.cpu(), so.segment_sum_csr(src.cpu(), indptr.cpu()))
    with pytest.raises((TypeError, ValueError, RuntimeError), match="out"):
        so.segment_sum_csr(src, indptr, out=torch.zeros(3, 3))  # out on CPU, src on GPU


@needs_two_devices
def test_device_mismatch():
    ERRORS = (TypeError, ValueError, RuntimeError)
    src = torch.randn(6, 2, device=DEV)
    for fn in REDUCES.values():
        with pytest.raises(ERRORS, match="indptr"):
            fn(src, torch.tensor([0, 2, 6]))
        with pytest.raises(ERRORS, match="indptr"):
            fn(src.cpu(), torch.tensor([0, 2, 6], device=DEV))
    with pytest.raises(ERRORS, match="indptr"):
        so.gather_csr(torch.randn(2, 2, device=DEV), torch.tensor([0, 2, 6]))


BAD_INDPTR = {  # indptr -> what the message says (the CPU backend's words)
    (0, 4, 2, 6): r"indptr must be non-decreasing, got indptr\[2\] = 2 < indptr\[1\] = 4",
    (-1, 2, 6): r"indptr\[0\] = -1",
    (0, 2, 7): r"indptr\[2\] = 7",
}


@pytest.mark.parametrize("bad", list(BAD_INDPTR), ids=str)
def test_bad_indptr_cuda_reported_at_check_errors(bad):
    """Asynchronous validation: the call returns, check_errors() raises the CPU's message."""
    src = torch.randn(6, 2, device=DEV)
    with pytest.raises(RuntimeError, match=BAD_INDPTR[bad]):
        so.segment_sum_csr(src, torch.tensor(bad, device=DEV))
        so.check_errors()
    so.check_errors()  # reported once, then cleared


@pytest.mark.skipif(DRY_RUN, reason="dry run: the CPU raises in the call itself")
def test_bad_indptr_cuda_reported_by_next_call():
    src = torch.randn(6, 2, device=DEV)
    so.segment_max_csr(src, torch.tensor([0, 4, 2, 6], device=DEV))  # returns; output unspecified
    torch.cuda.synchronize()
    with pytest.raises(RuntimeError, match=r"non-decreasing.*earlier call of segment_csr"):
        so.segment_sum_csr(src, torch.tensor([0, 2, 6], device=DEV))
    good = so.segment_sum_csr(src, torch.tensor([0, 2, 6], device=DEV))  # the error was cleared
    R.assert_equal(good.cpu(), so.segment_sum_csr(src.cpu(), torch.tensor([0, 2, 6])), "after an error")


@pytest.mark.skipif(DRY_RUN, reason="dry run: the CPU raises in the call itself")
def test_bad_indptr_cuda_sync_checks_raise_in_the_call():
    code = (
        "import torch, torch_segops as so\n"
        "try:\n"
        "    so.segment_sum_csr(torch.randn(6, 2, device='cuda'), torch.tensor([0, 2, 7], device='cuda'))\n"
        "except RuntimeError as e:\n"
        "    print('raised:', e)\n"
    )
    env = dict(os.environ, TORCH_SEGOPS_CUDA_SYNC_CHECKS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "raised:" in out.stdout and "indptr[2] = 7" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("fn", ["sum", "max", "softmax", "gather"])
def test_bad_indptr_cuda_every_op(fn):
    src = torch.randn(6, 2, device=DEV)
    bad = torch.tensor([0, 4, 2, 6], device=DEV)
    call = REDUCES[fn] if fn != "gather" else lambda s, i: so.gather_csr(s[:3], i, size=6)
    with pytest.raises(RuntimeError, match="indptr must be non-decreasing"):
        call(src, bad)
        so.check_errors()


# ---- issue #37: +inf in logsumexp on every plan, the error protocol, the COO offsets --------------------------

def _infinity_case(rows: int, feat: int):
    """A rows-long segment holding +inf every 37 rows, a segment of -inf only, one of -inf among finite values,
    then 8-row segments (so that the short plan cuts the long one in pieces)."""
    g = torch.Generator().manual_seed(rows)
    lengths = [rows, 9, 9] + [8] * 250
    src = torch.randn(sum(lengths), feat, generator=g)
    src[torch.arange(5, rows, 37)] = float("inf")
    src[rows:rows + 9] = float("-inf")
    src[rows + 9:rows + 18:3] = float("-inf")
    return src, R.indptr_from_lengths(lengths)


@pytest.mark.parametrize("plan,rows,feat", [("block", 40, 1), ("block", 3000, 1), ("merge", 40, 16),
                                            ("merge", 3000, 16), ("short", 2000, 4)])
def test_logsumexp_with_infinity_every_plan(plan, rows, feat, force_plan):
    """Issue #37 item 1: the parts of a segment whose max is +inf are merged on every plan (block scan, carries,
    long-segment pieces), where exp(inf - inf) gave NaN; torch.logsumexp gives +inf."""
    src, indptr = _infinity_case(rows, feat)
    ran_only_on_plan = force_plan(plan)
    got = so.segment_logsumexp_csr(src.to(DEV), indptr.to(DEV)).cpu()
    ran_only_on_plan()
    expected, _ = R.segment(src, indptr, "logsumexp")
    assert torch.isposinf(got[0]).all() and torch.isneginf(got[1]).all() and torch.isfinite(got[2]).all(), got[:3]
    inf = ~torch.isfinite(expected)
    R.assert_equal(got[inf], expected[inf], f"logsumexp with infinities, {plan}: the infinite results")
    counts = (indptr[1:] - indptr[:-1]).double().unsqueeze(-1)
    tol = 8 * torch.finfo(torch.float32).eps * (1 + expected.double().abs() + counts.sqrt())
    diff = (got.double() - expected.double()).abs()
    assert bool((diff <= tol)[~inf].all()), f"logsumexp with infinities, {plan}: max |diff| {diff[~inf].max():.3g}"


def test_gather_ending_after_its_validation_reports_its_error_and_the_next():
    """Issue #37 item 2: gather_csr_out with an invalid indptr and an out= that the call then rejects. The GPU
    validated indptr before the out= check threw; the error must be published (reported at check_errors), not
    left in the error word, where it hid every later error at a larger position."""
    seg = torch.randn(4, 2, device=DEV)
    bad_out = torch.empty(2, 6, device=DEV).t()  # (6, 2), not contiguous
    with pytest.raises(RuntimeError, match="indptr" if DRY_RUN else "out must be contiguous"):
        _ops.gather_csr_out(seg, torch.tensor([0, 1, 5, 2, 6], device=DEV), bad_out)
    if not DRY_RUN:  # the CPU raised the indptr error in the call
        with pytest.raises(RuntimeError, match=r"indptr\[3\] = 2 < indptr\[2\] = 5.*earlier call of gather_csr"):
            so.check_errors()
    so.check_errors()  # reported once
    with pytest.raises(RuntimeError, match=r"indptr\[4\] = 1 < indptr\[3\] = 3"):
        _ops.gather_csr(seg, torch.tensor([0, 1, 2, 3, 1], device=DEV), 6)
        so.check_errors()


def test_tag_wrap_publishes_no_stale_error():
    """Issue #37 item 2: after a call that ended between its launches, 2^16 valid calls: the one whose tag equals
    the ended call's must not take what that call left in the error word for its own (a read of indptr[3] of a
    2-offset indptr, reported as an error of a valid call)."""
    seg = torch.randn(4, 2, device=DEV)
    bad_out = torch.empty(2, 6, device=DEV).t()
    with pytest.raises(RuntimeError):
        _ops.gather_csr_out(seg, torch.tensor([0, 1, 5, 2, 6], device=DEV), bad_out)
    try:
        so.check_errors()
    except RuntimeError:
        pass  # the error of the call that ended (its own report: the test above)
    one, good = seg[:1], torch.tensor([0, 2], device=DEV)
    for _ in range((1 << 16) + 16):  # each a call with the next tag (a few spare for calls outside this test)
        _ops.gather_csr(one, good, 2)
    so.check_errors()  # no error: every call was valid
    R.assert_equal(_ops.gather_csr(one, good, 2).cpu(), one.cpu().expand(2, 2), "gather after the tags wrapped")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=str)
def test_index_to_indptr_counts_an_unsorted_index(dtype):
    """Issue #37 item 3: check_sorted=False with an unsorted index gives the CPU's counts (threads wrote
    overlapping ranges of the offsets: [0, 4, 4, 4, 4, 4] or [0, 0, 0, 0, 4, 4] by thread order)."""
    index = torch.tensor([[3, 0, 2, 0], [1, 1, 0, 2]], dtype=dtype)
    got = _ops.index_to_indptr(index.to(DEV), 5, False).cpu()
    assert got.tolist() == [[0, 2, 2, 3, 4, 4], [0, 1, 3, 4, 4, 4]]
    R.assert_equal(got, _ops.index_to_indptr(index, 5, False), "unsorted index, CPU vs device")


def test_index_to_indptr_all_zero_index_large_dim_size():
    """Issue #37 item 3: the offsets after the last value (here all but the first) are written in parallel (one
    thread wrote each gap: 10^6 writes by one thread)."""
    size = 10_000 if DRY_RUN else 1_000_000
    got = _ops.index_to_indptr(torch.zeros(500, dtype=torch.long, device=DEV), size, True).cpu()
    assert got.shape == (size + 1,) and got[0] == 0 and bool((got[1:] == 500).all())


@pytest.mark.parametrize("index,size,check_sorted,message", [
    ([[0, 1, 2, 3], [-1, 0, 1, 2]], 4, True, r"index must be non-negative, got index\[\.\.\., 0\] = -1 \(row 1\)"),
    ([0, 3, 1, 9], 4, True, r"index must be sorted \(non-decreasing\) along its last dim, got index\[\.\.\., 2\] = 1"),
    ([0, 3, 1, 9], 4, False, r"index must be < dim_size = 4, got index\[\.\.\., 3\] = 9 \(row 0\)"),
    ([0, 3, 1, -9], -1, True, r"index must be sorted .*index\[\.\.\., 2\] = 1 < index\[\.\.\., 1\] = 3"),
    ([[0, 1], [2, -5]], -1, False, r"index must be non-negative, got index\[\.\.\., 1\] = -5 \(row 1\)"),
])
def test_index_to_indptr_errors_name_index_and_position(index, size, check_sorted, message):
    """Issue #37 item 3: an invalid index is reported with the CPU's message, naming index and the position (it
    surfaced as "segment_csr: indptr must start at a non-negative offset"); with size -1 in the call itself."""
    index = torch.tensor(index, device=DEV)
    with pytest.raises(RuntimeError, match=message):
        _ops.index_to_indptr(index, size, check_sorted)
        so.check_errors()
    so.check_errors()


def test_segment_coo_reports_an_invalid_index():
    src = torch.randn(4, 2, device=DEV)
    with pytest.raises((ValueError, RuntimeError), match=r"index must be non-negative, got index\[\.\.\., 0\] = -2"):
        so.segment_coo(src, torch.tensor([-2, 0, 1, 1], device=DEV), dim_size=3)
        so.check_errors()


@pytest.mark.skipif(DRY_RUN, reason="dry run: the CPU raises in the call itself")
def test_index_to_indptr_raises_a_pending_error():
    """Issue #37 item 3: index_to_indptr checks pending errors itself, like every CUDA op."""
    so.segment_sum_csr(torch.randn(6, 2, device=DEV), torch.tensor([0, 4, 2, 6], device=DEV))
    torch.cuda.synchronize()
    with pytest.raises(RuntimeError, match=r"non-decreasing.*earlier call of segment_csr"):
        _ops.index_to_indptr(torch.tensor([0, 1], device=DEV), 2, True)
    so.check_errors()


def _special_values_case(rows: int, feat: int, name: str):
    """A rows-long segment holding huge values of both signs, then 8-row segments each given one kind of special
    value at a few rows (none, +inf, -inf, NaN, +-1e30, +-1e-40, +inf and -inf, 1e30 with -inf), and an empty one.
    Products: factors near one with +inf, -inf, NaN and 0 (huge and tiny factors over- or underflow in some orders
    only)."""
    g = torch.Generator().manual_seed(rows * 31 + feat)
    lengths = [rows] + [8] * 250 + [0]
    src = torch.randn(sum(lengths), feat, generator=g)
    inf, nan = float("inf"), float("nan")
    if name == "mul":
        src = R.near_one(src)
        kinds = [[], [inf], [-inf], [nan], [0.0], [inf, 0.0], [-inf, 2.0], [inf, -inf]]
    else:
        kinds = [[], [inf], [-inf], [nan], [1e30, -1e30], [1e-40, -1e-40], [inf, -inf], [1e30, -inf]]
        src[torch.randint(rows, (6,), generator=g)] = torch.tensor([1e30, -1e30, 3e29, 1e30, -2e30, 1e-40]).unsqueeze(1)
    for i in range(250):
        start = rows + 8 * i
        for j, v in enumerate(kinds[i % len(kinds)]):
            src[start + (3 * j + i) % 8, (i + j) % feat] = v
    return src, R.indptr_from_lengths(lengths)


@pytest.mark.parametrize("plan,rows,feat", [("block", 3000, 1), ("merge", 3000, 16), ("short", 2000, 4)])
@pytest.mark.parametrize("name", [n for n in REDUCES if n != "softmax"])
def test_special_values_match_cpu(plan, rows, feat, name, force_plan):
    """Issue #37 item 4: +inf, -inf, NaN, huge and tiny values in every reduction on every plan, against the CPU
    kernels (the same rules for NaN and infinities; test_ops.py checks the CPU against the float64 reference):
    non-finite results equal, finite ones within the rounding of another order of the same operations."""
    src, indptr = _special_values_case(rows, feat, name)
    cpu, gpu = _cpu_and_forced(name, src, indptr, plan, force_plan)
    if cpu is None:
        return
    got, want = gpu.cpu().double(), cpu.double()
    finite = torch.isfinite(want)
    R.assert_equal(got[~finite], want[~finite], f"{name}, {plan}: the non-finite results")
    counts = (indptr[1:] - indptr[:-1]).double().unsqueeze(-1)
    eps = torch.finfo(torch.float32).eps
    if name == "mul":
        tol = 2 * eps * (counts + 1) * want.abs() + torch.finfo(torch.float32).tiny
    elif name == "logsumexp":
        tol = 8 * eps * (1 + want.abs() + counts.sqrt())
    else:
        scale = so.segment_sum_csr(torch.where(torch.isfinite(src), src, 0).double().abs(), indptr)
        tol = 8 * eps * (scale / counts.clamp(min=1) if name == "mean" else scale)
    diff = (got - want).abs()
    assert bool((diff <= tol)[finite].all()), f"{name}, {plan}: max excess {(diff - tol)[finite].max():.3g}"


# ---- the scatter ops (scatter_<name>, scatter_<name>_plan; issue #38) ------------------------------------------
# On CUDA they run the CSR kernels over torch's stable sort of the index, reading src's rows through it; their bits
# must be those of the route scatter took on CUDA before them: torch.sort(stable=True), src's rows gathered in that
# order, the CSR ops, the args mapped back (which the dry run checks of the CPU's scatter ops, with the same claim).

SCATTER_ROWS = [name for _, name, *_ in cpp_checks.registry_rows()]
# opt-in in the build for now (cmake -DTORCH_SEGOPS_CUDA_SCATTER=ON; tools/gpu_check.sh prebuild sets it)
_CUDA_SCATTER = torch._C._dispatch_has_kernel_for_dispatch_key("torch_segops::scatter_sum", "CUDA")
needs_cuda_scatter = pytest.mark.skipif(
    not DRY_RUN and not _CUDA_SCATTER,
    reason="this torch_segops build has no CUDA scatter kernels (built without -DTORCH_SEGOPS_CUDA_SCATTER=ON)")


def _csr_route(name, src, index, size):
    """(values, arg or None) of the route scatter took on CUDA before its ops, for a [B, N] index of src [B, N, F]."""
    n = src.size(1)
    order = torch.sort(index, dim=-1, stable=True)[1]
    rows = src.gather(1, order.unsqueeze(-1).expand(src.shape))
    res = getattr(_ops, f"segment_{name}")(rows, _ops.index_to_indptr(index, size, False))
    if not isinstance(res, tuple):
        return res, None
    values, arg = res
    picked = order.unsqueeze(-1).expand(src.shape).gather(1, arg.clamp(max=n - 1))
    return values, torch.where(arg == n, arg, picked)


def _scatter_case(name, n, size, feat, batch, kind, index_dtype, specials, seed):
    g = torch.Generator().manual_seed(seed)
    src = torch.randn(batch, n, feat, generator=g)
    if name == "mul":
        src = R.near_one(src)
    if specials and n > 0:
        # (products: no huge factors, whose overflow depends on the order)
        vals = torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0] + ([] if name == "mul" else [1e30, -1e30, 1e-40]))
        at = torch.randint(src.numel(), (max(1, src.numel() // 50),), generator=g)
        src.view(-1)[at] = vals[torch.randint(len(vals), at.shape, generator=g)]
    index = torch.randint(max(size, 1), (batch, n), generator=g)
    if kind == "sorted":
        index = index.sort(dim=-1).values
    elif kind == "one-target":
        index = torch.full((batch, n), size - 1)
    return src, index.to(index_dtype)


def _assert_bits(got, want, what):
    if isinstance(got, tuple):
        R.assert_equal(got[0].cpu(), want[0].cpu(), f"{what} values")
        R.assert_equal(got[1].cpu(), want[1].cpu(), f"{what} arg")
    else:
        R.assert_equal(got.cpu(), want.cpu(), what)


# (id, plan, N, S, F, batch): every reduction plan on the shapes a scatter takes (F = 1: the block kernel)
SCATTER_CASES = [
    ("block-F1", "block", 400_000, 30_000, 1, 1),
    ("merge-F16", "merge", 100_000, 5_000, 16, 1),
    ("merge-F3-batched", "merge", 30_000, 2_000, 3, 2),
    ("short-F8", "short", 100_000, 20_000, 8, 1),
    ("short-F1", "short", 100_000, 20_000, 1, 1),
]


@needs_cuda_scatter
@pytest.mark.parametrize("kind,index_dtype", [("shuffled", torch.int64), ("shuffled", torch.int32),
                                              ("sorted", torch.int64), ("one-target", torch.int32)], ids=str)
@pytest.mark.parametrize("name", SCATTER_ROWS)
@pytest.mark.parametrize("case", SCATTER_CASES, ids=[c[0] for c in SCATTER_CASES])
def test_scatter_ops_bits_of_the_sorted_csr_route(case, name, kind, index_dtype, force_plan):
    """The scatter ops (index, sorted index, plan) on DEV give the bits of the CSR route on DEV (the route of CUDA
    before them), under every plan; and agree with the CPU's ops within the rounding of another order."""
    _, plan, n, size, feat, batch = case
    n, size = _scaled(n, size)
    specials = kind == "shuffled" and index_dtype == torch.int64
    src, index = _scatter_case(name, n, size, feat, batch, kind, index_dtype, specials, n + feat)
    s, i = src.to(DEV), index.to(DEV)
    op, plan_op = getattr(_ops, f"scatter_{name}"), getattr(_ops, f"scatter_{name}_plan")
    want = _csr_route(name, s, i, size)
    want = want if want[1] is not None else want[0]
    ran_only_on_plan = force_plan(plan)
    got = op(s, i, size, False)
    perm = torch.sort(i, dim=-1, stable=True)[1]
    along_plan = plan_op(s, perm, _ops.index_to_indptr(i, size, False))
    by_sorted = op(s, i, size, True) if kind != "shuffled" else got
    ran_only_on_plan()
    # The CPU folds one feature in row order (docs/design.md, "scatter on the CPU"): other bits than the CSR route's
    # there, except for min/max and sorted=True; the dry run then checks those within rounding, below.
    row_order = s.device.type == "cpu" and feat == 1 and not isinstance(got, tuple)
    if not row_order:
        _assert_bits(got, want, f"scatter_{name} {kind}")
        _assert_bits(along_plan, want, f"scatter_{name}_plan {kind}")
    if not (row_order and kind == "shuffled"):
        _assert_bits(by_sorted, want, f"scatter_{name} sorted=True {kind}")
    cpu = op(src, index, size, False)
    if isinstance(cpu, tuple):  # min/max: exact, ties to the first position
        _assert_bits(got, cpu, f"scatter_{name} against the CPU")
        return
    got, cpu = got.cpu().double(), cpu.double()
    finite = torch.isfinite(cpu)
    R.assert_equal(got[~finite], cpu[~finite], f"scatter_{name}: the non-finite results")
    eps = torch.finfo(torch.float32).eps
    counts = torch.zeros(batch, size + 1, dtype=torch.float64).scatter_add_(1, index.long(), torch.ones(index.shape, dtype=torch.float64))[:, :size].unsqueeze(-1)
    mag = torch.zeros(batch, size, feat, dtype=torch.float64).scatter_add_(
        1, index.long().unsqueeze(-1).expand(src.shape), torch.where(torch.isfinite(src), src, 0).double().abs())
    tol = {"sum": 8 * eps * mag, "mean": 8 * eps * mag / counts.clamp(min=1), "mul": 2 * eps * (counts + 1) * cpu.abs() + 1e-38,
           "logsumexp": 8 * eps * (1 + cpu.abs() + counts.sqrt())}.get(name)
    assert tol is not None, f"no tolerance for the registry row {name}: add it"
    diff = (got - cpu).abs()
    assert bool((diff <= tol)[finite].all()), f"scatter_{name}: max excess {(diff - tol)[finite].max():.3g}"


@needs_cuda_scatter
@pytest.mark.parametrize("name", ["sum", "max"])
@pytest.mark.parametrize("n,size,feat", [(0, 5, 3), (7, 0, 3), (0, 0, 1), (6, 4, 0), (1, 1, 1)])
def test_scatter_ops_empty_shapes(name, n, size, feat):
    """N == 0, S == 0 (only with N == 0: any index value is out of range then) and F == 0: the CPU's outputs."""
    src = torch.randn(n, feat)
    index = torch.zeros(n, dtype=torch.long)
    op = getattr(_ops, f"scatter_{name}")
    if size == 0 and n > 0:
        with pytest.raises(RuntimeError, match=r"index must be < dim_size = 0"):
            op(src.to(DEV), index.to(DEV), size, False)
        return
    _assert_bits(op(src.to(DEV), index.to(DEV), size, False), op(src, index, size, False), f"{name} n={n} S={size}")
    _assert_bits(op(src.to(DEV), index.to(DEV), -1, False), op(src, index, -1, False), f"{name} n={n} size -1")


@needs_cuda_scatter
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("index,size,sorted_", [
    ([5, 0, 1, 2], 5, False), ([0, 1, 2, 5], 5, False), ([-1, 0, 1, 2], 5, False), ([0, 1, 2, -3], -1, False),
    ([[0, 1, 2, 3], [0, 1, 2, 9]], 4, False), ([0, 2, 1, 3], 4, True), ([3, 1, 9, -1], 4, True),
])
def test_scatter_ops_bad_index_raises_the_cpus_message(index, size, sorted_, index_dtype):
    """A bad index (out of range at the first or the last entry, negative, unsorted when sorted) raises in the
    call, with the CPU's message, word for word."""
    index = torch.tensor(index, dtype=index_dtype)
    src = torch.randn(*index.shape, 3)
    with pytest.raises(RuntimeError) as cpu:
        _ops.scatter_sum(src, index, size, sorted_)
    with pytest.raises(RuntimeError) as dev:
        _ops.scatter_sum(src.to(DEV), index.to(DEV), size, sorted_)
    assert str(dev.value) == str(cpu.value)
    so.check_errors()


@needs_cuda_scatter
def test_scatter_plan_ops_bad_plan_raise():
    src, ok = torch.randn(4, 2, device=DEV), torch.tensor([0, 1, 2, 3], device=DEV)
    with pytest.raises(RuntimeError, match=r"plan.indptr must hold non-decreasing offsets in \[0, src.size\(dim\) = 4\]"):
        _ops.scatter_sum_plan(src, ok, torch.tensor([0, 3, 2, 4], device=DEV))
    with pytest.raises(RuntimeError, match=r"plan.perm must hold positions in \[0, src.size\(dim\) = 4\)"):
        _ops.scatter_max_plan(src, torch.tensor([0, 4, 2, 3], device=DEV), torch.tensor([0, 2, 4], device=DEV))


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_scatter_public_api_on_device(reduce):
    """torch_segops.scatter on DEV (the ops above through the Python dispatch), with out= and gradients, against
    the CPU; run to run the same bits."""
    g = torch.Generator().manual_seed(5)
    src = torch.randn(3000, 8, generator=g)
    index = torch.randint(200, (3000,), generator=g)
    s = src.to(DEV, copy=True).requires_grad_()
    got = so.scatter(s, index.to(DEV), 0, dim_size=200, reduce=reduce)
    again = so.scatter(src.to(DEV), index.to(DEV), 0, dim_size=200, reduce=reduce)
    R.assert_equal(got.detach().cpu(), again.cpu(), f"scatter {reduce} run to run")
    want = so.scatter(src, index, 0, dim_size=200, reduce=reduce)
    assert torch.allclose(got.detach().cpu(), want, rtol=1e-5, atol=1e-5)
    got.sum().backward()
    sc = src.clone().requires_grad_()
    so.scatter(sc, index, 0, dim_size=200, reduce=reduce).sum().backward()
    assert torch.allclose(s.grad.cpu(), sc.grad, rtol=1e-5, atol=1e-6)
    out = torch.ones(200, 8, device=DEV)
    so.scatter(src.to(DEV), index.to(DEV), 0, out=out, reduce=reduce)
    assert torch.allclose(out.cpu(), so.scatter(src, index, 0, out=torch.ones(200, 8), reduce=reduce), rtol=1e-5, atol=1e-5)
