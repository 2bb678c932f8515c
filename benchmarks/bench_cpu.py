"""CPU benchmark of torch_segops against torch-native alternatives (and pytorch_scatter if installed).

    python benchmarks/bench_cpu.py                 # full shapes (a few minutes, ~3 GB RAM)
    python benchmarks/bench_cpu.py --quick         # small shapes, < 20 s
    python benchmarks/bench_cpu.py --threads 1 --markdown benchmarks/results/cpu-<machine>.md

Per shape and op, in interleaved rounds: time of torch_segops, torch.segment_reduce(offsets=...),
scatter_reduce_ / index_add_ with a precomputed row->segment index (not timed), torch_scatter
(column dropped when not installed), and src.sum() on the same tensor as the machine's read
bandwidth (the yardstick of reductions; gather's is a fill of its output size, softmax's a copy), and
torch's dense kernel on the same data (src.amax(0), src.sum(0), torch.logsumexp(src, 0), torch.softmax(src, 0)).
Ratios: speedup of torch_segops over the fastest torch-native alternative, speed relative to the dense
kernel, and torch_segops GB/s (src + out + indptr bytes) as a percentage of the yardstick's GB/s.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

if __package__ in (None, ""):  # run as a script (python benchmarks/bench_cpu.py): the benchmarks package from the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common as C  # noqa: E402
from benchmarks import plots  # noqa: E402

import torch_segops as so  # noqa: E402


def _segops(op, src, indptr, out=None):
    if op in ("sum", "mean", "mul"):
        return lambda: so.segment_csr(src, indptr, out=out, reduce=op)
    if op == "max":
        return lambda: so.segment_max_csr(src, indptr, out=out)
    if op == "min":
        return lambda: so.segment_min_csr(src, indptr, out=out)
    if op == "logsumexp":
        return lambda: so.segment_logsumexp_csr(src, indptr)
    if op == "gather":
        return lambda: so.gather_csr(src, indptr, out=out)
    if op == "softmax":
        return lambda: so.segment_softmax_csr(src, indptr)
    raise ValueError(op)


def run_case(label, rows, feat, n_seg, segmentation, dtype, ops, rounds, reps, max_seconds, seed=0):
    src, indptr = C.make_input(rows, feat, n_seg, dtype, segmentation, seed=seed)
    index = C.index_from_indptr(indptr)
    out_rows = []
    for op in ops:
        if op == "gather":
            op_src = torch.randn((n_seg, feat) if feat else (n_seg,), dtype=torch.float32).to(dtype)
        else:
            op_src = src
        fn = _segops(op, op_src, indptr)
        result = fn()
        outs = result if isinstance(result, tuple) else (result,)  # min/max write values and arg
        yard_kind, yard_fn, yard_bytes = C.yardstick(op, op_src, outs[0])
        dense_name, dense_fn = C.dense_kernel(op, op_src)
        alts = C.alternatives(op, op_src, indptr, index, n_seg, rows)
        if op not in ("softmax", "logsumexp"):  # the same op writing into a preallocated out=: no allocation, no first touch
            alts[SEGOPS_OUT] = _segops(op, op_src, indptr, out=torch.empty_like(outs[0]))
        fns = {SEGOPS: fn, YARD: yard_fn, **({DENSE: dense_fn} if dense_fn else {}), **alts}
        med, per_round = C.interleaved_times(fns, rounds=rounds, repeats=reps, max_seconds=max_seconds)
        row = C.Row(
            shape=label, op=op, dtype=str(dtype).replace("torch.", ""),
            nbytes=C.nbytes(op_src, indptr, *outs), yard_bytes=yard_bytes, segops=med[SEGOPS], yard=med[YARD],
            yard_kind=yard_kind, dense_name=dense_name, dense=med.get(DENSE),
            alternatives={n: med[n] for n in alts}, native=C.NATIVE,
        )
        for i, seg_t in enumerate(per_round[SEGOPS]):
            natives = [per_round[n][i] for n in C.NATIVE if per_round.get(n)]
            if natives:
                row.round_speedups.append(min(natives) / seg_t)
            yard_gbps = yard_bytes / per_round[YARD][i]
            row.round_yard_pct.append(100 * row.nbytes / seg_t / yard_gbps)
            if per_round.get(DENSE):
                row.round_dense.append(per_round[DENSE][i] / seg_t)
        out_rows.append(row)
        print(f"  done: {label} {op} {dtype}", file=sys.stderr, flush=True)
        del result, outs
    return out_rows


SEGOPS, SEGOPS_OUT, YARD, DENSE = "torch_segops", "torch_segops out=", "yardstick", "dense"
FULL = [
    # label, rows, feat, n_seg, segmentation, {dtype: ops}
    ("2M x 64, 100k random segments", 2_000_000, 64, 100_000, "random",
     {torch.float32: ["sum", "mean", "max", "min", "mul", "logsumexp", "gather", "softmax"], torch.bfloat16: ["sum"]}),
    ("20M x 1, 1M random segments", 20_000_000, 1, 1_000_000, "random",
     {torch.float32: ["sum", "max", "min", "mul"], torch.bfloat16: ["sum"]}),
    ("4M x 16, 4 skewed segments", 4_000_000, 16, 4, "skewed",
     {torch.float32: ["sum"], torch.bfloat16: ["sum"]}),
]
QUICK = [
    ("200k x 64, 10k random segments", 200_000, 64, 10_000, "random",
     {torch.float32: ["sum", "mean", "max", "min", "mul", "logsumexp", "gather", "softmax"], torch.bfloat16: ["sum"]}),
    ("2M x 1, 100k random segments", 2_000_000, 1, 100_000, "random",
     {torch.float32: ["sum", "max", "min", "mul"], torch.bfloat16: ["sum"]}),
    ("400k x 16, 4 skewed segments", 400_000, 16, 4, "skewed", {torch.float32: ["sum"], torch.bfloat16: ["sum"]}),
]

NOTES = """\
- Every candidate of a row (torch_segops, the yardstick, the dense kernel, each alternative) is timed in {rounds} interleaved rounds
  (the order rotating), so that a drift of this machine's speed hits all of them alike. Times are medians
  over all rounds; [lo-hi] after a ratio is its range over the rounds (each round's own ratio).
- GB/s = (src + out + indptr bytes) / time (min/max also write their int64 arg; gather's src is the
  per-segment tensor and its out the expanded one). Every call allocates its output, as user code does:
  on a VM where first-touch page faults are slow, that cost is in every column.
- "torch_segops out=" is the same call writing into a preallocated `out=` (not a native alternative, not in
  the speedup): the kernel without the output's allocation and first-touch page faults. On this project's
  VMs fresh memory is sometimes several times slower to touch than at other times (episodes lasting
  minutes), and a row whose torch_segops time is far above its out= time ran in one.
- Yardstick: what this machine does with the bytes the op must move, timed in the same rounds. Reductions
  (sum, mean, max, min, logsumexp): read bandwidth, `src.sum()`; gather: a fill of a new tensor of its
  output's size; softmax: a copy, `src.clone()` (reads src, writes a new tensor of its size). "segops % of
  yardstick" = torch_segops GB/s (src + out + indptr) / the yardstick's GB/s (the bytes it moves).
- "dense torch kernel": torch's own kernel over the same data as if it were one segment along dim 0
  (`src.sum(0)`, `src.mean(0)`, `src.amax(0)`, `src.amin(0)`, `torch.logsumexp(src, 0)`, `torch.softmax(src, 0)`);
  "vs dense kernel" = its time / torch_segops' time (above 1x: torch_segops is faster). The dense
  reductions write a single row; torch_segops writes one per segment (and min/max an int64 arg).
- "speedup vs best native" = fastest torch-native alternative time / torch_segops time (torch_scatter is
  not native and is shown for reference only). Native alternatives get a precomputed row->segment index
  (not timed); scatter_reduce_ reads it as a stride-0 expanded view. torch_segops min/max also return their arg,
  which torch.segment_reduce, scatter_reduce_ and the dense amax/amin do not.
- n/a: the alternative does not support this input.
"""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small shapes (< 20 s), for a demo")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads(N) (default: torch's)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds per row (default 5; quick: 3)")
    p.add_argument("--reps", type=int, default=None, help="timed repeats per candidate and round (default 3)")
    p.add_argument("--markdown", metavar="FILE", help="also write the table as markdown to FILE")
    p.add_argument("--ops", help="comma-separated ops to run (default: every op of each shape)")
    plots.add_plot_argument(p)
    args = p.parse_args(argv)
    plots.check_plot_argument(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    cases = QUICK if args.quick else FULL
    rounds = args.rounds or (3 if args.quick else 5)
    reps = args.reps or 3
    max_seconds = 2.0 if args.quick else 20.0
    env = C.environment("cpu")
    for k, v in env.items():
        print(f"{k}: {v}")
    rows = []
    for label, n, f, s, segm, per_dtype in cases:
        for dtype, ops in per_dtype.items():
            ops = [o for o in ops if not args.ops or o in args.ops.split(",")]
            if not ops:
                continue
            rows += run_case(label, n, f, s, segm, dtype, ops, rounds, reps, max_seconds)
    columns = []
    for r in rows:
        for name in r.alternatives:
            if name not in columns:
                columns.append(name)
    print()
    print(C.table(rows, columns))
    print()
    print(NOTES.format(rounds=rounds))
    if args.markdown:
        mode = "quick" if args.quick else "full"
        with open(args.markdown, "w") as fh:
            fh.write(f"# torch_segops CPU benchmark ({mode})\n\n")
            for k, v in env.items():
                fh.write(f"- {k}: {v}\n")
            fh.write(f"- command: `python benchmarks/bench_cpu.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n\n")
            fh.write(C.table(rows, columns, markdown=True) + "\n\n" + NOTES.format(rounds=rounds))
        print(f"markdown written to {args.markdown}")
    plots.plot_from_script("cpu-bandwidth", C.table(rows, columns, markdown=True), args,
                           f"CPU, fp32 unless noted: bench_cpu.py, {env['date']}")


if __name__ == "__main__":
    main()
