#!/usr/bin/env python3
"""The CPU kernels' results, bit for bit, across instruction-set targets and across builds.

    python tools/cpu_targets.py                         # every target this CPU runs, against the default one
    python tools/cpu_targets.py --lib OLD/_C.so --lib NEW/_C.so   # two builds (A/B), each on its default target
    python tools/cpu_targets.py --lib OLD/_C.so:avx2 --lib NEW/_C.so:sse4        # a target named per build

Each (library, target) runs in a process of its own (TORCH_SEGOPS_LIBRARY, TORCH_SEGOPS_CPU_ISA are read
once per process) over the same corpus, drawn from a fixed seed: every CPU kernel (sum, mean, mul,
min/max with arg, logsumexp, softmax and its backward, gather; out= into a fresh tensor and through
autograd) on float32, float64, float16, bfloat16, int32 and int64 inputs, with int32 and int64 indptr,
feature counts 1, 2, 3, 8, 16, 17, 37, 64 and 100, random segment lengths (empty ones, lengths beyond
the 32-row windows and beyond a chunk; at one feature also calls whose segments all fit in 8 or 16 rows),
and values holding +inf, -inf, NaN, -0.0, huge and tiny (subnormal) numbers, and a NaN-free copy of each
(the vector paths that only note NaNs run through).
Results are compared as bits, -0.0 against 0.0 included, except that a NaN equals any NaN: which NaN
payload and sign an operation with two NaN operands keeps follows the order in which the compiler
places the operands of a commutative instruction (x86 keeps the first one's), not the source code; the
NaN-payload differences are counted and printed apart.

Targets differ in one way only: where the compiler fuses a multiply and an add (FMA: AVX2, AVX-512,
NEON; not SSE4 or the baseline), exp-based results (logsumexp, softmax, softmax backward) round
differently in the last bits. Those are compared bit for bit within a group of targets that fuse alike,
and to a relative 1e-5 (1e-2 for float16/bfloat16) across groups; everything else bit for bit everywhere.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the tools package from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FLOATS = ("float32", "float64", "float16", "bfloat16")
INTS = ("int32", "int64")
FEATURES = (1, 2, 3, 8, 16, 17, 37, 64, 100)
QUICK_FEATURES = (1, 2, 16, 37, 64)
# targets whose code fuses multiply-adds (the compiler contracts a * b + c into an FMA there)
# (the baseline object is NEON on aarch64, where every target fuses)
FMA_TARGETS = {"avx2", "avx512", "avx3", "avx3_dl", "avx3_zen4", "avx3_spr", "neon", "neon_bf16", "neon_without_aes"}
if platform.machine().lower() in ("aarch64", "arm64"):
    FMA_TARGETS.add("baseline")
INEXACT_OPS = ("logsumexp", "softmax")  # exp_approx, and the softmax backward's products


def _values(torch, shape, dtype, gen, special: bool):
    t = getattr(torch, dtype)
    if dtype in INTS:
        big = 2**30 if dtype == "int32" else 2**62
        x = torch.randint(-50, 50, shape, generator=gen, dtype=t)
        pick = torch.rand(shape, generator=gen)
        x[pick < 0.01] = big
        x[(pick >= 0.01) & (pick < 0.02)] = -big
        return x
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    if special:
        info = torch.finfo(t)
        pick = torch.rand(shape, generator=gen)
        for (lo, hi), v in zip([(0, .004), (.004, .008), (.008, .012), (.012, .02), (.02, .03), (.03, .04),
                                (.04, .05), (.05, .06)],
                               [float("inf"), float("-inf"), float("nan"), -0.0, info.max / 2, -info.max / 2,
                                info.tiny / 4, -info.tiny * 3]):
            x[(pick >= lo) & (pick < hi)] = v
    return x.to(t)


def _indptr(torch, rows, gen, dtype):
    """Segment lengths: mostly short (0-40 rows), some beyond one 32-row window, a few beyond a chunk."""
    lengths = []
    left = rows
    while left > 0:
        kind = float(torch.rand(1, generator=gen))
        n = int(torch.randint(0, 41, (1,), generator=gen)) if kind < 0.85 else \
            int(torch.randint(33, 300, (1,), generator=gen)) if kind < 0.97 else \
            int(torch.randint(2000, 5000, (1,), generator=gen))
        n = min(n, left)
        lengths.append(n)
        left -= n
        if float(torch.rand(1, generator=gen)) < 0.05:
            lengths.append(0)
    ends = torch.tensor([0] + lengths, dtype=torch.int64).cumsum(0)
    return ends.to(dtype)


def corpus(seed: int = 0, quick: bool = False) -> dict:
    """Every kernel's results on the corpus: name -> tensor (run under the library this process loaded).
    quick: fewer feature counts, one indptr dtype per case (the test suite's, a few seconds)."""
    import torch

    import torch_segops as so

    gen = torch.Generator().manual_seed(seed)
    out = {}
    for dtype in FLOATS + INTS:
        for fi, f in enumerate(QUICK_FEATURES if quick else FEATURES):
            rows = 12000 if f == 1 else max(400, 30000 // f)
            for special in ((True, False) if dtype in FLOATS else (False,)):
                x = _values(torch, (rows, f) if f > 1 else (rows,), dtype, gen, special)
                for idt in ((torch.int64, torch.int32)[fi % 2:][:1] if quick else (torch.int64, torch.int32)):
                    ip = _indptr(torch, rows, gen, idt)
                    key = f"{dtype}/F{f}/{'special' if special else 'plain'}/{str(idt)[6:]}"
                    for reduce in ("sum", "mean", "mul", "min", "max"):
                        out[f"{key}/{reduce}"] = so.segment_csr(x, ip, reduce=reduce)
                    for name in ("min", "max"):
                        v, a = getattr(so, f"segment_{name}_csr")(x, ip)
                        out[f"{key}/{name}.values"], out[f"{key}/{name}.arg"] = v, a
                    seg = torch.empty_like(out[f"{key}/sum"])
                    so.segment_csr(x, ip, reduce="sum", out=seg)
                    out[f"{key}/sum.out"] = seg
                    g = _values(torch, (ip.numel() - 1, f) if f > 1 else (ip.numel() - 1,), dtype, gen, special)
                    out[f"{key}/gather"] = so.gather_csr(g, ip)
                    if dtype in FLOATS:
                        out[f"{key}/logsumexp"] = so.segment_logsumexp_csr(x, ip)
                        xs = x.clone().requires_grad_(True)
                        y = so.segment_softmax_csr(xs, ip)
                        out[f"{key}/softmax"] = y.detach()
                        (grad,) = torch.autograd.grad(y, xs, _values(torch, y.shape, dtype, gen, False))
                        out[f"{key}/softmax.backward"] = grad
                        xm = x.clone().requires_grad_(True)
                        (gm,) = torch.autograd.grad(so.segment_csr(xm, ip, reduce="mean").sum(), xm)
                        out[f"{key}/mean.backward"] = gm
                if f == 1:  # every segment short: the one-feature min/max with arg read blocks of 8 or 16 rows
                    for longest in (8, 16):
                        ends = torch.randint(0, longest + 1, (rows // longest,), generator=gen).cumsum(0)
                        ip = torch.cat([torch.zeros(1, dtype=torch.int64), ends]).to(idt)
                        for name in ("min", "max"):
                            v, a = getattr(so, f"segment_{name}_csr")(x[: int(ends[-1])], ip)
                            out[f"{key}/short{longest}/{name}.values"], out[f"{key}/short{longest}/{name}.arg"] = v, a
    return out


def _bits(torch, t, canonical_nan: bool = False):
    """The tensor's bits as integers; canonical_nan: every NaN as one NaN."""
    t = t.contiguous()
    if t.dtype.is_floating_point:
        if canonical_nan:
            t = torch.where(t.isnan(), torch.full_like(t, float("nan")), t)
        return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def compare(a: dict, b: dict, exact_inexact: bool, nan_payloads: list | None = None) -> list[str]:
    """Keys whose tensors differ: bit for bit (any NaN equal to any NaN; keys that differ only in NaN
    payloads go to nan_payloads); the exp-based ones to a tolerance unless exact_inexact."""
    import torch

    problems = []
    if a.keys() != b.keys():
        problems.append(f"different keys: {sorted(a.keys() ^ b.keys())[:5]}")
    for k in sorted(a.keys() & b.keys()):
        x, y = a[k], b[k]
        if x.shape != y.shape or x.dtype != y.dtype:
            problems.append(f"{k}: {x.dtype}{tuple(x.shape)} vs {y.dtype}{tuple(y.shape)}")
            continue
        if torch.equal(_bits(torch, x), _bits(torch, y)):
            continue
        if torch.equal(_bits(torch, x, True), _bits(torch, y, True)):
            if nan_payloads is not None:
                nan_payloads.append(k)
            continue
        if not exact_inexact and any(f"/{op}" in k for op in INEXACT_OPS):
            # relative to the result's scale: the backward's y * (g - dot) cancels
            tol = 1e-2 if x.dtype in (torch.float16, torch.bfloat16) else 1e-5
            xd, yd = x.double(), y.double()
            scale = float(xd.nan_to_num(0, 0, 0).abs().max()) if xd.numel() else 0.0
            if torch.allclose(xd, yd, rtol=tol, atol=tol * scale, equal_nan=True):
                continue
        diff = (_bits(torch, x, True) != _bits(torch, y, True)).sum()
        problems.append(f"{k}: {int(diff)} of {x.numel()} elements differ")
    return problems


def run_one(lib: str | None, isa: str | None, dest: Path, quick: bool = False) -> str:
    """Runs the corpus in a new process; returns the target it ran on."""
    env = dict(os.environ)
    env.pop("TORCH_SEGOPS_CPU_ISA", None)
    if isa:
        env["TORCH_SEGOPS_CPU_ISA"] = isa
    if lib:
        env["TORCH_SEGOPS_LIBRARY"] = os.path.abspath(lib)
    code = ("import sys, torch; sys.path.insert(0, sys.argv[2]); from tools import cpu_targets as c; "
            "import torch_segops as so; torch.save(c.corpus(quick=sys.argv[3] == '1'), sys.argv[1]); "
            "print(so.build_info()['cpu_isa'])")
    repo = str(Path(__file__).resolve().parents[1])
    cp = subprocess.run([sys.executable, "-c", code, str(dest), repo, "1" if quick else "0"], env=env,
                        capture_output=True, text=True)
    if cp.returncode != 0:
        raise RuntimeError(f"corpus under {lib or 'the installed library'} / {isa or 'default'} failed:\n"
                           f"{cp.stdout[-2000:]}{cp.stderr[-4000:]}")
    return cp.stdout.strip().splitlines()[-1]


def runnable_targets() -> list[str]:
    """The compiled targets this CPU runs (those TORCH_SEGOPS_CPU_ISA accepts here), lowest first."""
    code = ("import os, subprocess, sys, torch_segops as so; names = so.build_info()['cpu_isas']; "
            "env = lambda n: dict(os.environ, TORCH_SEGOPS_CPU_ISA=n); "
            "q = \"import torch_segops as so; print(so.build_info()['cpu_isa'])\"; "
            "print(' '.join(n for n in names if subprocess.run([sys.executable, '-c', q], env=env(n), "
            "capture_output=True, text=True).stdout.strip() == n))")
    env = {k: v for k, v in os.environ.items() if k != "TORCH_SEGOPS_CPU_ISA"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.split()


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", action="append", default=[], help="LIBRARY[:TARGET] (repeat; default: the installed "
                    "library on every target this CPU runs)")
    args = ap.parse_args(argv)
    runs = [(spec.rsplit(":", 1) + [None])[:2] if ":" in spec else [spec, None] for spec in args.lib]
    if not runs:
        runs = [[None, None]] + [[None, t] for t in runnable_targets()]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (lib, isa) in enumerate(runs):
            dest = Path(tmp) / f"{i}.pt"
            ran = run_one(lib, isa, dest)
            results.append((f"{lib or 'installed'}:{ran}", ran, torch.load(dest)))
            print(f"ran {results[-1][0]}: {len(results[-1][2])} results", flush=True)
    ref_name, ref_isa, ref = results[0]
    bad = 0
    for name, isa, res in results[1:]:
        same_fma = (isa in FMA_TARGETS) == (ref_isa in FMA_TARGETS)
        payloads = []
        problems = compare(ref, res, exact_inexact=same_fma, nan_payloads=payloads)
        what = "bit for bit" if same_fma else f"bit for bit, {'/'.join(INEXACT_OPS)} to a tolerance"
        print(f"{name} vs {ref_name} ({what}): {'identical' if not problems else f'{len(problems)} differ'} "
              f"({len(problems) + len(payloads)} of {len(ref)} results differ in any bit, {len(payloads)} only "
              "in NaN payloads)")
        for p in problems[:20]:
            print("   ", p)
        bad += bool(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
