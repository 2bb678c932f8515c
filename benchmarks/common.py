"""Shared benchmark helpers of bench_cpu.py and bench_cuda.py: inputs, alternatives, timing, bandwidth, tables.

Bytes counted for an op = bytes of src + bytes of the output + bytes of indptr (what an ideal
single-pass kernel must move). GB/s = bytes / median time (1 GB = 1e9 bytes).
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

try:  # optional competitor
    import torch_scatter  # type: ignore
except Exception:  # noqa: BLE001  (any import failure just removes the column)
    torch_scatter = None

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- inputs ------------------------------------------------------------------------------------------

def random_indptr(rows: int, n_seg: int, gen: torch.Generator) -> torch.Tensor:
    """n_seg segments covering [0, rows) with uniformly random cut points (some segments empty)."""
    cuts = torch.randint(0, rows + 1, (n_seg - 1,), generator=gen).sort().values
    return torch.cat([torch.zeros(1, dtype=torch.long), cuts, torch.full((1,), rows, dtype=torch.long)])


def skewed_indptr(rows: int, n_seg: int) -> torch.Tensor:
    """n_seg segments with geometrically shrinking sizes (half of the rows in the first segment, ...)."""
    sizes = [rows >> (i + 1) for i in range(n_seg - 1)]
    sizes.append(rows - sum(sizes))
    sizes.sort(reverse=True)
    return torch.tensor([0] + sizes, dtype=torch.long).cumsum(0)


def make_input(rows: int, feat: int, n_seg: int, dtype: torch.dtype, segmentation: str = "random",
               device: str = "cpu", seed: int = 0):
    """(src [rows, feat] or [rows] when feat == 0, indptr [n_seg + 1]) on `device`. segmentation: "random"
    (random_indptr), "equal" (every segment rows // n_seg rows; n_seg divides rows) or "skewed" (skewed_indptr)."""
    gen = torch.Generator().manual_seed(seed)
    shape = (rows, feat) if feat else (rows,)
    src = torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
    if segmentation == "random":
        indptr = random_indptr(rows, n_seg, gen)
    elif segmentation == "equal":
        assert rows % n_seg == 0, f"{n_seg} equal segments of {rows} rows"
        indptr = torch.arange(0, rows + 1, rows // n_seg)
    else:
        indptr = skewed_indptr(rows, n_seg)
    return src.to(device), indptr.to(device)


def index_from_indptr(indptr: torch.Tensor) -> torch.Tensor:
    """Segment id of every row in [indptr[0], indptr[-1])."""
    lengths = indptr[1:] - indptr[:-1]
    return torch.repeat_interleave(torch.arange(lengths.numel(), device=indptr.device), lengths)


# Alternatives that count as torch-native (the speedup column compares with the fastest of them).
NATIVE = ("torch.segment_reduce", "scatter_reduce_", "index_add_", "index ops", "index_select", "repeat_interleave")


def alternatives(op: str, src: torch.Tensor, indptr: torch.Tensor, index: torch.Tensor, n_seg: int,
                 n_rows: int) -> dict:
    """name -> zero-argument callable computing op ("sum", "mean", "max", "min", "mul", "logsumexp", "softmax",
    "gather") over dim 0 another way: torch-native ops (names in NATIVE) and torch_scatter when installed. index is the
    row -> segment index (index_from_indptr, precomputed: not part of the timing); n_rows is gather's
    output row count (passed, so that no alternative reads it from the device)."""
    feat = src.shape[1:]
    # scatter_reduce_ needs the index in src's shape: a stride-0 expanded view, no copy
    idx_x = index.view(-1, *[1] * len(feat)).expand(index.numel(), *feat) if feat else index
    zeros = lambda: torch.zeros((n_seg, *feat), dtype=src.dtype, device=src.device)  # noqa: E731
    lengths = indptr[1:] - indptr[:-1]
    alts = {}
    if op in ("sum", "mean", "max", "min"):
        alts["torch.segment_reduce"] = lambda: torch.segment_reduce(src, op, offsets=indptr, axis=0, unsafe=True)
    if op == "sum":
        alts["scatter_reduce_"] = lambda: zeros().scatter_reduce_(0, idx_x, src, "sum", include_self=False)
        alts["index_add_"] = lambda: zeros().index_add_(0, index, src)
    elif op == "mean":
        alts["scatter_reduce_"] = lambda: zeros().scatter_reduce_(0, idx_x, src, "mean", include_self=False)
        counts = lengths.clamp(min=1).to(src.dtype).view(-1, *[1] * len(feat))
        alts["index_add_"] = lambda: zeros().index_add_(0, index, src).div_(counts)
    elif op in ("max", "min"):
        alts["scatter_reduce_"] = lambda: zeros().scatter_reduce_(0, idx_x, src, "a" + op, include_self=False)
    elif op == "mul":
        alts["torch.segment_reduce"] = lambda: torch.segment_reduce(src, "prod", offsets=indptr, axis=0, unsafe=True)
        alts["scatter_reduce_"] = lambda: zeros().scatter_reduce_(0, idx_x, src, "prod", include_self=False)
    elif op == "logsumexp":
        def lse():
            m = zeros().scatter_reduce_(0, idx_x, src, "amax", include_self=False)
            s = zeros().index_add_(0, index, (src - m.index_select(0, index)).exp())
            return m + s.log()
        alts["index ops"] = lse
    elif op == "softmax":
        def softmax():  # the usual scatter-based segment softmax: 4 passes + 2 gathers
            m = zeros().scatter_reduce_(0, idx_x, src, "amax", include_self=False)
            e = (src - m.index_select(0, index)).exp_()
            s = zeros().index_add_(0, index, e)
            return e.div_(s.index_select(0, index))
        alts["index ops"] = softmax
    elif op == "gather":
        alts["index_select"] = lambda: src.index_select(0, index)
        alts["repeat_interleave"] = lambda: src.repeat_interleave(lengths, dim=0, output_size=n_rows)
    if torch_scatter is not None:
        ts = torch_scatter
        if op in ("sum", "mean", "max", "min"):
            alts["torch_scatter"] = lambda: ts.segment_csr(src, indptr, reduce=op)
        elif op == "gather":
            alts["torch_scatter"] = lambda: ts.gather_csr(src, indptr)
        elif op == "softmax":
            from torch_scatter.composite import scatter_softmax
            alts["torch_scatter"] = lambda: scatter_softmax(src, index, dim=0)
    return alts


def nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


# ---- timing -----------------------------------------------------------------------------------------

def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def median_time(fn: Callable[[], object], repeats: int = 7, warmup: int = 2, device: str = "cpu",
                max_seconds: float = 20.0) -> float:
    """Median wall time of fn() in seconds, after `warmup` untimed calls. Stops repeating early (but
    after at least 3 timed calls) once `max_seconds` were spent, so slow alternatives stay bounded."""
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    start = time.perf_counter()
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
        if len(times) >= 3 and time.perf_counter() - start > max_seconds:
            break
    return statistics.median(times)


def try_time(fn: Callable[[], object], **kw) -> Optional[float]:
    """median_time, or None when the alternative does not support this input (reported as n/a)."""
    try:
        return median_time(fn, **kw)
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def interleaved_times(fns: dict, rounds: int = 5, repeats: int = 3, warmup: int = 1, device: str = "cpu",
                      max_seconds: float = 20.0, clock=time.perf_counter) -> tuple[dict, dict]:
    """Time every callable of `fns` (name -> fn, or None for "not supported") in `rounds` rounds; each
    round times each fn `repeats` times (fewer once its share of `max_seconds` is spent, at least once),
    the order rotating from round to round. A machine whose speed drifts (a shared VM: memory
    bandwidth and page-fault cost change from minute to minute) then slows every fn alike, and a
    ratio of two fns' times is measured under the same conditions.

    clock: what a sample reads (time.process_time: the process's CPU time, which a loaded machine's waits do
    not inflate; on one thread, the call's own work).

    Returns (median over all samples, per-round medians), keyed by name; a fn that raises RuntimeError,
    NotImplementedError or TypeError on its first call is None in both (n/a)."""
    live = {}
    for name, fn in fns.items():
        try:
            for _ in range(max(1, warmup)):
                fn()
            _sync(device)
            live[name] = fn
        except (RuntimeError, NotImplementedError, TypeError):
            pass
    samples = {name: [] for name in live}
    per_round = {name: [] for name in live}
    budget = max_seconds / max(1, rounds)
    names = list(live)
    for rnd in range(rounds):
        k = rnd % len(names) if names else 0
        for name in names[k:] + names[:k]:
            times, start = [], time.perf_counter()
            for _ in range(repeats):
                t0 = clock()
                live[name]()
                _sync(device)
                times.append(clock() - t0)
                if time.perf_counter() - start > budget:
                    break
            samples[name] += times
            per_round[name].append(statistics.median(times))
    med = {name: statistics.median(samples[name]) if name in samples else None for name in fns}
    rounds_out = {name: per_round.get(name) for name in fns}
    return med, rounds_out


# ---- results ----------------------------------------------------------------------------------------

# The yardstick of each op, what this machine can do with the bytes the op must move, in the same run:
# reductions read src (src.sum()), gather writes a new output (a fill of a new tensor of its size),
# softmax reads src and writes a new tensor of its size (a copy). "segops % of yardstick" compares
# torch_segops' GB/s (src + out + indptr bytes) with the yardstick's (the bytes it moves).
YARDSTICKS = {"read": "read (src.sum())", "fill": "fill (new tensor of out's size)", "copy": "copy (src.clone())"}


def yardstick(op: str, src: torch.Tensor, out: torch.Tensor) -> tuple[str, Callable[[], object], int]:
    """(kind, fn, bytes moved) of op's yardstick."""
    if op == "gather":
        return "fill", lambda: torch.empty_like(out).fill_(1), nbytes(out)
    if op == "softmax":
        return "copy", lambda: src.clone(), 2 * nbytes(src)
    return "read", lambda: src.sum(), nbytes(src)


def dense_kernel(op: str, src: torch.Tensor) -> tuple[Optional[str], Optional[Callable[[], object]]]:
    """torch's own dense kernel of op over the same data (all rows one segment, along dim 0), or (None, None)."""
    fns = {
        "sum": ("src.sum(0)", lambda: src.sum(0)),
        "mean": ("src.mean(0)", lambda: src.mean(0)),
        "max": ("src.amax(0)", lambda: src.amax(0)),
        "min": ("src.amin(0)", lambda: src.amin(0)),
        "mul": ("src.prod(0)", lambda: src.prod(0)),
        "logsumexp": ("torch.logsumexp(src, 0)", lambda: torch.logsumexp(src, 0)),
        "softmax": ("torch.softmax(src, 0)", lambda: torch.softmax(src, 0)),
    }
    return fns.get(op, (None, None))


@dataclass
class Row:
    shape: str
    op: str
    dtype: str
    nbytes: int  # src + out + indptr
    yard_bytes: int  # bytes the yardstick moves
    segops: float  # seconds
    yard: float  # seconds of the yardstick on the same data
    yard_kind: str = "read"  # a key of YARDSTICKS
    dense_name: Optional[str] = None
    dense: Optional[float] = None  # seconds of torch's dense kernel on the same data
    alternatives: dict = field(default_factory=dict)  # name -> seconds or None (n/a)
    native: tuple = ()  # names in `alternatives` that count as torch-native
    round_speedups: list = field(default_factory=list)  # per round: fastest native / segops, same round
    round_yard_pct: list = field(default_factory=list)  # per round: segops GB/s as % of the yardstick's GB/s
    round_dense: list = field(default_factory=list)  # per round: dense kernel time / segops time

    def gbps(self, t: Optional[float]) -> Optional[float]:
        return None if not t else self.nbytes / t / 1e9

    def fastest_native(self):
        ts = [(self.alternatives[n], n) for n in self.native if self.alternatives.get(n)]
        return min(ts) if ts else (None, None)


def _fmt_time(t: Optional[float]) -> str:
    if t is None:
        return "n/a"
    return f"{t * 1e3:.2f} ms" if t >= 1e-3 else f"{t * 1e6:.0f} us"


def _range(values: list, fmt: str) -> str:
    """" [lo-hi]" over rounds, or "" without rounds."""
    return f" [{fmt.format(min(values))}-{fmt.format(max(values))}]" if len(values) > 1 else ""


def table(rows: list[Row], columns: list[str], markdown: bool = False) -> str:
    """Text (aligned) or markdown table: per row segops time and GB/s, each alternative's time, segops
    speedup over the fastest native alternative, speed relative to torch's dense kernel on the same
    data, and the yardstick (kind, GB/s, segops as % of it)."""
    header = ["shape", "op", "dtype", "torch_segops", "GB/s"] + columns + [
        "speedup vs best native", "dense torch kernel", "vs dense kernel", "yardstick", "yardstick GB/s",
        "segops % of yardstick"]
    body = []
    for r in rows:
        best_t, best_name = r.fastest_native()
        seg_gbps = r.gbps(r.segops)
        yard_gbps = (r.yard_bytes / r.yard / 1e9) if r.yard else None
        body.append([
            r.shape, r.op, r.dtype, _fmt_time(r.segops), f"{seg_gbps:.1f}",
            *[_fmt_time(r.alternatives.get(c)) if c in r.alternatives else "-" for c in columns],
            (f"{best_t / r.segops:.2f}x ({best_name})" + _range(r.round_speedups, "{:.2f}x")) if best_t else "n/a",
            f"{r.dense_name} {_fmt_time(r.dense)}" if r.dense_name else "-",
            (f"{r.dense / r.segops:.2f}x" + _range(r.round_dense, "{:.2f}x")) if r.dense else "-",
            r.yard_kind,
            f"{yard_gbps:.1f}" if yard_gbps else "n/a",
            (f"{100 * seg_gbps / yard_gbps:.0f}%" + _range(r.round_yard_pct, "{:.0f}%")) if yard_gbps else "n/a",
        ])
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(b) + " |" for b in body]
        return "\n".join(lines)
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(b) for b in body])


# ---- machine description ----------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown CPU"


def git_commit() -> str:
    try:
        sha = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def environment(device: str = "cpu") -> dict:
    import torch_segops

    env = {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "cpu": f"{cpu_model()} ({os.cpu_count()} logical cores)",
        "torch threads": str(torch.get_num_threads()),
        "torch": torch.__version__,
        "torch_segops": f"{torch_segops.__version__} ({torch_segops.build_info().get('variant')}), git {git_commit()}",
        "torch_scatter": getattr(torch_scatter, "__version__", "installed") if torch_scatter else "not installed",
    }
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name()
    return env


def emit(text: str, markdown: Optional[str] = None) -> None:
    """Print a report, and write it to `markdown` when a path is given."""
    print(text)
    if markdown:
        with open(markdown, "w") as fh:
            fh.write(text)
