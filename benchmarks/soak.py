"""Soak benchmark (not run in CI): every compiled op and every public function of torch_segops, called
over and over for minutes on the CPU, with the heap and RSS slopes of each.

Per case (benchmarks/memory_cases.py: OP_CASES, CASES, plus one large call) it warms up, then calls
the case for its share of the time, sampling (calls, heap bytes in use, RSS) about 20 times; the slopes
are least-squares fits of heap and RSS against the call count (bytes per call), and the growth is the
last sample minus the first. A leak shows as a heap slope of at least the size of the leaked block
(24 bytes or more); noise sits near 0.

    python benchmarks/soak.py                  # 5 minutes in all
    python benchmarks/soak.py --minutes 1      # shorter
    python benchmarks/soak.py --only segment_max --minutes 2
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import sys
import time
from typing import Callable, Dict, List, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memory_cases import CASES, OP_CASES, heap_in_use, large_max_case, rss_bytes  # noqa: E402

import torch_segops as so  # noqa: E402

SAMPLES = 20
WARMUP_SECONDS = 0.5


def all_cases() -> Dict[str, Callable[[], Callable[[], None]]]:
    cases = {f"op {name}": make for name, make in OP_CASES.items()}
    cases.update({name: make for name, make in CASES.items()})
    cases["segment_max_csr[4000 x 1000, 4000 segments]"] = large_max_case
    return cases


def slope(xs: List[float], ys: List[float]) -> float:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0


def soak(make: Callable[[], Callable[[], None]], seconds: float) -> Tuple[int, float, int, float, int]:
    """(calls, heap slope bytes/call, heap growth bytes, RSS slope bytes/call, RSS growth bytes)."""
    call = make()
    end = time.perf_counter() + WARMUP_SECONDS
    while time.perf_counter() < end:
        call()
    gc.collect()
    calls, xs, heap, rss = 0, [], [], []
    t0 = time.perf_counter()
    for k in range(SAMPLES + 1):
        until = t0 + seconds * k / SAMPLES
        while time.perf_counter() < until:
            call()
            calls += 1
        gc.collect()
        xs.append(float(calls))
        heap.append(float(heap_in_use() or 0))
        rss.append(float(rss_bytes()))
    return calls, slope(xs, heap), int(heap[-1] - heap[0]), slope(xs, rss), int(rss[-1] - rss[0])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=5.0, help="total time, split evenly across the cases")
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    args = ap.parse_args(argv)
    if heap_in_use() is None:
        print("glibc mallinfo2 not available: heap slopes cannot be measured", file=sys.stderr)
        return 2
    cases = {k: v for k, v in all_cases().items() if args.only in k}
    if not cases:
        print(f"no case matches {args.only!r}", file=sys.stderr)
        return 2
    seconds = max(1.0, args.minutes * 60 / len(cases) - WARMUP_SECONDS)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"soak: {now}, {platform.node()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"torch_segops {so.__version__} ({so.build_info()['library']}), {torch.get_num_threads()} threads, "
          f"{len(cases)} cases x {seconds:.1f} s")
    print()
    print("| case | calls | heap slope (bytes/call) | heap growth (bytes) | RSS slope (bytes/call) | RSS growth (bytes) |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for name, make in cases.items():
        calls, hs, hg, rs, rg = soak(make, seconds)
        worst = max(worst, hs)
        print(f"| {name} | {calls} | {hs:.3f} | {hg} | {rs:.3f} | {rg} |", flush=True)
    print()
    print(f"largest heap slope: {worst:.3f} bytes per call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
