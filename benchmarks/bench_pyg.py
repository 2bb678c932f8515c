"""PyTorch Geometric with and without torch_segops' torch_scatter alias, forward + backward, on the CPU.

    python benchmarks/bench_pyg.py                      # 2M edges x 64 features, 100k nodes, 5 rounds
    python benchmarks/bench_pyg.py --quick              # 200k edges, seconds
    python benchmarks/bench_pyg.py --markdown benchmarks/results/pyg-cpu-<machine>-<date>.md

PyG decides at its import whether torch_scatter exists, so each variant lives in its own worker process:
"native" (PyG as installed: no torch_scatter, its torch._segment_reduce / scatter paths) and "alias"
(torch_segops.install_as_torch_scatter() before `import torch_geometric`). Both build the same inputs from
the same seed. The parent times the cases in rounds, in one worker at a time (the other waits), the order
of the workers alternating from round to round, so a shared machine's drift hits both alike; it reports
each case's median time per variant and the ratio alias / native (below 1: the alias is faster), with the
range of the per-round ratios.

Cases: PyG's `utils.segment` (sum, mean, max) and `utils.softmax` with `ptr` on [edges, features]; whole
layers SAGEConv(aggr="max"/"mean") and GATConv(heads=4, add_self_loops=False) on a destination-sorted
EdgeIndex under torch.use_deterministic_algorithms(True), where PyG's aggregations take `segment`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = ("segment_sum", "segment_mean", "segment_max", "softmax_ptr", "sage_max", "sage_mean", "gat")
VARIANTS = ("native", "alias")


# ---- worker: one variant, answers "case repeats" lines with the list of times -----------------------

def _inputs(edges: int, nodes: int, feat: int):
    import torch

    gen = torch.Generator().manual_seed(0)
    col = torch.randint(0, nodes, (edges,), generator=gen).sort().values
    row = torch.randint(0, nodes, (edges,), generator=gen)
    ptr = torch.zeros(nodes + 1, dtype=torch.long)
    ptr[1:] = torch.bincount(col, minlength=nodes).cumsum(0)
    src = torch.randn(edges, feat, generator=gen).requires_grad_()
    x = torch.randn(nodes, feat, generator=gen).requires_grad_()
    return row, col, ptr, src, x


def _case_fns(edges: int, nodes: int, feat: int) -> dict:
    import torch
    from torch_geometric import EdgeIndex
    from torch_geometric.nn import GATConv, SAGEConv
    from torch_geometric.utils import segment, softmax

    row, col, ptr, src, x = _inputs(edges, nodes, feat)
    edge_index = EdgeIndex(torch.stack([row, col]), sparse_size=(nodes, nodes), sort_order="col")
    torch.manual_seed(0)
    # the layers' aggregation modules read the deterministic flag when they are built
    layers = {"sage_max": SAGEConv(feat, feat, aggr="max"), "sage_mean": SAGEConv(feat, feat, aggr="mean"),
              "gat": GATConv(feat, feat // 4, heads=4, add_self_loops=False)}

    def step(forward, params=()):
        def run():
            out = forward()
            out.backward(torch.ones_like(out))
            for t in (src, x, *params):
                t.grad = None
        return run

    fns = {f"segment_{r}": step(lambda r=r: segment(src, ptr, reduce=r)) for r in ("sum", "mean", "max")}
    fns["softmax_ptr"] = step(lambda: softmax(src, col, ptr=ptr, num_nodes=nodes))
    for name, layer in layers.items():
        fns[name] = step(lambda layer=layer: layer(x, edge_index), list(layer.parameters()))
    return fns


def worker(variant: str, edges: int, nodes: int, feat: int, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    if variant == "alias":
        import torch_segops

        torch_segops.install_as_torch_scatter()
    import torch_geometric.typing

    assert torch_geometric.typing.WITH_TORCH_SCATTER == (variant == "alias"), "a real torch_scatter is installed?"
    fns = _case_fns(edges, nodes, feat)
    for fn in fns.values():  # warm up: first-call costs (allocator, EdgeIndex caches) out of the timing
        fn()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        name, repeats = line.split()
        times = []
        for _ in range(int(repeats)):
            t0 = time.perf_counter()
            fns[name]()
            times.append(time.perf_counter() - t0)
        print(json.dumps(times), flush=True)


# ---- parent: interleaved rounds, the table -------------------------------------------------------------

def _start(variant: str, args) -> subprocess.Popen:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", variant, "--edges", str(args.edges), "--nodes",
           str(args.nodes), "--feat", str(args.feat), "--threads", str(args.threads)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc


def _ask(proc: subprocess.Popen, request: str | None = None):
    if request is not None:
        proc.stdin.write(request + "\n")
        proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"benchmark worker exited with {proc.wait()}")
    return json.loads(line)


def _context() -> dict:
    import torch
    import torch_geometric

    import torch_segops

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cpu": cpu,
            "cores": os.cpu_count(), "torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
            "torch_segops": torch_segops.__version__, "git": git or "unknown", "python": platform.python_version()}


def run(args) -> str:
    ctx = _context()
    load_before = os.getloadavg()
    procs = {v: _start(v, args) for v in VARIANTS}
    try:
        for proc in procs.values():
            _ask(proc)  # ready
        samples = {c: {v: [] for v in VARIANTS} for c in CASES}
        per_round = {c: {v: [] for v in VARIANTS} for c in CASES}
        for rnd in range(args.rounds):
            order = VARIANTS if rnd % 2 == 0 else VARIANTS[::-1]
            for case in CASES:
                for v in order:
                    times = _ask(procs[v], f"{case} {args.repeats}")
                    samples[case][v] += times
                    per_round[case][v].append(statistics.median(times))
            print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        for proc in procs.values():
            proc.stdin.close()
            proc.wait()
    load_after = os.getloadavg()
    lines = [
        f"# PyG through torch_segops' torch_scatter alias, CPU, forward + backward ({ctx['date']})",
        "",
        f"- machine: {ctx['cpu']}, {ctx['cores']} cores, {args.threads} torch threads per worker",
        f"- torch {ctx['torch']}, torch_geometric {ctx['torch_geometric']}, torch_segops {ctx['torch_segops']} "
        f"(git {ctx['git']}), Python {ctx['python']}",
        f"- graph: {args.edges:,} edges sorted by destination, {args.nodes:,} nodes, {args.feat} features, float32",
        f"- {args.rounds} rounds x {args.repeats} calls per case and variant, workers alternating; load average "
        f"(1/5/15 min) {', '.join(f'{x:.1f}' for x in load_before)} before, "
        f"{', '.join(f'{x:.1f}' for x in load_after)} after",
        "- `python benchmarks/bench_pyg.py " + " ".join(args.argv) + "`",
        "",
        "| case (forward + backward) | native PyG | with the alias | alias / native [per-round range] |",
        "|---|---|---|---|",
    ]
    for case in CASES:
        t = {v: statistics.median(samples[case][v]) for v in VARIANTS}
        ratios = [a / n for a, n in zip(per_round[case]["alias"], per_round[case]["native"])]
        lines.append(f"| {case} | {t['native'] * 1e3:.1f} ms | {t['alias'] * 1e3:.1f} ms | "
                     f"{t['alias'] / t['native']:.2f}x [{min(ratios):.2f}x-{max(ratios):.2f}x] |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--edges", type=int, default=2_000_000)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--feat", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="200k edges, 10k nodes, 3 rounds")
    parser.add_argument("--markdown", help="also write the table to this file")
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from benchmarks import plots

    plots.add_plot_argument(parser)
    args = parser.parse_args()
    plots.check_plot_argument(args)
    if args.worker:
        worker(args.worker, args.edges, args.nodes, args.feat, args.threads)
        return
    args.argv = sys.argv[1:]
    if args.quick:
        args.edges, args.nodes, args.rounds = 200_000, 10_000, 3
    table = run(args)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(table)
    plots.plot_from_script("pyg-alias", table, args, f"PyG with the torch_scatter alias, CPU, {args.threads} "
                           "threads: bench_pyg.py")


if __name__ == "__main__":
    main()
