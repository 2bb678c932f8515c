"""Distributed training: two processes (torch.distributed, gloo, CPU) train a small model built on the
torch_segops ops with DistributedDataParallel, each on half of a batch of graphs, and end with the
parameters of one process trained on the whole batch.

The model's loss is a mean over graphs and each rank holds the same number of graphs, so DDP's
averaged gradient is the whole batch's gradient. The worker is this file run as a script
(`python test_distributed.py RANK WORLD INIT_FILE OUT_FILE`), started by the test as a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys

import torch

import torch_segops as so

GRAPHS, STEPS, LR = 8, 5, 0.2


class SegNet(torch.nn.Module):
    """Attention pooling and statistics per graph (segment = graph), all through torch_segops."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(4, 8)
        self.score = torch.nn.Linear(8, 1)
        self.head = torch.nn.Linear(8 * 4, 1)

    def forward(self, x, indptr):
        h = torch.tanh(self.embed(x))
        attention = so.segment_softmax_csr(self.score(h), indptr)          # [rows, 1]
        pooled = so.segment_sum_csr(attention * h, indptr)                  # [graphs, 8]
        centred = h - so.gather_csr(so.segment_mean_csr(h, indptr), indptr, size=x.size(0))
        top, _ = so.segment_max_csr(h, indptr)
        low, _ = so.segment_min_csr(centred, indptr)
        soft = so.segment_logsumexp_csr(h, indptr)
        return self.head(torch.cat([pooled, top, low, soft], dim=-1)).squeeze(-1)


def make_batch():
    """GRAPHS graphs of 2..9 rows each, float64 features and targets (the same in every process)."""
    g = torch.Generator().manual_seed(1234)
    lengths = torch.randint(2, 10, (GRAPHS,), generator=g)
    x = torch.randn(int(lengths.sum()), 4, generator=g, dtype=torch.float64)
    y = torch.randn(GRAPHS, generator=g, dtype=torch.float64)
    return x, lengths, y


def shard(x, lengths, y, rank: int, world: int):
    """Graphs [rank * k, (rank + 1) * k) with k = GRAPHS / world: their rows, indptr and targets."""
    k = GRAPHS // world
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    first, last = rank * k, (rank + 1) * k
    rows = x[int(offsets[first]) : int(offsets[last])]
    return rows, offsets[first : last + 1] - offsets[first], y[first:last]


def new_model():
    torch.manual_seed(0)
    return SegNet().double()


def train(model, batches):
    """STEPS steps of SGD on the mean squared error over the batch's graphs."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, indptr, y = batches
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x, indptr), y)
        loss.backward()
        opt.step()
    return loss.item()


def _worker(rank: int, world: int, init_file: str, out_file: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        model = DistributedDataParallel(new_model())
        loss = train(model, shard(*make_batch(), rank, world))
        torch.save({"params": {k: v.detach() for k, v in model.module.state_dict().items()}, "loss": loss}, out_file)
    finally:
        dist.destroy_process_group()


def test_ddp_two_processes_match_one_process_whole_batch(tmp_path):
    world = 2
    init_file = tmp_path / "store"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen([sys.executable, __file__, str(rank), str(world), str(init_file), str(tmp_path / f"rank{rank}.pt")],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for rank in range(world)
    ]
    for rank, proc in enumerate(procs):
        try:
            output, _ = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        assert proc.returncode == 0, f"rank {rank} failed:\n{output}"
    results = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(world)]

    single = new_model()
    initial = {k: v.detach().clone() for k, v in single.state_dict().items()}
    train(single, shard(*make_batch(), 0, 1))
    alone = new_model()  # rank 0's half without the other rank's gradients: must differ
    train(alone, shard(*make_batch(), 0, world))

    for name, expected in single.state_dict().items():
        assert not torch.equal(expected, initial[name]), f"{name} did not change: nothing was trained"
        for rank, result in enumerate(results):
            torch.testing.assert_close(result["params"][name], expected, rtol=1e-10, atol=1e-12,
                                       msg=lambda m: f"rank {rank}, {name}: {m}")
        assert torch.equal(results[0]["params"][name], results[1]["params"][name]), f"{name}: ranks disagree"
    assert any(not torch.allclose(alone.state_dict()[n], single.state_dict()[n], rtol=1e-6) for n in initial), \
        "training on half of the batch gave the whole batch's parameters: the test cannot tell DDP from no sync"


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
