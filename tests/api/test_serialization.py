"""The public functions pickle (by reference, as pytorch_scatter's do): pickle, torch.save of a module that keeps
one as an attribute, the torch_scatter alias, and the ScatterPlan named tuple."""

from __future__ import annotations

import io
import pickle

import torch

import torch_segops as so


def test_every_public_function_pickles_to_itself():
    for name in so.__all__:
        obj = getattr(so, name)
        if callable(obj) and not isinstance(obj, type):
            assert pickle.loads(pickle.dumps(obj)) is obj, name


class Pool(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fn = so.scatter_max
        self.sum = so.segment_add_csr

    def forward(self, x, index):
        return self.fn(x, index, 0)[0]


def test_torch_save_of_a_module_holding_functions():
    buf = io.BytesIO()
    torch.save(Pool(), buf)
    buf.seek(0)
    pool = torch.load(buf, weights_only=False)
    assert pool.fn is so.scatter_max and pool.sum is so.segment_add_csr
    x = torch.randn(5, 3)
    index = torch.tensor([1, 0, 1, 2, 0])
    assert torch.equal(pool(x, index), so.scatter_max(x, index, 0)[0])


def test_alias_functions_and_plans_pickle():
    module = so._alias._build_module(so)
    assert pickle.loads(pickle.dumps(module.scatter)) is so.scatter
    plan = so.scatter_plan(torch.tensor([2, 0, 2]), 3)
    back = pickle.loads(pickle.dumps(plan))
    assert isinstance(back, so.ScatterPlan) and torch.equal(back.perm, plan.perm) and torch.equal(back.indptr,
                                                                                                    plan.indptr)
