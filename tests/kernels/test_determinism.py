"""Bitwise determinism on CPU: the same result run to run and with 1 vs 2 threads.

The inputs are large enough to be split into many chunks (docs/design.md: chunk partials are
combined in chunk order): a few huge segments spanning many chunks, and many small segments.
"""

from __future__ import annotations

import pytest
import torch

import reference as R
import torch_segops as so

_INT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
             torch.float64: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bit pattern (distinguishes -0.0 from 0.0 and compares NaN payloads)."""
    t = t.detach().contiguous()
    return t.view(_INT_VIEW[t.dtype]) if t.dtype in _INT_VIEW else t


@pytest.fixture(scope="module")
def inputs():
    g = torch.Generator().manual_seed(7)
    few_huge = torch.randn(300_000, 16, generator=g)
    few_huge_indptr = torch.tensor([0, 100_003, 100_003, 299_999])  # 3 segments (one empty), last row ignored
    many_small = torch.randn(2_000_000, 1, generator=g)
    cuts = torch.randint(0, 2_000_001, (50_000 - 1,), generator=g).sort().values
    many_small_indptr = torch.cat([torch.tensor([0]), cuts, torch.tensor([2_000_000])])
    return {
        "300k_x16_3seg": (few_huge, few_huge_indptr),
        "2M_x1_50kseg": (many_small, many_small_indptr),
    }


def _run(fn, threads):
    torch.set_num_threads(threads)
    results = fn()
    return [bits(r) for r in (results if isinstance(results, (tuple, list)) else (results,))]


def _assert_deterministic(fn, what):
    first = _run(fn, 1)
    for threads in (1, 2, 2):
        again = _run(fn, threads)
        for a, b in zip(first, again):
            assert a.shape == b.shape
            assert torch.equal(a, b), f"{what}: 1 thread vs {threads} threads differ bitwise"


OPS = {
    "sum": lambda s, i: so.segment_sum_csr(s, i),
    "mean": lambda s, i: so.segment_mean_csr(s, i),
    "min": lambda s, i: so.segment_min_csr(s, i),
    "max": lambda s, i: so.segment_max_csr(s, i),
    "logsumexp": lambda s, i: so.segment_logsumexp_csr(s, i),
    "softmax": lambda s, i: so.segment_softmax_csr(s, i),
}


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("shape", ["300k_x16_3seg", "2M_x1_50kseg"])
def test_forward_bitwise_1_vs_2_threads(inputs, shape, name):
    src, indptr = inputs[shape]
    _assert_deterministic(lambda: OPS[name](src, indptr), f"{name} {shape}")


@pytest.mark.parametrize("shape", ["300k_x16_3seg", "2M_x1_50kseg"])
def test_mul_forward_and_backward_bitwise(inputs, shape):
    src, indptr = inputs[shape]
    src = R.near_one(src)  # products of 100k factors that neither overflow nor vanish
    mul = lambda x: so.segment_csr(x, indptr, reduce="mul")  # noqa: E731
    _assert_deterministic(lambda: mul(src), f"mul {shape}")

    def grad():
        x = src.detach().requires_grad_()
        out = mul(x)
        (gx,) = torch.autograd.grad(out, x, torch.randn(out.shape, generator=torch.Generator().manual_seed(1)))
        return gx

    _assert_deterministic(grad, f"grad mul {shape}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64], ids=str)
def test_forward_bitwise_other_dtypes(inputs, dtype):
    src, indptr = inputs["300k_x16_3seg"]
    src = src.to(dtype)
    _assert_deterministic(lambda: (so.segment_sum_csr(src, indptr), so.segment_mean_csr(src, indptr)), f"sum/mean {dtype}")


@pytest.mark.parametrize("shape", ["300k_x16_3seg", "2M_x1_50kseg"])
def test_gather_bitwise(inputs, shape):
    src, indptr = inputs[shape]
    seg = src[: indptr.numel() - 1].contiguous()
    _assert_deterministic(lambda: so.gather_csr(seg, indptr), f"gather {shape}")


@pytest.mark.parametrize("name", ["sum", "mean", "max", "logsumexp", "softmax"])
@pytest.mark.parametrize("shape", ["300k_x16_3seg", "2M_x1_50kseg"])
def test_backward_bitwise(inputs, shape, name):
    src, indptr = inputs[shape]
    g = torch.Generator().manual_seed(1)

    def grad():
        x = src.detach().requires_grad_()
        out = OPS[name](x, indptr)
        out = out[0] if isinstance(out, tuple) else out
        w = torch.randn(out.shape, generator=g.manual_seed(1))
        (gx,) = torch.autograd.grad(out, x, w)
        return gx

    _assert_deterministic(grad, f"grad {name} {shape}")


def test_gather_backward_bitwise(inputs):
    # gather's backward is a segment sum over huge segments
    src, indptr = inputs["300k_x16_3seg"]
    seg = src[:3].contiguous()
    w = src.detach()

    def grad():
        x = seg.detach().requires_grad_()
        (gx,) = torch.autograd.grad(so.gather_csr(x, indptr, size=src.size(0)), x, w)
        return gx

    _assert_deterministic(grad, "gather backward")


def test_large_results_are_also_correct(inputs):
    """Determinism alone would accept a wrong answer: check the huge-segment sums against float64."""
    src, indptr = inputs["300k_x16_3seg"]
    expected, _ = R.segment(src.double(), indptr, "sum")
    scale, _ = R.segment(src.double().abs(), indptr, "sum")
    diff = (so.segment_sum_csr(src, indptr).double() - expected).abs()
    assert bool((diff <= 8 * torch.finfo(torch.float32).eps * scale).all()), diff.max()


def test_concurrent_calls_from_several_threads():
    """Calls from several Python threads at once (each thread keeps its own scratch memory for partial
    states between calls) give bitwise the results of the same calls made one after another."""
    import concurrent.futures

    g = torch.Generator().manual_seed(11)
    jobs = []
    for i in range(8):
        rows = 20_000 + 3_000 * i
        cuts = torch.randint(0, rows + 1, (300 + 50 * i,), generator=g).sort().values
        indptr = torch.cat([torch.zeros(1, dtype=torch.long), cuts, torch.tensor([rows])])
        src = torch.randn(rows, 1 + 7 * (i % 3), generator=g)
        jobs.append((src, indptr, ("sum", "max", "mean", "min")[i % 4]))
    call = lambda job: so.segment_csr(job[0], job[1], reduce=job[2])  # noqa: E731
    serial = [call(job) for job in jobs]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for _ in range(3):
            for got, want in zip(pool.map(call, jobs), serial):
                assert torch.equal(got, want)


# ---- torch.use_deterministic_algorithms(True) ------------------------------------------------------
# Every public op and its backward run in deterministic mode (no "does not have a deterministic
# implementation" error, also from the backward formulas' torch ops), give the reference's results,
# and repeat bitwise. Deterministic mode also fills new empty tensors with NaN / the largest integer
# (torch.utils.deterministic.fill_uninitialized_memory): results must not depend on an empty
# tensor's contents.


@pytest.fixture
def deterministic_mode():
    before, warn_only = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_only)


def _deterministic_case(batch: bool):
    g = torch.Generator().manual_seed(3)
    if batch:
        src = torch.randn(3, 500, 5, generator=g, dtype=torch.float64)
        indptr = torch.tensor([[0, 0, 120, 121, 400, 400, 499]])  # empty segments, last row ignored
    else:
        src = torch.randn(4000, 7, generator=g, dtype=torch.float64)
        cuts = torch.randint(0, 4001, (299,), generator=g).sort().values
        indptr = torch.cat([torch.tensor([0]), cuts, torch.tensor([4000])])
    return src, indptr


def _reference_of(name, src, indptr):
    if name == "softmax":
        return R.segment_softmax(src, indptr)
    value, arg = R.segment(src, indptr, name)
    return (value, arg) if name in ("min", "max") else value


@pytest.mark.parametrize("batch", [False, True], ids=["1d_indptr", "broadcast_indptr"])
@pytest.mark.parametrize("name", list(OPS))
def test_deterministic_mode_forward_backward(deterministic_mode, name, batch):
    src, indptr = _deterministic_case(batch)
    assert torch.are_deterministic_algorithms_enabled()

    def run():
        x = src.clone().requires_grad_()
        out = OPS[name](x, indptr)
        values = out[0] if isinstance(out, tuple) else out
        w = torch.randn(values.shape, generator=torch.Generator().manual_seed(2), dtype=values.dtype)
        (gx,) = torch.autograd.grad((values * w).sum(), x)
        return [*(out if isinstance(out, tuple) else (out,)), gx]

    first = run()
    expected = _reference_of(name, src, indptr)
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    for got, want in zip(first, expected):
        torch.testing.assert_close(got.detach(), want, rtol=1e-10, atol=1e-12)
    x = src.clone().requires_grad_()
    ref_out = _reference_of(name, x, indptr)
    ref_values = ref_out[0] if isinstance(ref_out, tuple) else ref_out
    w = torch.randn(ref_values.shape, generator=torch.Generator().manual_seed(2), dtype=ref_values.dtype)
    (ref_grad,) = torch.autograd.grad((ref_values * w).sum(), x)
    torch.testing.assert_close(first[-1], ref_grad, rtol=1e-10, atol=1e-12)
    for again in (run(), run()):
        for a, b in zip(first, again):
            assert torch.equal(bits(a), bits(b)), f"{name}: deterministic mode, two runs differ bitwise"


def test_deterministic_mode_gather_and_out(deterministic_mode):
    src, indptr = _deterministic_case(batch=False)
    seg = torch.randn(indptr.numel() - 1, 7, dtype=torch.float64, requires_grad=True)
    out = so.gather_csr(seg, indptr, size=src.size(0))
    torch.testing.assert_close(out.detach(), R.gather(seg.detach(), indptr, src.size(0)))
    (g,) = torch.autograd.grad((out * src).sum(), seg)
    torch.testing.assert_close(g, R.segment(src, indptr, "sum")[0])
    # out= written in place by the kernel (no grad): a NaN-filled empty out must be fully overwritten
    buf = torch.empty(indptr.numel() - 1, 7, dtype=torch.float64)
    values, arg = so.segment_max_csr(src, indptr, out=buf)
    assert values is buf
    want_values, want_arg = R.segment(src, indptr, "max")
    torch.testing.assert_close(values, want_values)
    assert torch.equal(arg, want_arg)
    dest = torch.empty_like(src)
    assert so.gather_csr(seg.detach(), indptr, out=dest) is dest
    torch.testing.assert_close(dest, R.gather(seg.detach(), indptr, src.size(0)))
