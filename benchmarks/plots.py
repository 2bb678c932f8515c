"""Plots of recorded benchmark results, drawn from the Markdown tables under benchmarks/results/.

    python benchmarks/plots.py            # every plot below, into benchmarks/results/plots/
    python benchmarks/plots.py --list     # which results file each plot reads

matplotlib is an optional dependency of the benchmarks alone (``pip install matplotlib``); the package and its
tests do not need it. Reading the tables (``read_table``) needs nothing but the standard library.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
PLOTS = RESULTS / "plots"


def read_table(path: Path, after: str | None = None) -> list[dict[str, str]]:
    """The first Markdown table of `path` (the first after the line that starts with `after`, if given), as one
    dict per row keyed by the header's cells."""
    lines = path.read_text().splitlines()
    if after is not None:
        lines = lines[next(i for i, line in enumerate(lines) if line.startswith(after)):]
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    header, body = rows[0], [r for r in rows[2:] if len(r) == len(rows[0])]
    return [dict(zip(header, r)) for r in body]


def number(cell: str) -> float:
    """The first number of a cell: '36.8', '1.89x (scatter_reduce_) [1.82x-2.52x]', '84% [66%-85%]'."""
    m = re.search(r"-?\d+(?:\.\d+)?", cell)
    if not m:
        raise ValueError(f"no number in {cell!r}")
    return float(m.group())


def _short_shape(shape: str) -> str:
    return shape.split(",")[0]  # "2M x 64, 100k random segments" -> "2M x 64"


def cpu_bandwidth_rows(path: Path) -> list[tuple[str, float, float, float]]:
    """(label, torch_segops GB/s, yardstick GB/s, % of the yardstick as the file gives it: the median over rounds)
    per row of a bench_cpu.py results table."""
    out = []
    for r in read_table(path):
        dtype = "" if r["dtype"] == "float32" else f" {r['dtype']}"
        label = f"{_short_shape(r['shape'])} {r['op']}{dtype}"
        out.append((label, number(r["GB/s"]), number(r["yardstick GB/s"]), number(r["segops % of yardstick"])))
    return out


def scatter_ratio_rows(path: Path) -> list[tuple[str, float]]:
    """(label, torch_segops time / pytorch_scatter time) per row of bench_coo.py's run A."""
    return [(f"{r['shape (fp32)']} {r['index']} {r['case']}", number(r["segops / pytorch_scatter"]))
            for r in read_table(path, after="## Run A")]


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        sys.exit("benchmarks/plots.py needs matplotlib (an optional dependency of the benchmarks): pip install matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90, metadata={"Software": None})  # no version stamp: the same data gives the same file
    fig.clf()
    return out


def plot_cpu_bandwidth(src: Path, out: Path) -> Path:
    """Bandwidth reached per op and shape beside the machine's own bandwidth for the op's bytes, same run."""
    plt = _pyplot()
    rows = cpu_bandwidth_rows(src)
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.4))
    y = range(len(rows))
    ax.barh([i + 0.2 for i in y], [r[2] for r in rows], height=0.4, color="#bbbbbb",
            label="yardstick: read (src.sum()), fill (gather) or copy (softmax)")
    ax.barh([i - 0.2 for i in y], [r[1] for r in rows], height=0.4, color="#1f77b4", label="torch_segops")
    for i, (_, got, _, pct) in enumerate(rows):
        ax.text(got + 0.5, i - 0.2, f"{pct:.0f}%", va="center", fontsize=7)
    ax.set_yticks(list(y), [r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("GB/s (bytes the op must move / time)")
    ax.set_title(f"CPU, fp32 unless noted: {src.name}", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08 * 18 / (len(rows) + 4)), ncol=2)
    fig.tight_layout()
    return _save(fig, out)


def plot_scatter_ratios(src: Path, out: Path) -> Path:
    """torch_segops time / pytorch_scatter time per case, on a log axis (< 1: torch_segops is faster)."""
    plt = _pyplot()
    rows = scatter_ratio_rows(src)
    fig, ax = plt.subplots(figsize=(8.5, 0.25 * len(rows) + 1.4))
    colors = ["#2ca02c" if r < 1 else "#d62728" for _, r in rows]
    ax.barh(range(len(rows)), [r - 1 for _, r in rows], left=1, color=colors)  # from 1: the bar's side says who won
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time ratio torch_segops / pytorch_scatter 2.1.2 (log; < 1: torch_segops faster)")
    ax.set_title(f"COO and scatter, CPU, 2 threads: {src.name} (run A)", fontsize=9)
    fig.tight_layout()
    return _save(fig, out)


# plot file -> (function, results file it reads)
PLOTS_FROM = {
    "cpu-bandwidth-2026-11-24.png": (plot_cpu_bandwidth, "cpu-2core-2026-11-24-quiet.md"),
    "cpu-bandwidth-intel-2026-11-24.png": (plot_cpu_bandwidth, "cpu-2core-intel-2026-11-24.md"),
    "coo-scatter-vs-pytorch-scatter-2026-11-25.png": (plot_scatter_ratios, "coo-scatter-cpu-2core-2026-11-25.md"),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print each plot and the results file it reads")
    ap.add_argument("--out", type=Path, default=PLOTS, help="folder for the PNG files (default: %(default)s)")
    args = ap.parse_args(argv)
    for name, (fn, src) in PLOTS_FROM.items():
        if args.list:
            print(f"{name}: {fn.__name__}({src})")
        else:
            print(fn(RESULTS / src, args.out / name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
