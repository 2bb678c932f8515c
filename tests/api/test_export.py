"""torch.export and AOTInductor: a module that calls every public op exports with static and dynamic
shapes, the exported program gives the eager result (also on new sizes), and the AOTInductor package
built from it (torch._inductor.aoti_compile_and_package, then aoti_load_package) does too.

AOTInductor compiles and links C++: the model is kept tiny and is compiled once per test session.
"""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import torch_segops as so


class AllOps(torch.nn.Module):
    """Every public function of torch_segops in one forward (the CSR ops; none is left out)."""

    def forward(self, src, indptr):
        n = src.size(0)
        total = so.segment_csr(src, indptr, reduce="sum")
        added = so.segment_add_csr(src, indptr)
        summed = so.segment_sum_csr(src, indptr)
        mean = so.segment_mean_csr(src, indptr)
        mean2 = so.segment_csr(src, indptr, reduce="mean")
        mn, argmin = so.segment_min_csr(src, indptr)
        mx, argmax = so.segment_max_csr(src, indptr)
        mx2 = so.segment_csr(src, indptr, reduce="max")
        mn2 = so.segment_csr(src, indptr, reduce="min")
        lse = so.segment_logsumexp_csr(src, indptr)
        soft = so.segment_softmax_csr(src, indptr)
        prod = so.segment_csr(src, indptr, reduce="mul")
        spread = so.gather_csr(mean, indptr, size=n)  # size given: no data-dependent output shape
        return (total, added, summed, mean, mean2, mn, argmin, mx, argmax, mx2, mn2, lse, soft, prod,
                spread, soft * spread + src)


def _case(rows: int, segments: int, features: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randn(rows, features, generator=g)
    cuts = torch.randint(0, rows + 1, (segments - 1,), generator=g).sort().values
    indptr = torch.cat([torch.tensor([0]), cuts, torch.tensor([rows])])
    indptr[segments // 2] = indptr[segments // 2 + 1]  # an empty segment
    return src, indptr


def _assert_same(got, expected):
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected)):
        assert a.shape == b.shape and a.dtype == b.dtype, (i, a.shape, b.shape, a.dtype, b.dtype)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m: f"output {i}: {m}")


def _dynamic_shapes():
    # at least 2 segments: export specialises size-1 dims (a one-segment indptr gets its own program)
    rows, segs = Dim("rows", min=2, max=1 << 20), Dim("segs_plus_one", min=3, max=1 << 16)
    return {"src": {0: rows, 1: Dim.STATIC}, "indptr": {0: segs}}


@pytest.fixture(scope="module")
def exported_dynamic():
    src, indptr = _case(17, 5)
    return torch.export.export(AllOps(), (src, indptr), dynamic_shapes=_dynamic_shapes())


def test_export_static_shapes():
    src, indptr = _case(17, 5)
    ep = torch.export.export(AllOps(), (src, indptr))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    for op in ("torch_segops.segment_sum.default", "torch_segops.segment_mean.default",
               "torch_segops.segment_min.default", "torch_segops.segment_max.default",
               "torch_segops.segment_logsumexp.default", "torch_segops.segment_mul.default",
               "torch_segops.gather_csr.default",
               "torch_segops.segment_softmax.default"):
        assert op in targets, f"{op} not in the exported graph: {sorted(targets)}"
    _assert_same(ep.module()(src, indptr), AllOps()(src, indptr))


def test_export_dynamic_shapes_new_sizes(exported_dynamic):
    module = exported_dynamic.module()
    for rows, segments, seed in ((17, 5, 0), (40, 9, 1), (300, 64, 2), (3, 2, 3)):
        src, indptr = _case(rows, segments, seed=seed)
        _assert_same(module(src, indptr), AllOps()(src, indptr))


def test_export_dynamic_shapes_rejects_wrong_features(exported_dynamic):
    src, indptr = _case(17, 5, features=4)
    with pytest.raises(Exception, match="src"):
        exported_dynamic.module()(src, indptr)


def test_export_round_trip_save_load(exported_dynamic, tmp_path):
    path = tmp_path / "all_ops.pt2"
    torch.export.save(exported_dynamic, path)
    loaded = torch.export.load(path)
    src, indptr = _case(50, 7, seed=4)
    _assert_same(loaded.module()(src, indptr), AllOps()(src, indptr))


def test_export_backward_through_exported_module(exported_dynamic):
    """The exported module (a plain GraphModule of the ops) still differentiates through them."""
    src, indptr = _case(30, 6, seed=5)
    x1, x2 = src.clone().requires_grad_(), src.clone().requires_grad_()
    w = torch.randn(30, 3)
    (g1,) = torch.autograd.grad((exported_dynamic.module()(x1, indptr)[-1] * w).sum(), x1)
    (g2,) = torch.autograd.grad((AllOps()(x2, indptr)[-1] * w).sum(), x2)
    torch.testing.assert_close(g1, g2)


def test_aoti_compile_package_load_and_run(exported_dynamic, tmp_path):
    """AOTInductor: compile the dynamic-shape program to a .pt2 package (C++), load it, run it on two
    sizes; the results equal eager."""
    path = torch._inductor.aoti_compile_and_package(exported_dynamic, package_path=str(tmp_path / "all_ops_aoti.pt2"))
    runner = torch._inductor.aoti_load_package(path)
    for rows, segments, seed in ((17, 5, 0), (123, 20, 6)):
        src, indptr = _case(rows, segments, seed=seed)
        _assert_same(runner(src, indptr), AllOps()(src, indptr))
