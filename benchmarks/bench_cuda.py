"""GPU benchmark of torch_segops against torch-native alternatives (and pytorch_scatter if installed).

    python benchmarks/bench_cuda.py                       # full grid (a few minutes on an H100)
    python benchmarks/bench_cuda.py --quick               # small inputs, one pass over every kernel path
    python benchmarks/bench_cuda.py --markdown benchmarks/results/cuda-<gpu>.md
    python benchmarks/bench_cuda.py --features 1 64 --dists uniform --dtypes float32 --ops sum softmax

Grid: segment-length distributions (uniform: random cut points, mean length 8; power-law: Pareto
lengths, alpha 1.2; few-huge: 3 segments with 90% of the rows plus many of length 0..8; hub: uniform
with mean length 8 after one first segment holding a quarter of the rows, a graph's hub node), dtypes
float32 and bfloat16, feature dims 1, 16, 64, 256 with rows chosen so every input has the same number
of elements (2^26 full, 2^22 quick). Ops: sum, mean, max (with argmax), logsumexp, softmax, gather.

Per case: median time over CUDA events after warmup, for torch_segops, torch.segment_reduce
(offsets=, unsafe=True), scatter_reduce_ / index_add_ / index_select with a precomputed row->segment
index (not timed), torch_scatter when installed; GB/s = (src + out + indptr bytes) / time; and the
same run's device-to-device copy bandwidth (dst.copy_(src) on the op's big tensor: 2 x bytes / time),
which is what a perfect single-pass kernel approaches. "% of copy" = torch_segops GB/s / copy GB/s.
Each torch_segops result is also checked against the fastest native alternative (or torch_scatter).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys

import torch

if __package__ in (None, ""):  # run as a script (python benchmarks/bench_cuda.py): the benchmarks package from the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common as C  # noqa: E402
from benchmarks import plots  # noqa: E402

try:  # research/gpu_model/model.py imports this module for make_indptr only, without a built library
    import torch_segops as so  # noqa: E402
except ImportError:  # pragma: no cover
    so = None

DISTS = ("uniform", "power-law", "few-huge", "hub")
OPS = ("sum", "mean", "max", "logsumexp", "softmax", "gather")
FEATURES = (1, 16, 64, 256)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


# ---- inputs -------------------------------------------------------------------------------------------

def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def make_indptr(rows: int, dist: str, gen: torch.Generator) -> torch.Tensor:
    """Offsets over [0, rows] with the named segment-length distribution (CPU int64)."""
    if dist == "uniform":
        return C.random_indptr(rows, max(1, rows // 8), gen)
    if dist == "power-law":
        n = max(1, rows // 32)
        u = torch.rand(n, generator=gen, dtype=torch.float64).clamp_(min=1e-12)
        w = u.pow(-1.0 / 1.2)  # Pareto(alpha=1.2): heavy tail, a few segments get most rows
        lengths = (w / w.sum() * rows).floor().long()
        lengths[torch.argmax(lengths)] += rows - int(lengths.sum())
        return torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    if dist == "few-huge":
        tiny = torch.randint(0, 9, (max(1, rows // 64),), generator=gen)
        tiny = (tiny * (rows * 0.1 / max(1, int(tiny.sum())))).long()
        huge_total = rows - int(tiny.sum())
        huge = torch.tensor([huge_total // 3, huge_total // 3, huge_total - 2 * (huge_total // 3)])
        lengths = torch.cat([tiny[: len(tiny) // 3], huge[:1], tiny[len(tiny) // 3: 2 * len(tiny) // 3], huge[1:2],
                             tiny[2 * len(tiny) // 3:], huge[2:]])
        return torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    if dist == "hub":
        hub = rows // 4
        rest = C.random_indptr(rows - hub, max(1, (rows - hub) // 8), gen) + hub
        return torch.cat([torch.zeros(1, dtype=torch.long), rest])
    raise ValueError(dist)


DEVICE = "cuda"
SCREEN = 64  # alternatives are first timed on every SCREEN-th row
MAX_ALT_SECONDS = 1.0  # estimated slower than this: reported as "~estimate", not timed


def cuda_time(fn, repeats: int, warmup: int) -> float:
    """Median seconds of fn() measured with CUDA events (wall clock with --device cpu, a smoke test)."""
    if DEVICE != "cuda":
        return C.median_time(fn, repeats=repeats, warmup=warmup)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def try_cuda_time(fn, repeats, warmup):
    try:
        return cuda_time(fn, repeats, warmup)
    except (RuntimeError, NotImplementedError, TypeError):
        return None


# ---- ops ---------------------------------------------------------------------------------------------

def segops_fn(op, src, indptr, n_out_rows):
    if op in ("sum", "mean", "logsumexp", "max"):  # one op per reduction; max returns (values, argmax)
        reduce = getattr(torch.ops.torch_segops, f"segment_{op}")
        return lambda: reduce(src, indptr)
    if op == "softmax":
        return lambda: so.segment_softmax_csr(src, indptr)
    if op == "gather":
        return lambda: so.gather_csr(src, indptr, size=n_out_rows)  # size given: no host sync
    raise ValueError(op)


def _values(r):
    return r[0] if isinstance(r, tuple) else r


def check_against(op, got, ref, dtype):
    got, ref = _values(got).float(), _values(ref).float()
    # empty segments: the alternatives give -inf (max, logsumexp) where torch_segops gives 0; skip them
    mask = torch.isfinite(ref)
    got, ref = got[mask], ref[mask]
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-4
    return torch.allclose(got.double(), ref.double(), rtol=tol, atol=tol)


# ---- runner --------------------------------------------------------------------------------------------

def run_case(dist, feat, dtype, ops, elems, reps, warmup, seed=0):
    gen = torch.Generator().manual_seed(seed)
    rows = max(1, elems // feat)
    indptr_cpu = make_indptr(rows, dist, gen)
    n_seg = indptr_cpu.numel() - 1
    indptr = indptr_cpu.to(DEVICE)
    shape = (rows, feat) if feat > 1 else (rows,)
    dgen = torch.Generator(device=DEVICE).manual_seed(seed)  # data made on the device: CPU randn dominated the run
    src = torch.randn(shape, generator=dgen, device=DEVICE).to(dtype)
    index = C.index_from_indptr(indptr)
    lengths = indptr_cpu[1:] - indptr_cpu[:-1]
    results = []
    for op in ops:
        if op == "gather":
            op_src = torch.randn((n_seg, feat) if feat > 1 else (n_seg,), generator=dgen, device=DEVICE).to(dtype)
        else:
            op_src = src
        fn = segops_fn(op, op_src, indptr, rows)
        out = fn()
        outs = out if isinstance(out, tuple) else (out,)
        big = outs[0] if op == "gather" else op_src
        dst = torch.empty_like(big)
        copy_t = cuda_time(lambda: dst.copy_(big), reps, warmup)
        seg_t = cuda_time(fn, reps, warmup)
        alts = C.alternatives(op, op_src, indptr, index, n_seg, rows)
        # Screen the alternatives on every SCREEN-th row (all segments, each SCREEN times shorter): float
        # atomics on a few addresses (index_add_/scatter_reduce_ in bfloat16 on huge segments) can take
        # seconds per call, which would dominate the whole run. Those are reported as estimates (an upper
        # bound where the cost grows with the segment count rather than the rows).
        screen = {} if op == "gather" else C.alternatives(
            op, op_src[::SCREEN].contiguous(), (indptr + SCREEN - 1) // SCREEN, index[::SCREEN].contiguous(), n_seg,
            ceil_div(rows, SCREEN))
        alt_t = {}
        for name, a in alts.items():
            est = try_cuda_time(screen[name], 1, 1) if name in screen else 0.0
            if est is not None and est * SCREEN > MAX_ALT_SECONDS:
                alt_t[name] = ("est", est * SCREEN)
            else:
                alt_t[name] = try_cuda_time(a, reps, warmup)
        del screen
        # correctness: the first native alternative, evaluated in float64, is the reference
        ok = None
        ref_alts = C.alternatives(op, op_src.double(), indptr, index, n_seg, rows)
        for name in list(C.NATIVE) + ["torch_scatter"]:
            if name in ref_alts:
                try:
                    ok = check_against(op, out, ref_alts[name](), dtype)
                except RuntimeError:
                    continue
                break
        del ref_alts
        results.append(dict(
            dist=dist, feat=feat, dtype=str(dtype).replace("torch.", ""), op=op, rows=rows, segments=n_seg,
            max_len=int(lengths.max()) if n_seg else 0, nbytes=C.nbytes(op_src, indptr, *outs),
            copy_bytes=2 * C.nbytes(big), segops=seg_t, copy=copy_t, alts=alt_t, agrees=ok))
        print(f"  done: {dist} F={feat} {dtype} {op}", file=sys.stderr, flush=True)
        del out, outs, big, dst
    return results


def _fmt_t(t):
    if t is None:
        return "n/a"
    if isinstance(t, tuple):  # ("est", seconds): screened, too slow to time in full
        return f"~{t[1]:.1f} s (est.)"
    return f"{t * 1e3:.3f} ms" if t >= 1e-3 else f"{t * 1e6:.1f} us"


def table(results, markdown=False):
    columns = []
    for r in results:
        for name in r["alts"]:
            if name not in columns:
                columns.append(name)
    header = ["dist", "F", "dtype", "op", "segments (max len)", "torch_segops", "GB/s", "% of copy"] + columns + [
        "speedup vs best native", "copy GB/s", "agrees"]
    body = []
    for r in results:
        gbps = r["nbytes"] / r["segops"] / 1e9
        copy_gbps = r["copy_bytes"] / r["copy"] / 1e9
        native = [(t[1] if isinstance(t, tuple) else t, n) for n, t in r["alts"].items() if n in C.NATIVE and t]
        best = min(native) if native else None
        body.append([
            r["dist"], str(r["feat"]), r["dtype"], r["op"], f"{r['segments']} ({r['max_len']})", _fmt_t(r["segops"]),
            f"{gbps:.0f}", f"{100 * gbps / copy_gbps:.0f}%",
            *[_fmt_t(r["alts"].get(c)) if c in r["alts"] else "-" for c in columns],
            f"{best[0] / r['segops']:.2f}x ({best[1]})" if best else "n/a", f"{copy_gbps:.0f}",
            {True: "yes", False: "NO", None: "-"}[r["agrees"]],
        ])
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        return "\n".join(lines + ["| " + " | ".join(b) + " |" for b in body])
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.rjust(w) if i >= 5 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(b) for b in body])


NOTES = """\
- Times: median of CUDA-event timings after warmup. GB/s = (src + out + indptr bytes) / time (max also
  writes its int64 argmax; gather's src is the per-segment tensor and its output the expanded one).
- "copy GB/s": dst.copy_(src) on the op's big tensor in the same run, counting read + write; a
  single-pass kernel that reads src once and writes a small output approaches it.
- Native alternatives get a precomputed row->segment index (not timed). torch_segops max also returns
  argmax, which torch.segment_reduce and scatter_reduce_ do not. "agrees": torch_segops' values match
  a native alternative computed in float64 (rtol = atol = 1e-4 for float32, 1e-2 for bfloat16; empty
  segments, where the alternatives give -inf, are skipped).
- Every input has the same number of elements, so rows = elements / F.
- "~X s (est.)": the alternative would take over 1 s per call by an estimate (its time on every 64th row,
  times 64), so it was not timed in full; float atomics on a few addresses do that. Where the cost grows
  with the segment count instead of the rows, the estimate is too high.
"""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="2^22 elements per input instead of 2^26")
    p.add_argument("--dists", nargs="+", default=list(DISTS), choices=DISTS)
    p.add_argument("--features", nargs="+", type=int, default=list(FEATURES))
    p.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    p.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    p.add_argument("--reps", type=int, default=None, help="timed repeats per measurement (median)")
    p.add_argument("--markdown", metavar="FILE", help="also write the table as markdown to FILE")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cpu: smoke-test this script without a GPU (timings meaningless)")
    plots.add_plot_argument(p)
    args = p.parse_args(argv)
    plots.check_plot_argument(args)
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cpu":
        elems = 1 << 14
        reps, warmup = 1, 0
        results = []
        for dist, dtype_name, feat in itertools.product(args.dists, args.dtypes, args.features):
            results += run_case(dist, feat, DTYPES[dtype_name], args.ops, elems, reps, warmup)
        print(table(results))
        bad = [r for r in results if r["agrees"] is False]
        print(f"{len(results) - len(bad)} passed, {len(bad)} failed")
        plots.plot_from_script("cuda-bandwidth", table(results, markdown=True), args,
                               "bench_cuda.py --device cpu (a smoke test: timings meaningless)")
        return 1 if bad else 0
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to benchmark", file=sys.stderr)
        return 2
    if so.build_info().get("variant") != "cuda":
        print("torch_segops was built without CUDA (build_info()['variant'] != 'cuda')", file=sys.stderr)
        return 2
    elems = 1 << (22 if args.quick else 26)
    reps = args.reps or (5 if args.quick else 20)
    warmup = 2 if args.quick else 5

    env = C.environment("cuda")
    info = so.build_info()
    env["torch_segops CUDA"] = f"{info.get('cuda_version')} archs {';'.join(info.get('cuda_archs') or [])}"
    env["torch CUDA"] = str(torch.version.cuda)
    cap = torch.cuda.get_device_capability()
    env["gpu"] = f"{torch.cuda.get_device_name()} (sm_{cap[0]}{cap[1]})"
    for k, v in env.items():
        print(f"{k}: {v}")
    cmd = " ".join(argv if argv is not None else sys.argv[1:])

    def write_markdown(done):
        with open(args.markdown, "w") as fh:
            fh.write(f"# torch_segops CUDA benchmark ({'quick' if args.quick else 'full'})\n\n")
            if not done:
                fh.write("**Partial: the run did not finish; the rows below are the cases measured so far.**\n\n")
            for k, v in env.items():
                fh.write(f"- {k}: {v}\n")
            fh.write(f"- command: `python benchmarks/bench_cuda.py {cmd}`\n\n")
            fh.write(table(results, markdown=True) + "\n\n" + NOTES)

    if args.markdown:
        os.makedirs(os.path.dirname(os.path.abspath(args.markdown)), exist_ok=True)
    results = []
    for dist, dtype_name, feat in itertools.product(args.dists, args.dtypes, args.features):
        results += run_case(dist, feat, DTYPES[dtype_name], args.ops, elems, reps, warmup)
        torch.cuda.empty_cache()
        if args.markdown:  # after every case, so that a run cut short still leaves its rows
            write_markdown(done=False)
    print()
    print(table(results))
    print()
    print(NOTES)
    if args.markdown:
        write_markdown(done=True)
        print(f"markdown written to {args.markdown}")
    plots.plot_from_script("cuda-bandwidth", table(results, markdown=True), args,
                           f"CUDA, {env['gpu']}: bench_cuda.py{' --quick' if args.quick else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
