"""Per-kernel GPU times of torch_segops' CUDA ops, each reduction plan forced in turn.

    python benchmarks/cuda_kernel_times.py                          # the default cases, markdown to stdout
    python benchmarks/cuda_kernel_times.py --markdown out.md --elems 4194304

Each case (op, distribution, F, plan) runs the op a few times under torch.profiler (CUPTI kernel activity) and
reports every kernel it launched: launches per call, mean microseconds per launch and the share of the call's
GPU time. That shows what the memory model cannot see on its own: the tiny serial launches (Partition, the
level and fixup kernels, publish), partial waves, and which launch dominates. Nsight Systems would do the same,
but `nsys` is not usable on the GPU machines this project is lent (docs/cuda.md); torch.profiler is in every
CUDA torch. Plans are forced with torch_segops.set_cuda_plans (TORCH_SEGOPS_CUDA_PLANS) and checked with
cuda_plan_counts.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys

import torch

if __package__ in (None, ""):  # run as a script (python benchmarks/cuda_kernel_times.py): the benchmarks package from the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import bench_cuda as BC  # noqa: E402
import torch_segops as so  # noqa: E402

PLAN_SPECS = {"short": "short", "merge": "merge", "block": "block,merge"}
# (op, dist, F, plan): every plan on the shapes it is chosen for by default, and forced onto the others
CASES = [
    ("sum", "uniform", 16, "short"), ("sum", "uniform", 16, "merge"),
    ("sum", "hub", 16, "short"), ("sum", "hub", 16, "merge"),
    ("sum", "power-law", 64, "merge"), ("sum", "power-law", 64, "short"),
    ("sum", "uniform", 1, "block"), ("sum", "uniform", 1, "merge"), ("sum", "uniform", 1, "short"),
    ("max", "few-huge", 16, "merge"), ("softmax", "uniform", 16, "short"), ("softmax", "uniform", 1, "block"),
    ("gather", "uniform", 16, "short"),
]


def short_name(kernel: str) -> str:
    m = re.search(r"run_(?:block_)?kernel<(?:torch_segops::cuda::)?([A-Za-z]+)", kernel)
    return m.group(1) if m else kernel[:60]


def run_op(op: str, src: torch.Tensor, indptr: torch.Tensor, seg: torch.Tensor):
    if op == "gather":
        return so.gather_csr(seg, indptr, size=src.shape[0])
    if op == "softmax":
        return so.segment_softmax_csr(src, indptr)
    return so.segment_csr(src, indptr, reduce=op)


def profile_case(op: str, dist: str, feat: int, plan: str, elems: int, calls: int = 5) -> dict:
    rows = max(1, elems // feat)
    gen = torch.Generator().manual_seed(0)
    indptr = BC.make_indptr(rows, dist, gen).cuda()
    src = torch.randn(rows, feat, device="cuda")
    seg = torch.randn(indptr.numel() - 1, feat, device="cuda")
    previous = so.set_cuda_plans(PLAN_SPECS[plan])
    try:
        for _ in range(3):
            run_op(op, src, indptr, seg)
        torch.cuda.synchronize()
        before = so.cuda_plan_counts()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                run_op(op, src, indptr, seg)
            torch.cuda.synchronize()
        after = so.cuda_plan_counts()
    finally:
        so.set_cuda_plans(previous)
    ran = sorted(k for k in after if after[k] > before[k])
    per = collections.defaultdict(lambda: [0, 0.0])
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA and "torch_segops" in ev.name:
            d = per[short_name(ev.name)]
            d[0] += 1
            d[1] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
    total = sum(v[1] for v in per.values()) / calls
    kernels = [(k, v[0] / calls, v[1] / max(v[0], 1), v[1] / calls / total if total else 0) for k, v in per.items()]
    return {"op": op, "dist": dist, "feat": feat, "plan": plan, "ran": ran, "rows": rows,
            "segments": indptr.numel() - 1, "total_us": total, "kernels": sorted(kernels, key=lambda x: -x[3])}


def markdown(results: list[dict], meta: str) -> str:
    lines = [f"# torch_segops CUDA kernels, time per launch ({meta})", "",
             "| op | dist | F | plan forced (ran) | GPU us per call | kernels: launches per call x mean us (share) |",
             "|---|---|---|---|---|---|"]
    for r in results:
        ks = "; ".join(f"{k} {n:g} x {us:.1f} ({share:.0%})" for k, n, us, share in r["kernels"])
        lines.append(f"| {r['op']} | {r['dist']} | {r['feat']} | {r['plan']} ({','.join(r['ran']) or '-'}) "
                     f"| {r['total_us']:.1f} | {ks} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--elems", type=int, default=1 << 26, help="elements per input (default 2^26, as bench_cuda.py)")
    p.add_argument("--markdown", help="also write the table here")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to time", file=sys.stderr)
        return 2
    meta = (f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.elems} elements per input, "
            f"CUDA events of torch.profiler")
    results = [profile_case(*c, elems=args.elems) for c in CASES]
    text = markdown(results, meta)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
