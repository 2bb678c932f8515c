"""CPU benchmark of the COO and scatter functions against pytorch_scatter (the library they replace) and
torch's own scatter_reduce_ / index_add_ / index_select, on a sorted and a shuffled index.

    PYTHONPATH=<dir holding torch_scatter> python benchmarks/bench_coo.py --markdown benchmarks/results/<file>.md
    python benchmarks/bench_coo.py --quick        # small shapes, seconds

pytorch_scatter is optional (never a dependency): built from its sdist against the same torch, it is found
on the path; without it its columns are n/a. Every case times its candidates in interleaved rounds
(benchmarks/common.py) and reports, per candidate, the median over rounds of its time divided by
pytorch_scatter's in the same round (< 1: torch_segops is faster), so that a shared, noisy machine slows
both sides alike. Targets (issue #26): every COO and scatter case <= 1.0 against pytorch_scatter, and scatter
on a sorted index within 1.5x of segment_coo on the same data ("vs segment_coo" column). The GNN shapes
(issue #38: messages of 2M edges scattered to 200k nodes, F = 64 and F = 1) run on a shuffled index only.
--threads 1,2 runs everything at each thread count and adds a table of ours' thread scaling.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

if __package__ in (None, ""):  # run as a script (python benchmarks/bench_coo.py): the benchmarks package from the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common as C  # noqa: E402
from benchmarks import plots  # noqa: E402

import torch_segops as so  # noqa: E402

ts = C.torch_scatter
SHAPES = [("1M x 64", 1_000_000, 64), ("4M x 8", 4_000_000, 8), ("20M x 1", 20_000_000, 1),
          ("GNN 2M x 64", 2_000_000, 64), ("GNN 2M x 1", 2_000_000, 1)]
GNN_ORDERS = ("shuffled",)
QUICK = [("100k x 16", 100_000, 16), ("1M x 1", 1_000_000, 1)]
ROWS_PER_TARGET = 10
REDUCTIONS = ("sum", "mean", "mul", "min", "max")
NATIVE = {"sum": "sum", "mean": "mean", "mul": "prod", "min": "amin", "max": "amax"}


def _inputs(rows: int, feat: int, order: str):
    g = torch.Generator().manual_seed(0)
    n = rows // ROWS_PER_TARGET
    src = torch.randn((rows, feat) if feat > 1 else (rows,), generator=g)
    index = torch.randint(0, n, (rows,), generator=g)
    if order == "sorted":
        index = index.sort().values
    return src, index, n


def cases(rows: int, feat: int, orders=("sorted", "shuffled"), reductions=REDUCTIONS):
    """(case, index order, {candidate: fn}); "segops" is ours, "pytorch_scatter" the anchor."""
    for order in orders:
        src, index, n = _inputs(rows, feat, order)
        feat_shape = src.shape[1:]
        idx_x = index.view(-1, *[1] * len(feat_shape)).expand(src.shape)
        zeros = lambda: torch.zeros((n, *feat_shape), dtype=src.dtype)  # noqa: E731
        if order == "sorted":
            for op in [r for r in reductions if r != "mul"]:  # pytorch_scatter's segment_coo has no mul
                yield f"segment_coo {op}", order, {
                    "segops": lambda op=op: so.segment_coo(src, index, dim_size=n, reduce=op),
                    "pytorch_scatter": ts and (lambda op=op: ts.segment_coo(src, index, dim_size=n, reduce=op)),
                }
            table = src[:n]
            yield "gather_coo", order, {
                "segops": lambda: so.gather_coo(table, index),
                "pytorch_scatter": ts and (lambda: ts.gather_coo(table, index)),
                "torch index_select": lambda: table.index_select(0, index),
            }
        for op in reductions:
            fns = {
                "segops": lambda op=op: so.scatter(src, index, 0, dim_size=n, reduce=op),
                "pytorch_scatter": ts and (lambda op=op: ts.scatter(src, index, 0, dim_size=n, reduce=op)),
                "torch scatter_reduce_": lambda op=op: zeros().scatter_reduce_(0, idx_x, src, NATIVE[op],
                                                                               include_self=False),
            }
            if op == "sum":
                fns["torch index_add_"] = lambda: zeros().index_add_(0, index, src)
            if order == "sorted":
                fns["segment_coo"] = lambda op=op: so.segment_coo(src, index, dim_size=n, reduce=op)
            yield f"scatter {op}", order, fns
        plan = so.scatter_plan(index, n)
        for op in reductions:
            fns = {
                "segops": lambda op=op: so.scatter(src, index, 0, dim_size=n, reduce=op, plan=plan),
                "pytorch_scatter": ts and (lambda op=op: ts.scatter(src, index, 0, dim_size=n, reduce=op)),
            }
            if op == "sum":
                fns["scatter_plan alone"] = lambda: so.scatter_plan(index, n)
            yield f"scatter {op}, plan=", order, fns


def _ratio(per_round: dict, a: str, b: str):
    if not per_round.get(a) or not per_round.get(b):
        return None
    return statistics.median(x / y for x, y in zip(per_round[a], per_round[b]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-seconds", type=float, default=15.0, help="time budget per case")
    ap.add_argument("--shapes", help="comma-separated labels of SHAPES to run (default: all)")
    ap.add_argument("--orders", default="sorted,shuffled", help="index orders to run")
    ap.add_argument("--reduce", default=",".join(REDUCTIONS), help="comma-separated reductions of the scatter cases")
    ap.add_argument("--threads", help="comma-separated thread counts, each run in turn (default: torch's)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: time.process_time (one thread on a loaded machine; with more, it counts spinning)")
    ap.add_argument("--markdown", help="append the results as markdown to this file")
    plots.add_plot_argument(ap)
    args = ap.parse_args()
    plots.check_plot_argument(args)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    thread_counts = [int(t) for t in args.threads.split(",")] if args.threads else [torch.get_num_threads()]
    shapes = QUICK if args.quick else [s for s in SHAPES if not args.shapes or s[0] in args.shapes.split(",")]
    lines = []
    ours = {}  # (shape, order, case) -> {threads: our median time}
    load_before = os.getloadavg()
    for threads, (label, rows, feat) in ((t, s) for s in shapes for t in thread_counts):
        torch.set_num_threads(threads)
        rounds = args.rounds if rows < 10_000_000 else max(3, args.rounds - 2)
        orders = [o for o in args.orders.split(",") if not label.startswith("GNN") or o in GNN_ORDERS]
        for case, order, fns in cases(rows, feat, orders, args.reduce.split(",")):
            fns = {k: v for k, v in fns.items() if v}
            med, per_round = C.interleaved_times(fns, rounds=rounds, repeats=2, max_seconds=args.max_seconds,
                                                 clock=clock)
            ours.setdefault((label, order, case), {})[threads] = med.get("segops")
            vs_ps = _ratio(per_round, "segops", "pytorch_scatter")
            torch_names = [k for k in fns if k.startswith("torch ")]
            vs_torch = {k: _ratio(per_round, "segops", k) for k in torch_names}
            vs_coo = _ratio(per_round, "segops", "segment_coo")
            cells = [
                f"{label}", str(threads), order, case, C._fmt_time(med.get("segops")), C._fmt_time(med.get("pytorch_scatter")),
                f"{vs_ps:.2f}" if vs_ps else "n/a",
                ", ".join(f"{k[6:]} {v:.2f}" for k, v in vs_torch.items() if v) or "-",
                f"{vs_coo:.2f}" if vs_coo else "-",
                ", ".join(f"{k} {C._fmt_time(v)}" for k, v in med.items()
                          if k not in ("segops", "pytorch_scatter") and not k.startswith("torch ") and v) or "-",
            ]
            lines.append("| " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    table = ["| shape (fp32) | threads | index | case | segops | pytorch_scatter | segops / pytorch_scatter | "
             "segops / torch | segops / segment_coo | other |", "|" + "---|" * 10, *lines]
    scaling = []
    if len(thread_counts) > 1:
        t0 = thread_counts[0]
        scaling = ["", f"segops time at {t0} thread(s) / at each count (> 1: faster with more threads)", "",
                   "| shape (fp32) | index | case | " + " | ".join(f"{t} threads" for t in thread_counts[1:]) + " |",
                   "|" + "---|" * (3 + len(thread_counts) - 1)]
        for (label, order, case), by in ours.items():
            cells = [f"{by[t0] / by[t]:.2f}" if by.get(t0) and by.get(t) else "n/a" for t in thread_counts[1:]]
            scaling.append(f"| {label} | {order} | {case} | " + " | ".join(cells) + " |")
        print("\n".join(scaling))
    if args.markdown:
        env = C.environment()
        load = ", ".join(f"{a:.1f}/{b:.1f}" for a, b in zip(load_before, os.getloadavg()))
        head = ["", *[f"- {k}: {v}" for k, v in env.items()], f"- rounds: {args.rounds} (3 or more at 20M rows)",
                f"- threads: {', '.join(map(str, thread_counts))}; clock: {args.clock}",
                f"- load average (1/5/15 min, before/after): {load}", ""]
        with open(args.markdown, "a") as fh:
            fh.write("\n".join(head + table + scaling) + "\n")
        print("appended to", args.markdown)
    plots.plot_from_script("coo-vs-pytorch-scatter", "\n".join(table), args,
                           f"COO and scatter, CPU, {torch.get_num_threads()} threads: bench_coo.py")


if __name__ == "__main__":
    main()
