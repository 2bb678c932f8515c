"""PyG's paths that reach torch_scatter, run in one child process natively and through torch_segops' alias.

`python tests/pyg_scenarios.py OUT.pt` installs the alias before importing torch_geometric, then runs every
scenario twice from the same seed: PyG's native path (`torch_geometric.typing.WITH_TORCH_SCATTER = False`,
as PyG's own `disable_extensions` test fixture does) and the torch_scatter path, which the alias serves.
It records outputs, gradients (of a fixed random weighting of the outputs, for the inputs and every
parameter), the calls PyG made to the alias module's functions and the torch_segops ops dispatched (a
TorchDispatchMode: the compiled kernels really ran, forward and backward). tests/api/test_pyg.py compares them.
A child process, so the alias never enters the test session's sys.modules.
"""

from __future__ import annotations

import collections
import functools
import sys

import torch

N, E, F = 40, 320, 8  # nodes, edges, features: small, the whole run takes seconds


def _graph(empty_nodes: bool = True):
    """A random graph without repeated edges (a repeated edge ties in a max aggregation), sorted by destination;
    some nodes receive no edge unless empty_nodes is False."""
    pairs = torch.randperm(N * N)[:E]
    col, row = pairs // N, pairs % N
    if empty_nodes:
        keep = col % 7 != 3  # nodes 3, 10, 17, ... get nothing
        col, row = col[keep], row[keep]
    else:
        col, row = torch.cat([torch.arange(N), col[: E - N]]), torch.cat([torch.arange(N), row[: E - N]])
    col, perm = col.sort(stable=True)
    row = row[perm]
    ptr = torch.zeros(N + 1, dtype=torch.long)
    ptr[1:] = torch.bincount(col, minlength=N).cumsum(0)
    return row, col, ptr


def _segment(reduce):
    def run():
        from torch_geometric.utils import segment

        _, _, ptr = _graph()
        src = torch.randn(int(ptr[-1]), F, requires_grad=True)
        return (segment(src, ptr, reduce=reduce),), [src]
    return run


def _softmax():
    from torch_geometric.utils import softmax

    _, col, ptr = _graph()
    src = torch.randn(col.numel(), 4, requires_grad=True)
    return (softmax(src, col, ptr=ptr, num_nodes=N),), [src]


def _scatter_argmax():
    from torch_geometric.utils._scatter import scatter_argmax

    _, col, _ = _graph(empty_nodes=False)  # PyG's native argmax of an empty target is dim_size - 1, ours src.size(0)
    src = torch.randn(col.numel())
    return (scatter_argmax(src, col, dim_size=N),), []


def _scatter_max():
    from torch_geometric.utils import scatter

    _, col, _ = _graph()
    src = torch.randn(col.numel(), F, requires_grad=True)
    return (scatter(src, col, 0, dim_size=N, reduce="max"),), [src]


def _aggregation(name, with_index):
    def run():
        import torch_geometric.nn.aggr as aggr

        _, col, ptr = _graph()
        module = getattr(aggr, name)()
        x = torch.randn(col.numel(), F, requires_grad=True)
        out = module(x, col if with_index else None, ptr=ptr, dim_size=N)
        return (out,), [x, *module.parameters()]
    return run


def _conv(kind):
    def run():
        from torch_geometric import EdgeIndex
        from torch_geometric.nn import GATConv, SAGEConv

        row, col, _ = _graph()
        edge_index = EdgeIndex(torch.stack([row, col]), sparse_size=(N, N), sort_order="col")
        if kind == "gat":
            conv = GATConv(F, 6, heads=2, add_self_loops=False)
        else:
            conv = SAGEConv(F, 12, aggr=kind.split("_")[1])
        x = torch.randn(N, F, requires_grad=True)
        return (conv(x, edge_index),), [x, *conv.parameters()]
    return run


def _segment_max_ties():
    """Every segment's maximum occurs twice or more: where the gradient goes differs (see test_pyg.py)."""
    from torch_geometric.utils import segment

    _, _, ptr = _graph()
    src = torch.randint(0, 3, (int(ptr[-1]), F)).float().requires_grad_()
    return (segment(src, ptr, reduce="max"),), [src], {"ptr": ptr}


# name -> (scenario, under torch.use_deterministic_algorithms(True))
SCENARIOS = {
    **{f"segment_{r}": (_segment(r), False) for r in ("sum", "mean", "max", "min")},
    "softmax_ptr": (_softmax, False),
    "scatter_argmax": (_scatter_argmax, False),
    "scatter_max_cpu": (_scatter_max, False),
    **{f"{a}_ptr": (_aggregation(a, False), False) for a in ("SumAggregation", "MeanAggregation", "MaxAggregation",
                                                             "MinAggregation")},
    **{f"{a}_sorted_index_deterministic": (_aggregation(a, True), True)
       for a in ("SumAggregation", "MeanAggregation", "MaxAggregation")},
    "SumAggregation_sorted_index": (_aggregation("SumAggregation", True), False),
    **{f"{k}_deterministic": (_conv(k), True) for k in ("sage_max", "sage_mean", "gat")},
    "segment_max_ties": (_segment_max_ties, False),
}


class _SegopsOps(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "torch_segops":
            self.count[func.name()] += 1
        return func(*args, **(kwargs or {}))


def _count_calls(module, calls):
    for name in module.__all__:
        fn = getattr(module, name)
        if callable(fn):
            @functools.wraps(fn)
            def counted(*args, _fn=fn, _name=name, **kwargs):
                calls[_name] += 1
                return _fn(*args, **kwargs)
            setattr(module, name, counted)


def _run(scenario, deterministic, calls):
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic)
    try:
        torch.manual_seed(0)
        ops = _SegopsOps()
        calls.clear()
        with ops:
            outputs, leaves, *info = scenario()
            grads, weights = [], []
            if leaves:
                weights = [torch.randn(o.shape) for o in outputs]
                loss = sum((o * w).sum() for o, w in zip(outputs, weights))
                grads = torch.autograd.grad(loss, leaves)
        return {"outputs": [o.detach().as_subclass(torch.Tensor) for o in outputs],
                "grads": [g.as_subclass(torch.Tensor) for g in grads],
                "inputs": [leaf.detach() for leaf in leaves], "weights": weights, "info": info[0] if info else {},
                "alias_calls": dict(calls), "segops_ops": dict(ops.count)}
    finally:
        torch.use_deterministic_algorithms(before)


def main(path: str) -> None:
    import torch_segops

    assert "torch_scatter" not in sys.modules and "torch_geometric" not in sys.modules
    # force: a pytorch_scatter installed next to this one is shadowed in this child only
    alias = torch_segops.install_as_torch_scatter(force=True)
    import torch_geometric.typing as pyg_typing

    assert pyg_typing.WITH_TORCH_SCATTER and pyg_typing.torch_scatter is alias
    calls = collections.Counter()
    _count_calls(alias, calls)
    results = {}
    for name, (scenario, deterministic) in SCENARIOS.items():
        results[name] = {}
        for path_name, flag in (("native", False), ("alias", True)):
            pyg_typing.WITH_TORCH_SCATTER = flag
            results[name][path_name] = _run(scenario, deterministic, calls)
    torch.save(results, path)


if __name__ == "__main__":
    main(sys.argv[1])
