"""Every public function under torch.jit.script: it compiles, and the scripted function gives the same
results as eager (pytorch_scatter's functions are scriptable and models that script them exist; the
in-place out= fast path is eager-only, so scripted out= calls take the functional path)."""

from __future__ import annotations

import pytest
import torch

import torch_segops as so

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")

SRC = torch.randn(2, 11, 3, generator=torch.Generator().manual_seed(0))
INDPTR = torch.tensor([[0, 4, 4, 9, 11]])


def _same(got, expected):
    got = list(got) if isinstance(got, tuple) else [got]
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert torch.equal(g, e), (g, e)


# (function name, argument tuples to call both versions with)
CSR_CALLS = {
    "segment_csr": [(SRC, INDPTR), (SRC, INDPTR, None, "mean"), (SRC, INDPTR, None, "max"),
                    ((SRC * 10).long(), INDPTR, None, "mean"), (SRC, torch.zeros(1, 0, dtype=torch.long)),
                    (SRC, INDPTR, None, "mul"),
                    ((SRC * 10).int(), INDPTR, torch.empty(2, 4, 3, dtype=torch.int32), "mul")],
    "segment_sum_csr": [(SRC, INDPTR), (SRC, INDPTR.int())],
    "segment_add_csr": [(SRC, INDPTR)],
    "segment_mean_csr": [(SRC, INDPTR), ((SRC * 10).int(), INDPTR)],
    "segment_min_csr": [(SRC, INDPTR)],
    "segment_max_csr": [(SRC, INDPTR), (SRC[0], INDPTR[0])],
    "gather_csr": [(SRC[:, :4], INDPTR), (SRC[:, :4], INDPTR, None, 13)],
    "segment_softmax_csr": [(SRC, INDPTR)],
    "segment_logsumexp_csr": [(SRC, INDPTR)],
}
INDEX = torch.tensor([[0, 0, 0, 2, 2, 2, 2, 2, 3, 3, 3]])
COO_CALLS = {
    "segment_coo": [(SRC, INDEX), (SRC, INDEX, None, 6, "mean"), (SRC, INDEX, None, None, "min"),
                    ((SRC * 10).long(), INDEX, None, None, "mean"), (SRC, INDEX, torch.ones(2, 4, 3), None, "max"),
                    (SRC, INDEX, torch.full((2, 4, 3), 2.0), None, "mul")],
    "segment_sum_coo": [(SRC, INDEX), (SRC, INDEX.int(), torch.ones(2, 5, 3))],
    "segment_add_coo": [(SRC, INDEX, None, 4)],
    "segment_mean_coo": [(SRC, INDEX), (SRC, INDEX, torch.ones(2, 4, 3))],
    "segment_min_coo": [(SRC, INDEX)],
    "segment_max_coo": [(SRC, INDEX), (SRC[0], INDEX[0], None, 7)],
    "gather_coo": [(SRC[:, :4], INDEX), (SRC[:, :4], INDEX, torch.empty(2, 11, 3))],
}


def _calls():
    for name, calls in {**CSR_CALLS, **COO_CALLS}.items():
        for i, args in enumerate(calls):
            yield pytest.param(name, args, id=f"{name}-{i}")


@pytest.mark.parametrize("name,args", list(_calls()))
def test_scripted_equals_eager(name, args):
    fn = getattr(so, name)
    scripted = torch.jit.script(fn)
    # out= arguments are written (COO: accumulated into): each call gets its own copy
    copies = [tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args) for _ in range(2)]
    _same(scripted(*copies[0]), fn(*copies[1]))
    for a, b in zip(*copies):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["segment_sum_csr", "segment_mean_csr", "segment_max_csr"])
def test_scripted_out(name):
    fn = getattr(so, name)
    expected = fn(SRC, INDPTR)
    values = expected[0] if isinstance(expected, tuple) else expected
    out = torch.full_like(values, float("nan"))
    got = torch.jit.script(fn)(SRC, INDPTR, out)
    _same(got, expected)
    assert torch.equal(out, values)
    assert torch.equal(torch.jit.script(so.gather_csr)(values, INDPTR, torch.empty(2, 11, 3)), so.gather_csr(values, INDPTR, size=11))


def test_scripted_errors_name_the_argument():
    with pytest.raises(Exception, match="reduce"):
        torch.jit.script(so.segment_csr)(SRC, INDPTR, None, "prod")
    with pytest.raises(Exception, match="indptr"):
        torch.jit.script(so.segment_sum_csr)(SRC, torch.tensor([0, 5, 3]))
    with pytest.raises(Exception, match="out"):
        torch.jit.script(so.segment_sum_csr)(SRC, INDPTR, torch.empty(2, 5, 3, dtype=torch.float64))


def test_scripted_inside_a_module():
    class Pool(torch.nn.Module):
        def forward(self, x: torch.Tensor, indptr: torch.Tensor) -> torch.Tensor:
            return so.segment_csr(x, indptr, reduce="mean") + so.segment_max_csr(x, indptr)[0]

    module = torch.jit.script(Pool())
    _same(module(SRC, INDPTR), Pool()(SRC, INDPTR))
