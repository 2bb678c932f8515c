"""CPU benchmark of scatter on a shuffled index at scale (issue #38): torch_segops against pytorch_scatter and
torch's own index_add_ / scatter_reduce_, time and peak memory per call.

    PYTHONPATH=<dir holding torch_scatter> python benchmarks/bench_scatter_unsorted.py --markdown <file>.md
    python benchmarks/bench_scatter_unsorted.py --quick        # small shapes, seconds

Times: every case times its candidates in interleaved rounds (benchmarks/common.py), the order rotating from
round to round; the ratios are medians over rounds of ours / theirs in the same round (< 1: ours is faster).
Peak memory: each candidate called once more in a child process on the same inputs, after a warm-up call; the
peak resident set is reset (/proc/self/clear_refs 5) just before the call, and the column is VmHWM after it
minus VmRSS before it: the output and every temporary the call held at once, in MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import torch

if __package__ in (None, ""):  # run as a script: the benchmarks package from the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common as C  # noqa: E402
from benchmarks.bench_coo import _ratio  # noqa: E402
from benchmarks import plots  # noqa: E402

import torch_segops as so  # noqa: E402

ts = C.torch_scatter
# (rows, features, targets): 1e6..1e7 rows, F = 1, 16, 64, targets 1e3..1e6, and the GNN shapes of the issue
SHAPES = [(1_000_000, 1, 1_000), (1_000_000, 1, 100_000), (1_000_000, 16, 1_000), (1_000_000, 16, 100_000),
          (1_000_000, 64, 1_000), (1_000_000, 64, 100_000), (2_000_000, 1, 200_000), (2_000_000, 64, 200_000),
          (10_000_000, 1, 1_000), (10_000_000, 1, 1_000_000), (10_000_000, 16, 10_000),
          (10_000_000, 16, 1_000_000)]
QUICK = [(100_000, 1, 1_000), (100_000, 16, 10_000)]
REDUCES = ("sum", "mean", "max")
NATIVE = {"sum": "sum", "mean": "mean", "max": "amax"}


def inputs(rows: int, feat: int, targets: int):
    g = torch.Generator().manual_seed(0)
    src = torch.randn((rows, feat) if feat > 1 else (rows,), generator=g)
    index = torch.randint(0, targets, (rows,), generator=g)
    return src, index


def candidates(src: torch.Tensor, index: torch.Tensor, targets: int, reduce: str) -> dict:
    feat_shape = src.shape[1:]
    idx_x = index.view(-1, *[1] * len(feat_shape)).expand(src.shape)
    fns = {
        "segops": lambda: so.scatter(src, index, 0, dim_size=targets, reduce=reduce),
        "pytorch_scatter": ts and (lambda: ts.scatter(src, index, 0, dim_size=targets, reduce=reduce)),
        "torch scatter_reduce_": lambda: torch.zeros((targets, *feat_shape)).scatter_reduce_(
            0, idx_x, src, NATIVE[reduce], include_self=False),
    }
    if reduce == "sum":
        fns["torch index_add_"] = lambda: torch.zeros((targets, *feat_shape)).index_add_(0, index, src)
    return {k: v for k, v in fns.items() if v}


def _status() -> dict:
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


def child_peak(rows: int, feat: int, targets: int, reduce: str, name: str, threads: int) -> float:
    """In this (child) process: the peak extra resident memory of one call of candidate `name`, in MiB."""
    torch.set_num_threads(threads)
    src, index = inputs(rows, feat, targets)
    fn = candidates(src, index, targets, reduce)[name]
    fn()  # warm-up: thread pool, lazy initialisation
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    before = _status()["VmRSS"]
    result = fn()
    peak = _status()["VmHWM"]
    del result
    return (peak - before) / 2**20


def peaks(rows: int, feat: int, targets: int, reduce: str, names, threads: int) -> dict:
    out = {}
    for name in names:
        code = ("import sys, json; sys.path.insert(0, %r); from benchmarks.bench_scatter_unsorted import child_peak; "
                "print(json.dumps(child_peak(%d, %d, %d, %r, %r, %d)))"
                % (os.path.dirname(os.path.dirname(os.path.abspath(__file__))), rows, feat, targets, reduce, name,
                   threads))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        out[name] = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-seconds", type=float, default=12.0, help="time budget per case")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--shapes", help="rows:F:targets,... (default: SHAPES)")
    ap.add_argument("--markdown", help="append the results as markdown to this file")
    plots.add_plot_argument(ap)
    args = ap.parse_args()
    plots.check_plot_argument(args)
    torch.set_num_threads(args.threads)
    lines = []
    load_before = os.getloadavg()
    shapes = QUICK if args.quick else SHAPES
    if args.shapes:
        shapes = [tuple(int(float(v)) for v in s.split(":")) for s in args.shapes.split(",")]
    for rows, feat, targets in shapes:
        src, index = inputs(rows, feat, targets)
        for reduce in REDUCES:
            fns = candidates(src, index, targets, reduce)
            med, per_round = C.interleaved_times(fns, rounds=args.rounds, repeats=2, max_seconds=args.max_seconds)
            mem = {} if args.no_memory else peaks(rows, feat, targets, reduce, list(fns), args.threads)
            vs_ps = _ratio(per_round, "segops", "pytorch_scatter")
            vs_torch = {k[6:]: _ratio(per_round, "segops", k) for k in fns if k.startswith("torch ")}
            fmt_mem = lambda v: "n/a" if v is None else f"{v:.0f}"  # noqa: E731
            cells = [f"{rows:.0e} x {feat}", f"{targets:.0e}", reduce, C._fmt_time(med.get("segops")),
                     C._fmt_time(med.get("pytorch_scatter")), f"{vs_ps:.2f}" if vs_ps else "n/a",
                     ", ".join(f"{k} {v:.2f}" for k, v in vs_torch.items() if v) or "-",
                     " / ".join(fmt_mem(mem.get(k)) for k in fns) if mem else "-"]
            lines.append("| " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
        del src, index
    order = "segops / pytorch_scatter / torch scatter_reduce_ [/ torch index_add_]"
    table = ["| rows x F (fp32) | targets | reduce | segops | pytorch_scatter | segops / pytorch_scatter | "
             f"segops / torch | peak MiB per call ({order}) |", "|" + "---|" * 8, *lines]
    if args.markdown:
        env = C.environment()
        load = ", ".join(f"{a:.1f}/{b:.1f}" for a, b in zip(load_before, os.getloadavg()))
        head = ["", *[f"- {k}: {v}" for k, v in env.items()], f"- threads: {args.threads}, rounds: {args.rounds}",
                f"- load average (1/5/15 min, before/after): {load}", ""]
        with open(args.markdown, "a") as fh:
            fh.write("\n".join(head + table) + "\n")
        print("appended to", args.markdown)
    plots.plot_from_script("unsorted-vs-pytorch-scatter", "\n".join(table), args,
                           f"scatter, shuffled index, CPU, {args.threads} threads: bench_scatter_unsorted.py")


if __name__ == "__main__":
    main()
