"""CPU benchmark of torch_segops.scatter (deterministic: stable sort + segment reduction) against torch's
scatter_reduce_ / index_add_ (not deterministic on CUDA; on the CPU their sum order follows the thread
partition) for an unsorted index.

    python benchmarks/bench_scatter.py                       # a few minutes
    python benchmarks/bench_scatter.py --quick               # small shapes, seconds
    python benchmarks/bench_scatter.py --markdown benchmarks/results/scatter-cpu-<machine>-<date>.md

Candidates, timed in interleaved rounds (benchmarks/common.py): torch_segops.scatter sorting the index
in every call; the same with a precomputed plan (scatter_plan: the sort reused, as a GNN layer does
for a fixed graph); the plan alone (the sort + offsets, i.e. the part a plan saves); torch's
scatter_reduce_ (index expanded to src's shape, a stride-0 view) and index_add_ (sum only).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

if __package__ in (None, ""):  # run as a script (python benchmarks/bench_scatter.py): the benchmarks package from the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common as C  # noqa: E402
from benchmarks import plots  # noqa: E402

import torch_segops as so  # noqa: E402

SHAPES = [  # label, rows, features, targets
    ("1M x 64, 50k targets", 1_000_000, 64, 50_000),
    ("4M x 8, 200k targets", 4_000_000, 8, 200_000),
    ("5M x 1, 500k targets", 5_000_000, 1, 500_000),
    ("1M x 64, 16 targets", 1_000_000, 64, 16),
]
QUICK = [("100k x 64, 5k targets", 100_000, 64, 5_000), ("500k x 1, 50k targets", 500_000, 1, 50_000)]
NATIVE_REDUCE = {"sum": "sum", "mean": "mean", "max": "amax"}


def candidates(op, src, index, n):
    feat = src.shape[1:]
    idx_x = index.view(-1, *[1] * len(feat)).expand(src.shape)
    zeros = lambda: torch.zeros((n, *feat), dtype=src.dtype)  # noqa: E731
    plan = so.scatter_plan(index, n)
    fns = {
        "segops scatter": lambda: so.scatter(src, index, 0, dim_size=n, reduce=op),
        "segops scatter, plan": lambda: so.scatter(src, index, 0, dim_size=n, reduce=op, plan=plan),
        "plan alone (sort)": lambda: so.scatter_plan(index, n),
        "scatter_reduce_": lambda: zeros().scatter_reduce_(0, idx_x, src, NATIVE_REDUCE[op], include_self=False),
    }
    if op == "sum":
        fns["index_add_"] = lambda: zeros().index_add_(0, index, src)
    return fns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ops", default="sum,mean,max")
    ap.add_argument("--max-seconds", type=float, default=20.0, help="time budget per shape and op")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--markdown", help="write the results as markdown to this file")
    plots.add_plot_argument(ap)
    args = ap.parse_args()
    plots.check_plot_argument(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = QUICK if args.quick else SHAPES
    rows = []
    for label, n_rows, feat, n in shapes:
        g = torch.Generator().manual_seed(0)
        src = torch.randn((n_rows, feat) if feat > 1 else (n_rows,), generator=g)
        index = torch.randint(0, n, (n_rows,), generator=g)
        for op in args.ops.split(","):
            fns = candidates(op, src, index, n)
            # correctness first: the deterministic result agrees with torch's (float64 reference)
            ref = torch.zeros((n, *src.shape[1:]), dtype=torch.float64).scatter_reduce_(
                0, index.view(-1, *[1] * (src.dim() - 1)).expand(src.shape), src.double(), NATIVE_REDUCE[op],
                include_self=False)
            torch.testing.assert_close(fns["segops scatter"]().double(), ref, rtol=1e-4, atol=1e-4)
            med, per_round = C.interleaved_times(fns, rounds=args.rounds, repeats=3, max_seconds=args.max_seconds)
            natives = [k for k in ("scatter_reduce_", "index_add_") if med.get(k)]
            best = min(natives, key=lambda k: med[k])
            ratios = {k: [s / b for s, b in zip(per_round[k], per_round[best])] for k in
                      ("segops scatter", "segops scatter, plan")}
            rows.append((label, op, med, best, ratios))
            print(f"{label:24s} {op:4s} " + "  ".join(f"{k} {v * 1e3:8.1f} ms" for k, v in med.items() if v)
                  + f"  | sort every call {med['segops scatter'] / med[best]:.2f}x, plan "
                  f"{med['segops scatter, plan'] / med[best]:.2f}x the time of {best}", flush=True)
    names = ["segops scatter", "segops scatter, plan", "plan alone (sort)", "scatter_reduce_", "index_add_"]
    table = ["| shape (fp32) | op | " + " | ".join(names) + " | sort every call / fastest torch | plan / fastest torch |",
             "|" + "---|" * (len(names) + 4)]
    for label, op, med, best, ratios in rows:
        cells = [C._fmt_time(med.get(k)) if k in med else "-" for k in names]
        rs = [f"{med[k] / med[best]:.2f}x ({best}){C._range(ratios[k], '{:.2f}x')}"
              for k in ("segops scatter", "segops scatter, plan")]
        table.append(f"| {label} | {op} | " + " | ".join(cells) + " | " + " | ".join(rs) + " |")
    if args.markdown:
        env = C.environment()
        lines = ["# Deterministic scatter vs torch's scatter_reduce_ / index_add_ (CPU)", "",
                 *[f"- {k}: {v}" for k, v in env.items()], "",
                 "Median times over interleaved rounds; the ratio columns are torch_segops' time divided by the "
                 "fastest torch op's in the same round (above 1: slower), median and [range over rounds].", "",
                 *table]
        with open(args.markdown, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        print("wrote", args.markdown)
    plots.plot_from_script("scatter-vs-torch", "\n".join(table), args,
                           f"deterministic scatter vs torch, CPU, {torch.get_num_threads()} threads: bench_scatter.py")


if __name__ == "__main__":
    main()
