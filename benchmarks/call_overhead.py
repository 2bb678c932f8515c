"""Per-call cost of small calls (CPU): the public functions against the op alone and torch's own ops.

    python benchmarks/call_overhead.py                 # a markdown table on stdout
    python benchmarks/call_overhead.py --rounds 9 --markdown out.md

On inputs this small (100 rows) the kernels' work is a few hundred nanoseconds: the time is the Python
wrapper (argument checks, broadcasting), torch.library's Python autograd layer (which every call of an op
with a Python-registered backward passes, with or without grad) and the op's dispatch and output
allocation. Candidates run interleaved round by round (benchmarks/common.py's rule); each round's time is
the best of `--repeats` loops of `--calls` calls; reported: the median over rounds, in microseconds per
call, and the median per-round ratio to torch's `scatter_add_` (pytorch_scatter's scatter_sum is that op
behind a Python broadcast of the index).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import torch_segops as so


def cases():
    g = torch.Generator().manual_seed(0)
    src1 = torch.randn(100, generator=g)
    src2 = torch.randn(100, 16, generator=g)
    index = torch.randint(0, 10, (100,), generator=g)
    indptr = torch.arange(0, 101, 10)
    op = torch.ops.torch_segops.scatter_sum
    return {
        "torch scatter_add_ (1-D)": lambda: torch.zeros(10).scatter_add_(0, index, src1),
        "torch index_add_ (100 x 16)": lambda: torch.zeros(10, 16).index_add_(0, index, src2),
        "op scatter_sum (1-D)": lambda: op(src1, index, 10, False),
        "scatter sum (1-D)": lambda: so.scatter(src1, index, 0, dim_size=10, reduce="sum"),
        "scatter sum (100 x 16)": lambda: so.scatter(src2, index, 0, dim_size=10, reduce="sum"),
        "scatter max (100 x 16)": lambda: so.scatter(src2, index, 0, dim_size=10, reduce="max"),
        "segment_csr sum (100 x 16)": lambda: so.segment_csr(src2, indptr, reduce="sum"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--markdown", help="also write the table to this file")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cands = cases()
    for f in cands.values():
        for _ in range(200):
            f()
    times = {k: [] for k in cands}
    names = list(cands)
    for r in range(args.rounds):
        for k in names[r % len(names):] + names[: r % len(names)]:  # the order rotates
            f = cands[k]
            best = float("inf")
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    f()
                best = min(best, (time.perf_counter() - t0) / args.calls)
            times[k].append(best * 1e6)
    ref = times["torch scatter_add_ (1-D)"]
    lines = [f"- torch {torch.__version__}, {args.threads} thread(s), {args.rounds} rounds, best of {args.repeats} "
             f"x {args.calls} calls a round", "",
             "| call | us per call | / torch scatter_add_ [range] |", "|---|---|---|"]
    for k in names:
        ratios = [a / b for a, b in zip(times[k], ref)]
        lines.append(f"| {k} | {statistics.median(times[k]):.1f} | {statistics.median(ratios):.2f} "
                     f"[{min(ratios):.2f}-{max(ratios):.2f}] |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
