"""CPU segment min/max with arg against segment sum on the same data (issue #31's yardstick) and against
torch's dense `src.amax(0)`.

    python benchmarks/bench_extrema.py                       # the three shapes, 7 interleaved rounds
    python benchmarks/bench_extrema.py --markdown out.md     # also write a markdown table
    python benchmarks/bench_extrema.py --loop max --shape 2Mx64 --seconds 20   # one op in a loop (for perf record)

Per shape, in interleaved rounds (common.interleaved_times): segment sum, max and min with arg (fresh
outputs), max and min into preallocated values and arg (the segment_max_out op: no allocation, no
first touch), and
src.amax(0). Reported: medians, and per-round ratios max/sum and amax/max-into-out (so a drift of the
machine's memory speed between rounds cancels).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

if __package__ in (None, ""):  # run as a script (python benchmarks/bench_extrema.py): the benchmarks package from the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common as C  # noqa: E402
from benchmarks import plots  # noqa: E402

import torch_segops as so  # noqa: E402

# label -> (rows, features (0: a 1-D src), segments)
SHAPES = {"2Mx64": (2_000_000, 64, 100_000), "20Mx1": (20_000_000, 0, 1_000_000), "4Mx16": (4_000_000, 16, 200_000)}


def candidates(src, indptr):
    n_seg = indptr.numel() - 1
    shape = (n_seg, *src.shape[1:])
    out_v, out_a = torch.empty(shape, dtype=src.dtype), torch.empty(shape, dtype=torch.int64)
    return {
        "sum": lambda: so.segment_sum_csr(src, indptr),
        "max": lambda: so.segment_max_csr(src, indptr),
        "min": lambda: so.segment_min_csr(src, indptr),
        "max out=": lambda: torch.ops.torch_segops.segment_max_out(src, indptr, out_v, out_a),
        "min out=": lambda: torch.ops.torch_segops.segment_min_out(src, indptr, out_v, out_a),
        "amax(0)": lambda: src.amax(0),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", action="append", choices=list(SHAPES), help="default: all")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--loop", help="run this candidate in a loop instead of timing (for a profiler)")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--markdown")
    plots.add_plot_argument(ap)
    args = ap.parse_args(argv)
    plots.check_plot_argument(args)
    torch.set_num_threads(args.threads)
    lines = []
    for label in args.shape or list(SHAPES):
        rows, feat, n_seg = SHAPES[label]
        src, indptr = C.make_input(rows, feat, n_seg, torch.float32)
        fns = candidates(src, indptr)
        if args.loop:
            fn, end, n = fns[args.loop], time.time() + args.seconds, 0
            while time.time() < end:
                fn()
                n += 1
            print(f"{label} {args.loop}: {n} calls")
            continue
        med, per_round = C.interleaved_times(fns, rounds=args.rounds, repeats=args.repeats, max_seconds=60.0)
        ratio = lambda a, b: statistics.median(x / y for x, y in zip(per_round[a], per_round[b]))  # noqa: E731
        row = (f"| {label} ({n_seg} segs) | " + " | ".join(f"{med[k] * 1e3:.1f}" for k in fns) +
               f" | {ratio('max', 'sum'):.2f} | {ratio('min', 'sum'):.2f} | {ratio('max out=', 'sum'):.2f} | "
               f"{ratio('amax(0)', 'max out='):.2f} |")
        print(row, flush=True)
        lines.append(row)
    if lines:
        head = ("| shape | " + " | ".join(f"{k} ms" for k in candidates(torch.zeros(1), torch.tensor([0, 1]))) +
                " | max/sum | min/sum | max out=/sum | amax/(max out=) |")
        table = "\n".join([head, "|" + "---|" * (head.count("|") - 1), *lines])
        env = "\n".join(f"- {k}: {v}" for k, v in C.environment().items())
        text = (f"threads {args.threads}, {args.rounds} interleaved rounds x {args.repeats}, medians; ratios: median "
                f"of per-round ratios\n\n{table}\n\n{env}\n")
        C.emit(text, args.markdown)
        plots.plot_from_script("extrema", table, args, f"segment min/max vs sum, CPU, {args.threads} threads: "
                               "bench_extrema.py")


if __name__ == "__main__":
    main()
