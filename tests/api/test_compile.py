"""The ops under torch.library.opcheck (schema, fake kernels, autograd registration, AOT dispatch)
and the public functions under torch.compile(fullgraph=True): one graph, no graph break, results
and gradients equal to eager."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import reference as R
import torch_segops as so

_ops = torch.ops.torch_segops


# ---------------------------------------------------------------------------------------------
# opcheck

def _inputs(dtype, requires_grad):
    g = torch.Generator().manual_seed(0)
    src = torch.randn(2, 9, 3, generator=g).to(dtype)
    if requires_grad:
        src.requires_grad_()
    return src


INDPTRS = {
    "1d": torch.tensor([0, 3, 3, 9]),  # 1-D: reduce along dim 0 (src viewed accordingly)
    "broadcast": torch.tensor([[1, 3, 3, 8]]),
    "per_batch": torch.tensor([[0, 3, 3, 9], [2, 2, 2, 5]]),
}


def _src_for(indptr, dtype, requires_grad):
    src = _inputs(dtype, False)
    if indptr.dim() == 1:
        src = src[0]
    src = src.detach().clone()
    return src.requires_grad_() if requires_grad else src


OPCHECK_DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64]


@pytest.mark.parametrize("layout", list(INDPTRS))
@pytest.mark.parametrize("reduce,dtype", [pytest.param(r, d, id=f"{r}-{str(d)[6:]}") for d in OPCHECK_DTYPES
                                          for r in ("sum", "mean", "min", "max", "logsumexp", "mul")
                                          if d.is_floating_point or r in ("sum", "min", "max", "mul")])  # mean, lse: floats
def test_opcheck_segment_reduce(reduce, dtype, layout):
    indptr = INDPTRS[layout]
    src = _src_for(indptr, dtype, requires_grad=dtype.is_floating_point)
    torch.library.opcheck(getattr(_ops, f"segment_{reduce}").default, (src, indptr))


@pytest.mark.parametrize("layout", list(INDPTRS))
@pytest.mark.parametrize("reduce,dtype", [pytest.param(r, d, id=f"{r}-{str(d)[6:]}") for d in OPCHECK_DTYPES
                                          for r in ("sum", "mean", "min", "max", "logsumexp", "mul")
                                          if d.is_floating_point or r in ("sum", "min", "max", "mul")])
def test_opcheck_segment_reduce_out(reduce, dtype, layout):
    indptr = INDPTRS[layout]
    src = _src_for(indptr, dtype, requires_grad=False)
    result = getattr(_ops, f"segment_{reduce}")(src, indptr)
    outs = [torch.empty_like(t) for t in (result if isinstance(result, tuple) else (result,))]
    torch.library.opcheck(getattr(_ops, f"segment_{reduce}_out").default, (src, indptr, *outs))


@pytest.mark.parametrize("layout", list(INDPTRS))
@pytest.mark.parametrize("dtype", OPCHECK_DTYPES, ids=str)
def test_opcheck_gather_csr_out(dtype, layout):
    indptr = INDPTRS[layout]
    src = _src_for(indptr, dtype, False)
    src = src.narrow(indptr.dim() - 1, 0, indptr.size(-1) - 1).contiguous()
    out = _ops.gather_csr(src, indptr, int(indptr[..., -1].max()) + 2)
    torch.library.opcheck(_ops.gather_csr_out.default, (src, indptr, torch.empty_like(out)))


@pytest.mark.parametrize("layout", list(INDPTRS))
@pytest.mark.parametrize("dtype", OPCHECK_DTYPES, ids=str)
@pytest.mark.parametrize("size", ["given", "larger", "from_indptr"])
def test_opcheck_gather_csr(size, dtype, layout):
    indptr = INDPTRS[layout]
    src = _src_for(indptr, dtype, False)
    src = src.narrow(indptr.dim() - 1, 0, indptr.size(-1) - 1).detach().clone()
    if dtype.is_floating_point:
        src.requires_grad_()
    n = int(indptr[..., -1].max())
    size_arg = {"given": n, "larger": n + 3, "from_indptr": -1}[size]
    torch.library.opcheck(_ops.gather_csr.default, (src, indptr, size_arg))


@pytest.mark.parametrize("layout", list(INDPTRS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=str)
def test_opcheck_segment_softmax(dtype, layout):
    indptr = INDPTRS[layout]
    torch.library.opcheck(_ops.segment_softmax.default, (_src_for(indptr, dtype, True), indptr))


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("layout", list(INDPTRS))
def test_opcheck_segment_softmax_backward(layout, requires_grad):
    indptr = INDPTRS[layout]
    x = _src_for(indptr, torch.float64, False)
    out = _ops.segment_softmax(x, indptr)
    grad = torch.randn_like(x)
    if requires_grad:
        out.requires_grad_()
        grad.requires_grad_()
    torch.library.opcheck(_ops.segment_softmax_backward.default, (grad, out, indptr))


# ---------------------------------------------------------------------------------------------
# torch.compile(fullgraph=True)

def _case(batch=False, n=40, f=3, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 6, (n // 4,), generator=g)
    lengths[1] = 0
    indptr = R.indptr_from_lengths(lengths, start=1)
    rows = int(indptr[-1]) + 2
    src = torch.randn(rows, f, generator=g).to(dtype)
    if batch:
        src = torch.stack([src, -src])
        indptr = indptr.unsqueeze(0)
    return src, indptr


PUBLIC = R.public_reducers()


def _compile_and_compare(fn, args, backend, dynamic=None, grad_wrt=0):
    return R.compile_and_compare(fn, args, backend, dynamic, grad_wrt, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batch", [False, True], ids=["1d_indptr", "broadcast_indptr"])
@pytest.mark.parametrize("name", list(PUBLIC))
def test_compile_fullgraph_aot_eager(name, batch):
    src, indptr = _case(batch)
    _compile_and_compare(PUBLIC[name], (src, indptr), "aot_eager")


@pytest.mark.parametrize("name", ["segment_csr_sum", "segment_max_csr", "segment_softmax_csr", "segment_logsumexp_csr",
                                  "segment_csr_mul"])
def test_compile_fullgraph_inductor(name):
    src, indptr = _case(batch=False)
    fn = PUBLIC[name]
    # wrap with surrounding pointwise work so inductor has something to fuse around the custom op
    _compile_and_compare(lambda s, i: R.flat(fn(s * 2 + 1, i))[0].relu(), (src, indptr), "inductor")


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("name", ["segment_csr_sum", "segment_csr_mean", "segment_max_csr", "segment_logsumexp_csr",
                                  "segment_softmax_csr", "segment_csr_mul"])
def test_compile_dynamic_shapes_no_recompile(name, requires_grad):
    """dynamic=True: a second, differently sized input reuses the same graph (also when autograd is
    traced: the backward formulas must not specialise on src.size(dim))."""
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(PUBLIC[name], backend=counter, fullgraph=True, dynamic=True)
    for n, seed in ((40, 0), (64, 1), (100, 2)):
        src, indptr = _case(n=n, seed=seed)
        xs = [src.clone().requires_grad_(requires_grad) for _ in range(2)]
        got, expected = R.flat(compiled(xs[0], indptr))[0], R.flat(PUBLIC[name](xs[1], indptr))[0]
        torch.testing.assert_close(got, expected)
        if requires_grad:
            w = torch.randn(expected.shape)
            torch.testing.assert_close(torch.autograd.grad(got, xs[0], w)[0], torch.autograd.grad(expected, xs[1], w)[0])
    assert counter.frame_count == 1, f"recompiled for new sizes ({counter.frame_count} frames; see TORCH_LOGS=recompiles)"


def test_compile_dynamic_gather_no_recompile():
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(lambda s, i: so.gather_csr(s, i), backend=counter, fullgraph=True, dynamic=True)
    for n, seed in ((40, 0), (64, 1), (100, 2)):
        _, indptr = _case(n=n, seed=seed)
        seg = torch.randn(indptr.numel() - 1, 3, requires_grad=True)
        torch.testing.assert_close(compiled(seg, indptr), so.gather_csr(seg, indptr))
    assert counter.frame_count == 1, f"recompiled for new sizes ({counter.frame_count} frames)"


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("size", ["given", "from_indptr"])
def test_compile_gather_csr(size, backend):
    # Without `size` the output length is max(indptr[..., -1]): data-dependent. The fake kernel gives
    # it as an unbacked SymInt (ctx.new_dynamic_size()), which compiles without graph break and without
    # torch._dynamo.config.capture_scalar_outputs / capture_dynamic_output_shape_ops (those are only
    # needed for .item() in user code or for builtin dynamic-shape ops like nonzero).
    src, indptr = _case(batch=True)
    seg_values = src[:, : indptr.size(-1) - 1].contiguous()
    n = int(indptr[..., -1].max())
    if size == "given":
        fn = lambda s, i: so.gather_csr(s * 3, i, size=n + 2)  # noqa: E731
    else:
        fn = lambda s, i: so.gather_csr(s * 3, i)  # noqa: E731
    _compile_and_compare(fn, (seg_values, indptr), backend)


def test_compile_gather_then_reduce_roundtrip():
    """A small message-passing style graph: gather -> pointwise -> segment softmax -> segment sum."""
    src, indptr = _case(n=48)
    nodes = torch.randn(indptr.numel() - 1, 3)

    def layer(h, x, ip):
        e = so.gather_csr(h, ip, size=x.size(0)) * x
        a = so.segment_softmax_csr(e, ip)
        return so.segment_sum_csr(a * x, ip)

    _compile_and_compare(layer, (nodes, src, indptr), "aot_eager")
    _compile_and_compare(layer, (nodes, src, indptr), "inductor")


def test_compile_with_out():
    src, indptr = _case()
    out = torch.empty(indptr.numel() - 1, src.size(1))

    def fn(s, i, o):
        return so.segment_sum_csr(s, i, out=o)

    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    got = torch.compile(fn, backend=counter, fullgraph=True)(src, indptr, out)
    assert counter.frame_count == 1
    torch.testing.assert_close(out, so.segment_sum_csr(src, indptr))
    torch.testing.assert_close(got, out)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_out(backend):
    """out= under torch.compile (the wrappers trace the functional op and copy into out) and the
    mutating out= ops called directly (functionalised by the compiler): one graph, out written."""
    src, indptr = _case(batch=False)
    n_seg = indptr.numel() - 1

    def wrappers(s, i, o, g):
        return so.segment_max_csr(s, i, out=o)[1], so.gather_csr(o, i, out=g)

    def direct(s, i, o, a):
        torch.ops.torch_segops.segment_max_out(s, i, o, a)
        return o * 2

    for fn, extra in ((wrappers, lambda: (torch.zeros(n_seg, 3), torch.zeros(src.shape[0], 3))),
                      (direct, lambda: (torch.zeros(n_seg, 3), torch.zeros(n_seg, 3, dtype=torch.long)))):
        torch._dynamo.reset()
        counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
        compiled = torch.compile(fn, backend=counter, fullgraph=True)
        eager_bufs, comp_bufs = extra(), extra()
        expected, got = fn(src, indptr, *eager_bufs), compiled(src, indptr, *comp_bufs)
        assert counter.frame_count == 1
        for g, e in zip(R.flat(got) + list(comp_bufs), R.flat(expected) + list(eager_bufs)):
            torch.testing.assert_close(g, e)
        assert not bool((comp_bufs[0] == 0).all()), "out was not written"
