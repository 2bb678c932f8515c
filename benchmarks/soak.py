"""Soak benchmark (not run in CI): every compiled op and every public function of torch_segops, called
over and over for minutes on the CPU, with the heap and RSS slopes of each.

Per case (benchmarks/memory_cases.py: OP_CASES, CASES, plus one large call) it warms up, then calls
the case for its share of the time (at least 2,000 calls; 1,000 for the large one), sampling (calls, heap
bytes in use, RSS) 21 times; the slopes are least-squares fits of heap and RSS against the call count
(bytes per call), and the growth is the last sample minus the first. A leak shows as a heap slope and a
growth per call of at least the size of the leaked block (24 bytes or more); a one-off allocation (a
cache entry, a resized table) shows as a growth of its size that does not grow with the calls.

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

if __package__ in (None, ""):  # run as a script (python benchmarks/soak.py): the benchmarks package from the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.memory_cases import CASES, OP_CASES, heap_in_use, large_max_case, rss_bytes  # noqa: E402

import torch_segops as so  # noqa: E402

SAMPLES = 20
WARMUP_SECONDS = 0.5
MIN_CALLS = 2000


def all_cases() -> Dict[str, Tuple[Callable[[], Callable[[], None]], int]]:
    """name -> (factory, the fewest calls to make)."""
    cases = {f"op {name}": (make, MIN_CALLS) for name, make in OP_CASES.items()}
    cases.update({name: (make, MIN_CALLS) for name, make in CASES.items()})
    cases["segment_max_csr[4000 x 1000, 4000 segments]"] = (large_max_case, 1000)
    return cases


def slope(xs: List[float], ys: List[float]) -> float:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0


def soak(make: Callable[[], Callable[[], None]], seconds: float, min_calls: int) -> Tuple[int, float, int, float, int]:
    """(calls, heap slope bytes/call, heap growth bytes, RSS slope bytes/call, RSS growth bytes). The calls
    are max(min_calls, what fits in `seconds` at the warm-up's rate), in SAMPLES equal parts."""
    call = make()
    n, t0 = 0, time.perf_counter()
    while n < 10 or time.perf_counter() - t0 < WARMUP_SECONDS:
        call()
        n += 1
    rate = n / (time.perf_counter() - t0)
    per_sample = max(1, round(max(min_calls, rate * seconds) / SAMPLES))
    xs, heap, rss = [], [], []
    for k in range(SAMPLES + 1):
        if k:
            for _ in range(per_sample):
                call()
        gc.collect()
        xs.append(float(k * per_sample))
        heap.append(float(heap_in_use() or 0))
        rss.append(float(rss_bytes()))
    return SAMPLES * per_sample, slope(xs, heap), int(heap[-1] - heap[0]), slope(xs, rss), int(rss[-1] - rss[0])


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
    seconds = max(1.0, args.minutes * 60 / len(cases) - WARMUP_SECONDS)  # (at least MIN_CALLS calls)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"soak: {now}, {platform.node()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"torch_segops {so.__version__} ({so.build_info()['library']}), {torch.get_num_threads()} threads, "
          f"{len(cases)} cases x {seconds:.1f} s")
    print()
    print("| case | calls | heap slope (bytes/call) | heap growth (bytes) | RSS slope (bytes/call) | RSS growth (bytes) |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for name, (make, min_calls) in cases.items():
        calls, hs, hg, rs, rg = soak(make, seconds, min_calls)
        worst = max(worst, hg / calls)
        print(f"| {name} | {calls} | {hs:.3f} | {hg} ({hg / calls:.3f}/call) | {rs:.1f} | {rg} |", flush=True)
    print()
    print(f"largest heap growth per call: {worst:.3f} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
