"""scatter_logsumexp / scatter_softmax / scatter_log_softmax / scatter_std (pytorch_scatter's composite functions)
against a plain-PyTorch reference that loops over the targets (torch.logsumexp, torch.softmax, torch.std of each
target's entries), pytorch_scatter's documented and observed semantics (empty targets, out=, eps, the 1e-6 of
its std; written here from its documentation and tests, not copied), gradients, TorchScript, torch.compile,
determinism across thread counts, and errors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import differential as D
import reference as R
import torch_segops as so

FLOATS = (torch.float32, torch.float64)


def _rows(src, index, dim):
    """src and index (pytorch_scatter's broadcast, reference.broadcast_index) with dim moved last and the other
    dims flattened: [P, N] each."""
    d = dim % src.dim()
    index = R.broadcast_index(index, src, dim)
    n = src.size(d)
    return src.movedim(d, -1).reshape(-1, n), index.movedim(d, -1).reshape(-1, n)


def reference(name, src, index, dim, size, eps=1e-12, unbiased=True):
    """Per target, in float64: log(sum(exp(x - m)) + eps) + m, softmax, x - m - log(sum(exp(x - m)) + eps), or
    sqrt(sum((x - mean)^2) / (max(n - 1, 1) + 1e-6)); 0 for a target without entries."""
    d = dim % src.dim()
    s, i = _rows(src.double(), index, dim)
    per_target = name in ("logsumexp", "std")
    out = torch.zeros(s.size(0), size if per_target else s.size(1), dtype=torch.float64)
    for p in range(s.size(0)):
        for t in range(size):
            mask = i[p] == t
            vals = s[p][mask]
            if vals.numel() == 0:
                continue
            m = vals.max()
            lse = (torch.exp(vals - m).sum() + eps).log() + m
            if name == "logsumexp":
                out[p, t] = lse
            elif name == "std":
                n = max(vals.numel() - (1 if unbiased else 0), 1)
                out[p, t] = (((vals - vals.mean()) ** 2).sum() / (n + 1e-6)).sqrt()
            elif name == "softmax":
                out[p, mask] = torch.softmax(vals, 0)
            else:
                out[p, mask] = vals - lse
    shape = list(src.movedim(d, -1).shape)
    shape[-1] = out.size(1)
    return out.reshape(shape).movedim(-1, d)


FUNCS = {"logsumexp": so.scatter_logsumexp, "softmax": so.scatter_softmax, "log_softmax": so.scatter_log_softmax,
         "std": so.scatter_std}


@st.composite
def cases(draw):
    dtype = draw(st.sampled_from(FLOATS))
    shape, dim, d = R.draw_shape_and_dim(draw, 1, 5)
    size = draw(st.integers(1, 5))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    full = draw(st.booleans())
    index = torch.randint(0, size, shape if full else [shape[d]], generator=g)
    scale = draw(st.sampled_from([1.0, 30.0, 1e4]))
    src = (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
    return src, index, dim, size


@given(case=cases(), name=st.sampled_from(list(FUNCS)))
def test_matches_reference(case, name):
    src, index, dim, size = case
    got = FUNCS[name](src, index, dim, dim_size=size)
    want = reference(name, src, index, dim, size)
    # per element, from how each is computed (tests/differential.py): softmax's error is relative to its value,
    # whatever the magnitude of src; log_softmax's and logsumexp's grow with their own magnitude; std's with src's
    eps = torch.finfo(src.dtype).eps
    n = src.size(dim % src.dim())
    if name == "softmax":
        tol = D.softmax_tolerance(want, n, eps)
    elif name == "logsumexp":
        tol = 8 * eps * (1 + want.abs() + n ** 0.5)
    elif name == "log_softmax":  # (the reference's x - lse rounds at the magnitude of x)
        tol = 8 * eps * (1 + want.abs() + src.double().abs() + n ** 0.5)
    else:
        tol = torch.full_like(want, 16 * eps * (1 + n ** 0.5) * (1 + src.double().abs().max().item()))
    D.assert_matches(got, want, tol, f"scatter_{name} {src.dtype} scale {src.double().abs().max().item():.3g}")


def test_pytorch_scatter_examples():
    """The cases pytorch_scatter's own tests check: logsumexp equals torch.logsumexp of each target's entries
    exactly and 0 for an empty target; out= joins the entries and keeps its value where nothing is added;
    softmax of a target holding -inf; std with the index shaped like src."""
    src = torch.tensor([0.5, 0.5, 0.0, -2.1, 3.2, 7.0, -1.0, -100.0], requires_grad=True)
    index = torch.tensor([0, 0, 1, 1, 1, 2, 4, 4])
    out = so.scatter_logsumexp(src, index)
    for part, value in zip(src.split([2, 3, 1, 0, 2]), out.unbind()):
        assert value.item() == (torch.logsumexp(part, 0).item() if part.numel() else 0.0)
    out.backward(torch.ones_like(out))
    assert torch.jit.script(so.scatter_logsumexp)(src, index).tolist() == out.tolist()

    into = torch.tensor([-10.0, -10.0])
    assert so.scatter_logsumexp(torch.tensor([-1.0, -50.0]), torch.tensor([0, 0]), out=into) is into
    torch.testing.assert_close(into, torch.tensor([torch.logsumexp(torch.tensor([-1.0, -50.0, -10.0]), 0), -10.0]))

    x = torch.tensor([0.2, 0, 0.2, -2.1, 3.2, 7, -1, float("-inf")], requires_grad=True)
    i = torch.tensor([0, 1, 0, 1, 1, 2, 4, 4])
    sm = so.scatter_softmax(x, i)
    want = torch.empty(8)
    for t in range(5):
        if (i == t).any():
            want[i == t] = torch.softmax(x.detach()[i == t], 0)
    torch.testing.assert_close(sm, want)
    torch.testing.assert_close(so.scatter_log_softmax(x, i)[:7], want.log()[:7])
    assert so.scatter_log_softmax(x, i)[7].item() == float("-inf")
    (sm.sum() + so.scatter_log_softmax(x, i)[:7].sum()).backward()

    s = torch.tensor([[2, 0, 1, 4, 3], [0, 2, 1, 3, 4]], dtype=torch.float)
    std = so.scatter_std(s, torch.tensor([[0] * 5, [1] * 5]), dim=-1)
    torch.testing.assert_close(std, torch.tensor([[s[0].std(), 0], [0, s[1].std()]]), atol=1e-5, rtol=1e-5)


def test_edge_values():
    """NaN propagates (torch.logsumexp, torch.softmax); +inf gives a logsumexp of +inf and a softmax shared by
    the +inf entries (the limit); a target whose entries are all -inf gives a logsumexp of 0 (pytorch_scatter's
    value for it)."""
    index = torch.tensor([0, 0, 1, 1, 2])
    lse = so.scatter_logsumexp(torch.tensor([1.0, float("nan"), float("-inf"), float("-inf"), float("inf")]), index)
    assert torch.isnan(lse[0]) and lse[1].item() == 0.0 and lse[2].item() == float("inf")
    sm = so.scatter_softmax(torch.tensor([1.0, float("nan"), 0.0, 1.0, 3.0]), index)
    assert torch.isnan(sm[:2]).all() and sm[4].item() == 1.0
    inf = so.scatter_softmax(torch.tensor([float("inf"), 2.0, float("inf")]), torch.tensor([0, 0, 0]))
    assert inf.tolist() == [0.5, 0.0, 0.5]


@pytest.mark.parametrize("name", list(FUNCS))
def test_gradcheck(name):
    src = (torch.randperm(24, dtype=torch.float64) / 7).reshape(4, 6).requires_grad_()
    index = torch.tensor([0, 2, 2, 0, 1, 2])
    fn = FUNCS[name]
    assert torch.autograd.gradcheck(lambda t: fn(t, index, -1, dim_size=3), (src,), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", list(FUNCS))
def test_script_and_compile(name):
    src = torch.randn(40, 5)
    index = torch.randint(0, 7, (40,))
    fn = FUNCS[name]
    eager = fn(src, index, 0, dim_size=7)
    assert torch.equal(torch.jit.script(fn)(src, index, 0, dim_size=7), eager)
    torch._dynamo.reset()
    compiled = torch.compile(lambda s, i: fn(s, i, 0, dim_size=7), fullgraph=True)
    torch.testing.assert_close(compiled(src, index), eager)


@pytest.mark.parametrize("name", list(FUNCS))
def test_deterministic_across_threads(name):
    src = torch.randn(20000, 8, dtype=torch.float32)
    index = torch.randint(0, 300, (20000,))
    results = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        results.append(FUNCS[name](src, index, 0, dim_size=300))
    assert torch.equal(results[0], results[1])


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="scatter_softmax: src must have a floating-point dtype"):
        so.scatter_softmax(torch.arange(4), torch.tensor([0, 0, 1, 1]))
    with pytest.raises(ValueError, match="scatter_logsumexp: dim 3 is out of range"):
        so.scatter_logsumexp(torch.randn(4), torch.tensor([0, 0, 1, 1]), dim=3)
    with pytest.raises(ValueError, match="scatter_std: out has 1 dims"):
        so.scatter_std(torch.randn(4, 2), torch.tensor([0, 0, 1, 1]), 0, out=torch.zeros(2))
    with pytest.raises((TypeError, ValueError), match="index"):
        so.scatter_logsumexp(torch.randn(4), [0, 0, 1, 1])


def test_int32_index_broadcast_over_features():
    """torch's int32 gather misreads an index broadcast with stride 0 (x.gather(0, i32.view(3, 1).expand(3, 4))
    returns row 0 three times, torch 2.13): the composites gather with an int64 copy."""
    s = torch.randn(6, 4)
    i = torch.tensor([0, 1, 0, 2, 1, 2])
    for name, fn in FUNCS.items():
        R.assert_equal(fn(s, i.int(), 0), fn(s, i, 0), f"scatter_{name} int32 index")
    sm = so.scatter_softmax(s, i.int(), 0)
    torch.testing.assert_close(so.scatter_sum(sm, i, 0), torch.ones(3, 4))


def test_out_is_checked():
    """An out= of the wrong dtype or shape is refused (it was truncated or broadcast into)."""
    src = torch.randn(6, 1)
    index = torch.tensor([0, 1, 0, 2, 1, 2])
    for name in ("logsumexp", "std"):
        fn = FUNCS[name]
        with pytest.raises(TypeError, match=f"^torch_segops.scatter_{name}: out has dtype torch.int64, expected "
                                            r"torch.float32$"):
            fn(src, index, 0, out=torch.zeros(3, 1, dtype=torch.long))
        with pytest.raises(ValueError, match=f"^torch_segops.scatter_{name}: out has shape \\[3, 3\\], expected "
                                             r"\[3, 1\]$"):
            fn(src, index, 0, out=torch.zeros(3, 3))


def test_logsumexp_out_gradient_where_nothing_is_scattered():
    """Where a target has no entries the result is out's value, and out's gradient is 1 there (it was NaN)."""
    base = torch.tensor([0.5, -2.0, 3.0, 7.0], requires_grad=True)
    src = torch.tensor([1.0, 2.0, -1.0], requires_grad=True)
    result = so.scatter_logsumexp(src, torch.tensor([0, 0, 2]), 0, out=base.clone())
    result.sum().backward()
    assert base.grad[1].item() == 1.0 and base.grad[3].item() == 1.0, base.grad
    assert bool(base.grad.isfinite().all()) and bool(src.grad.isfinite().all())
    assert result[1].item() == -2.0 and result[3].item() == 7.0


def test_std_of_large_small_and_nan_entries():
    """std squares deviations in units of the largest (1e30 and 1e-40 squared leave float32's range); a NaN or
    infinite entry gives NaN (it gave 0)."""
    index = torch.tensor([0, 0, 1, 1, 2, 2])
    src = torch.tensor([1e30, -1e30, 1e-40, -1e-40, 1.0, float("nan")])
    std = so.scatter_std(src, index)
    want = 2 ** 0.5 * src[[0, 2]].double() / (1 + 1e-6) ** 0.5  # sqrt((x^2 + x^2) / (2 - 1 + 1e-6))
    torch.testing.assert_close(std[:2].double(), want, rtol=1e-6, atol=0)
    assert std[2].isnan()
    assert so.scatter_std(torch.tensor([1.0, float("inf")]), torch.tensor([0, 0]))[0].isnan()
