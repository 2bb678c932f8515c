"""CPU kernels per instruction-set target and per build, interleaved round by round (issue #39).

    python benchmarks/simd_objects.py                                  # the installed library: every target this CPU runs
    python benchmarks/simd_objects.py --cand new= --cand old=OLD/_C.so # two builds, each on its default target
    python benchmarks/simd_objects.py --cand avx3=:avx3 --cand sse4=:sse4 --cand old=OLD/_C.so:avx2 --ref old
    python benchmarks/simd_objects.py --shape 20Mx1 --ops sum,max --rounds 9 --markdown out.md
    python benchmarks/simd_objects.py --shape 20Mx1s4 --shape 20Mx1s10 --ops sum,max,min   # short segments

A candidate is NAME=[LIBRARY][:TARGET] (an empty library: the installed one; no target: its default). Each
runs in a worker process of its own (TORCH_SEGOPS_LIBRARY and TORCH_SEGOPS_CPU_ISA are read once per
process) holding the same inputs (fixed seed). Per shape, every round times every candidate on every op
(the candidates' order rotating), `--repeats` calls each; a round's time is the median of its calls.
Reported: the median time per candidate and op, and the median over rounds of each round's ratio to the
reference candidate (--ref, default the first), so that a drift of this VM's memory speed between rounds
cancels. Extra rows: max and min with arg against sum of the same candidate, and gather (a new output)
against torch's repeat_interleave (with output_size) and index_select (with the row->segment index
precomputed, not timed), which each worker times too.

Ops: sum, mean (into preallocated out=), max and min with arg (segment_max_out / segment_min_out: values
and int64 arg preallocated), logsumexp and softmax (new outputs), gather (into out=; and a new output, as
repeat_interleave makes one).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

if __package__ in (None, ""):  # run as a script: the benchmarks package from the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# label -> (rows, features (0: a 1-D src), segments): random cut points (common.random_indptr)
SHAPES = {"2Mx64": (2_000_000, 64, 100_000), "4Mx16": (4_000_000, 16, 200_000), "20Mx1": (20_000_000, 0, 1_000_000)}
# only on request (--shape): every segment the same length (k-nearest-neighbour graphs), 4 and 10 rows
FIXED_SHAPES = {"20Mx1s4": (20_000_000, 0, 5_000_000), "20Mx1s10": (20_000_000, 0, 2_000_000)}
ALL_SHAPES = {**SHAPES, **FIXED_SHAPES}
OPS = ["sum", "mean", "max", "min", "logsumexp", "softmax", "gather"]
EXTRA = ["gather new", "repeat_interleave", "index_select"]  # gather with a new output, and torch's equivalents


# ---- the worker (one per candidate) ---------------------------------------------------------------------

def worker() -> None:
    import torch

    from benchmarks import common as C

    import torch_segops as so

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    fns: dict = {}
    reply = {"isa": so.build_info()["cpu_isa"], "isas": so.build_info()["cpu_isas"]}
    print(json.dumps(reply), flush=True)
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["cmd"] == "shape":
            fns.clear()
            rows, feat, n_seg = ALL_SHAPES[msg["shape"]]
            segmentation = "equal" if msg["shape"] in FIXED_SHAPES else "random"
            src, ip = C.make_input(rows, feat, n_seg, torch.float32, segmentation)
            shape = (n_seg, feat) if feat else (n_seg,)
            out_v, out_a = torch.empty(shape), torch.empty(shape, dtype=torch.int64)
            g = torch.randn(shape, generator=torch.Generator().manual_seed(1))
            out_g = torch.empty_like(src)
            counts = ip[1:] - ip[:-1]
            index = torch.repeat_interleave(torch.arange(n_seg), counts)  # precomputed, not timed
            ops = torch.ops.torch_segops
            fns.update({
                "sum": lambda: so.segment_csr(src, ip, out=out_v, reduce="sum"),
                "mean": lambda: so.segment_csr(src, ip, out=out_v, reduce="mean"),
                "max": lambda: ops.segment_max_out(src, ip, out_v, out_a),
                "min": lambda: ops.segment_min_out(src, ip, out_v, out_a),
                "logsumexp": lambda: so.segment_logsumexp_csr(src, ip),
                "softmax": lambda: so.segment_softmax_csr(src, ip),
                "gather": lambda: so.gather_csr(g, ip, out=out_g),
                "gather new": lambda: so.gather_csr(g, ip),
                "repeat_interleave": lambda: torch.repeat_interleave(g, counts, dim=0, output_size=rows),
                "index_select": lambda: g.index_select(0, index),
            })
            for fn in fns.values():  # warm up: first touches, the kept scratch memory
                fn()
            print(json.dumps({"ok": True}), flush=True)
        elif msg["cmd"] == "time":
            out = {}
            for op in msg["ops"]:
                times = []
                for _ in range(msg["repeats"]):
                    t0 = time.perf_counter()
                    fns[op]()
                    times.append(time.perf_counter() - t0)
                out[op] = statistics.median(times)
            print(json.dumps(out), flush=True)
        elif msg["cmd"] == "quit":
            return


class Worker:
    def __init__(self, name: str, lib: str | None, isa: str | None, threads: int):
        env = dict(os.environ, BENCH_THREADS=str(threads))
        env.pop("TORCH_SEGOPS_CPU_ISA", None)
        if lib:
            env["TORCH_SEGOPS_LIBRARY"] = os.path.abspath(lib)
        if isa:
            env["TORCH_SEGOPS_CPU_ISA"] = isa
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.name = name
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.simd_objects", "--worker"], cwd=repo, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        hello = self.read()
        self.isa, self.isas = hello["isa"], hello["isas"]
        if self.isa.startswith("invalid"):
            raise SystemExit(f"candidate {name}: {self.isa}")

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"worker {self.name} died (exit {self.proc.wait()})")
        return json.loads(line)

    def ask(self, **msg) -> dict:
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        try:
            self.ask(cmd="quit")
        except (SystemExit, BrokenPipeError, ValueError):
            pass
        self.proc.wait()


# ---- the driver ------------------------------------------------------------------------------------

def parse_candidate(spec: str) -> tuple[str, str | None, str | None]:
    name, _, rest = spec.partition("=")
    lib, _, isa = rest.partition(":")
    return name, lib or None, isa or None


def default_candidates() -> list[tuple[str, str | None, str | None]]:
    from tools import cpu_targets

    return [(t, None, t) for t in reversed(cpu_targets.runnable_targets())]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cand", action="append", default=[], help="NAME=[LIBRARY][:TARGET] (repeat)")
    ap.add_argument("--ref", help="the reference candidate of the ratios (default: the first)")
    ap.add_argument("--shape", action="append", choices=list(ALL_SHAPES),
                    help=f"default: {', '.join(SHAPES)}; also {', '.join(FIXED_SHAPES)} (segments of 4 and 10 rows)")
    ap.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of {','.join(OPS)}")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--markdown", help="also write the tables to this file")
    args = ap.parse_args(argv)
    if args.worker:
        worker()
        return 0
    from benchmarks import common as C

    cands = [parse_candidate(c) for c in args.cand] or default_candidates()
    ops = [o for o in args.ops.split(",") if o]
    timed = ops + [e for e in EXTRA if "gather" in ops]
    ref = args.ref or cands[0][0]
    lines = [f"- date: {time.strftime('%Y-%m-%d %H:%M %Z')}", f"- cpu: {C.cpu_model()} ({os.cpu_count()} logical cores)",
             f"- threads: {args.threads}; {args.rounds} interleaved rounds of {args.repeats} calls",
             f"- load average at the start: {os.getloadavg()[0]:.1f}"]
    workers = [Worker(n, lib, isa, args.threads) for n, lib, isa in cands]
    try:
        for w, (n, lib, _) in zip(workers, cands):
            lines.append(f"- {n}: {lib or 'installed library'}, target {w.isa} (compiled: {', '.join(w.isas)})")
        print("\n".join(lines), flush=True)
        names = [w.name for w in workers]
        for shape in args.shape or list(SHAPES):
            for w in workers:
                w.ask(cmd="shape", shape=shape)
            per_round = {w.name: {op: [] for op in timed} for w in workers}
            for r in range(args.rounds):
                k = r % len(workers)
                for w in workers[k:] + workers[:k]:
                    got = w.ask(cmd="time", ops=timed, repeats=args.repeats)
                    for op in timed:
                        per_round[w.name][op].append(got[op])
            med = {n: {op: statistics.median(per_round[n][op]) for op in timed} for n in names}

            def ratio(a, op_a, b, op_b):
                return statistics.median(x / y for x, y in zip(per_round[a][op_a], per_round[b][op_b]))

            def spread(a, op_a, b, op_b):
                rs = [x / y for x, y in zip(per_round[a][op_a], per_round[b][op_b])]
                return f"{min(rs):.2f}-{max(rs):.2f}"

            rows, feat, n_seg = ALL_SHAPES[shape]
            kind = f"{rows // n_seg} rows each" if shape in FIXED_SHAPES else "random lengths"
            out = [f"\n### {shape} ({rows} rows x {max(feat, 1)} features, {n_seg} segments of {kind}, fp32), load {os.getloadavg()[0]:.1f}",
                   "", "| op | " + " | ".join(f"{n} ms" for n in names) + " | " +
                   " | ".join(f"{n}/{ref} [range]" for n in names if n != ref) + " |",
                   "|---" * (1 + len(names) + len(names) - 1) + "|"]
            for op in timed:
                out.append(f"| {op} | " + " | ".join(f"{med[n][op] * 1e3:.2f}" for n in names) + " | " +
                           " | ".join(f"{ratio(n, op, ref, op):.2f} [{spread(n, op, ref, op)}]" for n in names if n != ref) + " |")
            out.append("")
            for n in names:
                bits = []
                for op in ("max", "min"):
                    if op in ops and "sum" in ops:
                        bits.append(f"{op}/sum {ratio(n, op, n, 'sum'):.2f} [{spread(n, op, n, 'sum')}]")
                if "gather" in ops:
                    for alt in ("repeat_interleave", "index_select"):
                        bits.append(f"gather new/{alt} {ratio(n, 'gather new', n, alt):.2f} [{spread(n, 'gather new', n, alt)}]")
                if bits:
                    out.append(f"- {n}: " + ", ".join(bits))
            print("\n".join(out), flush=True)
            lines += out
    finally:
        for w in workers:
            w.close()
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
