"""Gradients w.r.t. src of every floating op: torch.autograd.gradcheck in float64 on small inputs,
and comparison with autograd through the plain-PyTorch reference on random segmentations."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import reference as R
import torch_segops as so

# Small inputs with everything that matters for gradients: empty segments (first, middle, last), rows
# before indptr[0] and after indptr[-1] (zero gradient), features, leading batch dims with a
# broadcast (size-1) or a per-batch indptr.
GRAD_CASES = {
    "1d": ((9,), torch.tensor([1, 3, 3, 7])),
    "features": ((8, 3), torch.tensor([0, 0, 2, 5, 5, 7])),
    "broadcast_batch": ((2, 7, 2), torch.tensor([[1, 2, 2, 6]])),
    "per_batch": ((2, 6, 2), torch.tensor([[0, 3, 3, 6], [2, 2, 4, 5]])),
    "all_empty": ((4, 2), torch.tensor([1, 1, 1])),
}


def _segment_fn(reduce):
    def fn(x, indptr):
        return so.segment_csr(x, indptr, reduce=reduce)

    return fn


FUNCS = {
    "sum": _segment_fn("sum"),
    "mean": _segment_fn("mean"),
    "min": _segment_fn("min"),
    "max": _segment_fn("max"),
    "mul": _segment_fn("mul"),
    "min_named": lambda x, ip: so.segment_min_csr(x, ip)[0],
    "max_named": lambda x, ip: so.segment_max_csr(x, ip)[0],
    "logsumexp": so.segment_logsumexp_csr,
    "softmax": so.segment_softmax_csr,
}


def _reference(name, x, indptr):
    if name == "softmax":
        return R.segment_softmax(x, indptr)
    reduce = name.replace("_named", "")
    return R.segment(x, indptr, reduce)[0]


@pytest.mark.parametrize("case", list(GRAD_CASES))
@pytest.mark.parametrize("name", list(FUNCS))
def test_gradcheck(name, case):
    shape, indptr = GRAD_CASES[case]
    x = R.distinct_values(shape).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: FUNCS[name](t, indptr), (x,), eps=1e-6, atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("case", ["1d", "features", "broadcast_batch", "per_batch"])
@pytest.mark.parametrize("size", [None, "exact", "larger"])
def test_gradcheck_gather(case, size):
    shape, indptr = GRAD_CASES[case]
    dim = indptr.dim() - 1
    shape = list(shape)
    shape[dim] = indptr.size(-1) - 1
    n = int(indptr[..., -1].max())
    size = {None: None, "exact": n, "larger": n + 2}[size]
    x = R.distinct_values(shape).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: so.gather_csr(t, indptr, size=size), (x,), eps=1e-6, atol=1e-8)


@pytest.mark.parametrize("case", ["features", "per_batch"])
def test_gradgradcheck_softmax(case):
    shape, indptr = GRAD_CASES[case]
    x = R.distinct_values(shape).div(10).requires_grad_()
    # fast_mode: checks random projections of the second-order Jacobian (the full one takes ~10 s)
    assert torch.autograd.gradgradcheck(lambda t: so.segment_softmax_csr(t, indptr), (x,), eps=1e-6, atol=1e-7,
                                        fast_mode=True)


@pytest.mark.parametrize("name", list(FUNCS))
def test_rows_outside_segments_get_zero_gradient(name):
    x = R.distinct_values((10, 2)).requires_grad_()
    indptr = torch.tensor([3, 5, 5, 8])
    FUNCS[name](x, indptr).mul(torch.randn(FUNCS[name](x, indptr).shape, dtype=torch.float64)).sum().backward()
    assert x.grad is not None
    assert bool((x.grad[:3] == 0).all()) and bool((x.grad[8:] == 0).all())


@pytest.mark.parametrize("features", [1, 2])
def test_mul_gradient_through_zeros(features):
    """Segments with no, one, two and three zeros (and an empty one): the gradient is the product of the
    other entries, exactly (not prod / x), and differentiable again."""
    x = torch.tensor([1.5, -2.0, 0.0, 3.0, 0.0, 0.5, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, -1.5], dtype=torch.float64)
    x = torch.stack([x, x.roll(3)], 1)[:, :features].contiguous().requires_grad_()
    indptr = torch.tensor([0, 2, 4, 4, 9, 13])
    fn = lambda t: so.segment_csr(t, indptr, reduce="mul")  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x,), eps=1e-6, atol=1e-8)
    assert torch.autograd.gradgradcheck(fn, (x,), eps=1e-6, atol=1e-8)
    # the first derivative against autograd through torch.prod (which handles zeros)
    grad_out = torch.randn(5, features, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    (got,) = torch.autograd.grad(fn(x), x, grad_out)
    torch.testing.assert_close(got, _ref_grad("mul", x, indptr, grad_out), rtol=1e-12, atol=0)


@pytest.mark.parametrize("reduce", ["min", "max"])
def test_min_max_gradient_goes_to_first_tied_position_only(reduce):
    x = torch.tensor([[1.0], [4.0], [4.0], [1.0], [2.0]], dtype=torch.float64, requires_grad=True)
    indptr = torch.tensor([0, 4, 4, 5])
    values, arg = (so.segment_min_csr if reduce == "min" else so.segment_max_csr)(x, indptr)
    values.backward(torch.tensor([[10.0], [20.0], [30.0]], dtype=torch.float64))
    first = 0 if reduce == "min" else 1
    expected = torch.zeros(5, 1, dtype=torch.float64)
    expected[first] = 10.0
    expected[4] = 30.0  # the empty segment (grad 20) contributes nothing
    assert torch.equal(x.grad, expected)


def _ref_grad(name, x, indptr, grad_out):
    xr = x.detach().clone().requires_grad_()
    out = _reference(name, xr, indptr)
    if not out.requires_grad:  # output independent of x (e.g. all segments empty)
        return torch.zeros_like(x)
    (g,) = torch.autograd.grad(out, xr, grad_out, allow_unused=True, materialize_grads=True)
    return g


@settings(max_examples=40)
@given(case=R.csr_cases(dtypes=(torch.float32, torch.float64), ties=False), name=st.sampled_from(list(FUNCS)))
def test_gradient_matches_reference(case, name):
    src, indptr = case["src"], case["indptr"]
    rtol = None
    if name == "mul":  # factors near 1; the products of n factors round n times, in different orders
        src = R.near_one(src)
        lengths = indptr[..., 1:] - indptr[..., :-1]
        rtol = 4 * (int(lengths.max()) if lengths.numel() else 0) * torch.finfo(src.dtype).eps or None
    x = src.detach().clone().requires_grad_()
    out = FUNCS[name](x, indptr)
    grad_out = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(case["seed"]))
    (g,) = torch.autograd.grad(out, x, grad_out, allow_unused=True, materialize_grads=True)
    R.assert_grad_close(g, _ref_grad(name, src, indptr, grad_out), f"grad {name} {case['desc']}",
                        rtol=None if rtol is None else max(rtol, 16 * torch.finfo(src.dtype).eps))


@settings(max_examples=30)
@given(case=R.csr_cases(dtypes=(torch.float32, torch.float64), gather=True, ties=False))
def test_gather_gradient_matches_reference(case):
    src, indptr, size = case["src"], case["indptr"], case["size"]
    x = src.detach().clone().requires_grad_()
    out = so.gather_csr(x, indptr, size=size)
    grad_out = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(case["seed"]))
    (g,) = torch.autograd.grad(out, x, grad_out, allow_unused=True, materialize_grads=True)
    xr = src.detach().clone().requires_grad_()
    ref = R.gather(xr, indptr, size)
    if ref.requires_grad:
        (expected,) = torch.autograd.grad(ref, xr, grad_out, retain_graph=True)
        # gather's gradient is a segment sum of grad_out, so the summation-order tolerance scales with
        # the same segment sum of |grad_out| (the reference's gradient for cotangent |grad_out|)
        (scale,) = torch.autograd.grad(ref, xr, grad_out.abs())
    else:  # no output row depends on src (all segments empty)
        expected = scale = torch.zeros_like(src)
    R.assert_sum_close(g, expected, scale, f"gather grad {case['desc']}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["sum", "mean", "max", "logsumexp", "softmax", "gather"])
def test_low_precision_backward(name, dtype):
    g = torch.Generator().manual_seed(5)
    indptr = torch.tensor([0, 3, 3, 40, 41])
    src32 = torch.randn(4 if name == "gather" else 45, 8, generator=g)
    x = src32.to(dtype).requires_grad_()
    fn = (lambda t: so.gather_csr(t, indptr)) if name == "gather" else (lambda t: FUNCS[name](t, indptr))
    out = fn(x)
    assert out.dtype == dtype
    grad_out = torch.randn(out.shape, generator=g).to(dtype)
    (got,) = torch.autograd.grad(out, x, grad_out)
    assert got.dtype == dtype
    # reference: the same computation in float32 from the same (rounded) inputs
    xr = x.detach().float().requires_grad_()
    ref = R.gather(xr, indptr) if name == "gather" else _reference(name, xr, indptr)
    (expected,) = torch.autograd.grad(ref, xr, grad_out.float())
    eps = torch.finfo(dtype).eps
    # each gradient element passes through a few roundings to `dtype` (output, intermediate, result)
    R.assert_grad_close(got.float(), expected, f"{name} {dtype} backward", rtol=4 * eps, atol=4 * eps)
