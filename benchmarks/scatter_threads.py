"""One-feature scatter on a shuffled index, 1 thread against 2, by output size: where the 2-thread call's
partition by ranges (docs/design.md, "scatter on the CPU") beats the one pass of 1 thread, and so where a sum's
2-thread call should stop folding in one pass (kCachedOutputBytes in cpu/scatter_kernels.cpp).

    python benchmarks/scatter_threads.py --markdown benchmarks/results/<file>.md
    python benchmarks/scatter_threads.py --rows 200000 --targets 1000,40000 --rounds 2   # seconds

Each case times the same call on 1 and 2 torch threads in interleaved rounds (the order alternating), in one
process; the ratio is the median over rounds of the 1-thread time over the 2-thread time in the same round
(> 1: the 2-thread call is faster). "2-thread path" is what the kernels take (the rule in docs/design.md):
a sum or product folds in one pass on 2 threads while its output takes at most 8 MiB, a mean partitions.
Run it against another build with TORCH_SEGOPS_LIBRARY=<its _C.so> to see its rule.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

if __package__ in (None, ""):  # run as a script: the benchmarks package from the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common as C  # noqa: E402

import torch_segops as so  # noqa: E402

ONE_PASS_OUTPUT_BYTES = 8 << 20  # cpu/scatter_kernels.cpp's kCachedOutputBytes
SERIAL_ELEMS = 1 << 17  # and its kSerialElems: a smaller call runs on the calling thread
INDEX_DTYPES = {"int64": torch.int64, "int32": torch.int32}


def two_thread_path(rows: int, reduce: str, targets: int, dtype: torch.dtype) -> str:
    if rows < SERIAL_ELEMS:
        return "one pass (serial)"
    itemsize = torch.empty((), dtype=dtype).element_size()
    return "one pass" if reduce in ("sum", "mul") and targets * itemsize <= ONE_PASS_OUTPUT_BYTES else "partition"


def measure(rows: int, targets: int, index_dtype: torch.dtype, reduce: str, rounds: int) -> dict:
    g = torch.Generator().manual_seed(0)
    src = torch.randn(rows, generator=g)
    index = torch.randint(0, targets, (rows,), generator=g).to(index_dtype)
    times = {1: [], 2: []}
    threads_before = torch.get_num_threads()
    try:
        for r in range(rounds):
            for t in (1, 2) if r % 2 == 0 else (2, 1):
                torch.set_num_threads(t)
                so.scatter(src, index, 0, dim_size=targets, reduce=reduce)  # warm: the output's pages, the pool
                t0 = time.perf_counter()
                so.scatter(src, index, 0, dim_size=targets, reduce=reduce)
                times[t].append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads_before)
    ratios = sorted(a / b for a, b in zip(times[1], times[2]))
    return {"one": statistics.median(times[1]), "two": statistics.median(times[2]),
            "ratio": statistics.median(ratios), "lo": ratios[0], "hi": ratios[-1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--targets", default="1600000,2000000,2800000,4000000,8000000",
                    help="comma-separated output sizes (fp32 elements)")
    ap.add_argument("--index", default="int64,int32", help="index dtypes")
    ap.add_argument("--reduce", default="sum")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--markdown", help="write the results as markdown to this file")
    args = ap.parse_args()
    lines = [f"### scatter {args.reduce}, {args.rows} rows x 1 feature (fp32), shuffled index, 1 thread vs 2", "",
             "| targets | output MiB | index | 1 thread ms | 2 threads ms | 1 / 2 threads [range] | 2-thread path |",
             "|---|---|---|---|---|---|---|"]
    for targets in (int(t) for t in args.targets.split(",")):
        for name in args.index.split(","):
            m = measure(args.rows, targets, INDEX_DTYPES[name], args.reduce, args.rounds)
            lines.append(f"| {targets} | {targets * 4 / 2**20:.1f} | {name} | {m['one'] * 1e3:.2f} | "
                         f"{m['two'] * 1e3:.2f} | {m['ratio']:.2f} [{m['lo']:.2f}-{m['hi']:.2f}] | "
                         f"{two_thread_path(args.rows, args.reduce, targets, torch.float32)} |")
            print(lines[-1], file=sys.stderr, flush=True)
    env = C.environment()
    lines += ["", *(f"- {k}: {v}" for k, v in env.items()), f"- {args.rounds} interleaved rounds", ""]
    C.emit("\n".join(lines), args.markdown)


if __name__ == "__main__":
    main()
