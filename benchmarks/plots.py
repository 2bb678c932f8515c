"""Plots of recorded benchmark results, drawn from the Markdown tables under benchmarks/results/.

    python benchmarks/plots.py            # every plot of PLOTS_FROM, into benchmarks/results/plots/
    python benchmarks/plots.py --list     # which results file each plot reads
    python benchmarks/plots.py --kind gpu-predicted-vs-measured gpu-check.md out.png   # one file, one kind

Each benchmark script draws its own table with `--plot PNG` through the same functions (KINDS: one per table
format), and `gpu-predicted-vs-measured` reads what tools/gpu_check.sh writes (the measured quick benchmark
beside the memory model's prediction carried from before the run).

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


def _text(src: Path | str) -> str:
    """A results file's text: `src` is its path, or the Markdown itself (what a benchmark script just made)."""
    return src.read_text() if isinstance(src, Path) else src


def read_table(src: Path | str, after: str | None = None) -> list[dict[str, str]]:
    """The first Markdown table of `src` (a path, or the Markdown text; the first table after the line that starts
    with `after`, if given), as one dict per row keyed by the header's cells."""
    lines = _text(src).splitlines()
    if after is not None:
        found = [i for i, line in enumerate(lines) if line.startswith(after)]
        if not found:
            raise ValueError(f"no line starting with {after!r}")
        lines = lines[found[0]:]
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    if start is None:
        raise ValueError("no Markdown table" + (f" after {after!r}" if after else ""))
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


def maybe_number(cell: str) -> float | None:
    """number(cell), or None for a cell without one ('n/a', '-')."""
    try:
        return number(cell)
    except ValueError:
        return None


def seconds(cell: str) -> float | None:
    """A time cell of the benchmarks' tables ('109.7 us', '1.237 ms', '~0.4 s (est.)') in seconds; None for 'n/a'
    or '-'."""
    m = re.search(r"(\d+(?:\.\d+)?)\s*(us|ms|s)\b", cell)
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)] if m else None


def _short_shape(shape: str) -> str:
    return shape.split(",")[0]  # "2M x 64, 100k random segments" -> "2M x 64"


def cpu_bandwidth_rows(path: Path | str) -> list[tuple[str, float, float, float]]:
    """(label, torch_segops GB/s, yardstick GB/s, % of the yardstick as the file gives it: the median over rounds)
    per row of a bench_cpu.py results table."""
    out = []
    for r in read_table(path):
        dtype = "" if r["dtype"] == "float32" else f" {r['dtype']}"
        label = f"{_short_shape(r['shape'])} {r['op']}{dtype}"
        out.append((label, number(r["GB/s"]), number(r["yardstick GB/s"]), number(r["segops % of yardstick"])))
    return out


def ratio_rows(src: Path | str, labels: list[str], series: dict[str, str], after: str | None = None
               ) -> list[tuple[str, dict[str, float | None]]]:
    """(label, {series name: ratio or None}) per row of a table: the label joins the `labels` columns, each series
    is the first number of its column (`series`: name -> column)."""
    return [(" ".join(r[c] for c in labels), {name: maybe_number(r[col]) for name, col in series.items()})
            for r in read_table(src, after)]


def scatter_ratio_rows(path: Path | str, after: str | None = "## Run A") -> list[tuple[str, float]]:
    """(label, torch_segops time / pytorch_scatter time) per row of bench_coo.py's table (run A of a results file)."""
    return [(label, s["pytorch_scatter"]) for label, s in
            ratio_rows(path, ["shape (fp32)", "index", "case"], {"pytorch_scatter": "segops / pytorch_scatter"}, after)]


def cuda_bandwidth_rows(src: Path | str) -> list[tuple[str, str, float]]:
    """(op dtype, dist F=..., torch_segops % of the same run's copy bandwidth) per row of bench_cuda.py's table."""
    return [(f"{r['op']} {r['dtype']}", f"{r['dist']} F={r['F']}", number(r["% of copy"])) for r in read_table(src)]


MEASURED_HEADING = "## Measured (quick benchmark)"  # tools/gpu_check.sh's sections
PREDICTED_HEADING = "## Predicted by the memory model"


def gpu_prediction_rows(src: Path | str) -> list[tuple[str, float, float]]:
    """(case, predicted s, measured s) per case that has both: from tools/gpu_check.sh's results (the measured
    bench_cuda.py table and the prediction carried from before the run, joined on dist, F, dtype, op), or from
    one table with `predicted` and `measured` columns (research/gpu_model/model.py --against)."""
    text = _text(src)
    key = lambda r: (r["dist"], r["F"], r["dtype"], r["op"])  # noqa: E731
    if MEASURED_HEADING in text:
        measured = {key(r): seconds(r["torch_segops"]) for r in read_table(text, MEASURED_HEADING)}
        pairs = [(key(r), seconds(r["predicted"]), measured.get(key(r))) for r in read_table(text, PREDICTED_HEADING)]
    else:
        pairs = [(key(r), seconds(r["predicted"]), seconds(r["measured"])) for r in read_table(text)]
    return [(" ".join(k[3:] + k[:1]) + f" F={k[1]} {k[2]}", p, m) for k, p, m in pairs if p and m]


MATPLOTLIB_MISSING = ("drawing plots needs matplotlib, an optional dependency of the benchmarks alone: "
                      "pip install matplotlib")


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pyplot():
    if not have_matplotlib():
        sys.exit(MATPLOTLIB_MISSING)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, out: Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90, metadata={"Software": None})  # no version stamp: the same data gives the same file
    _pyplot().close(fig)
    return out


def _title(src: Path | str, what: str, title: str | None) -> str:
    return title or (f"{what}: {src.name}" if isinstance(src, Path) else what)


def bandwidth_bars(rows: list[tuple[str, float, float, float]], out: Path, title: str, yardstick: str) -> Path:
    """Horizontal bars: per row (label, GB/s reached, the yardstick's GB/s, % of it) the two bandwidths side by
    side, the percentage written at the end of the first."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.4))
    y = range(len(rows))
    ax.barh([i + 0.2 for i in y], [r[2] for r in rows], height=0.4, color="#bbbbbb", label=yardstick)
    ax.barh([i - 0.2 for i in y], [r[1] for r in rows], height=0.4, color="#1f77b4", label="torch_segops")
    for i, (_, got, _, pct) in enumerate(rows):
        ax.text(got + 0.5, i - 0.2, f"{pct:.0f}%", va="center", fontsize=7)
    ax.set_yticks(list(y), [r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("GB/s (bytes the op must move / time)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08 * 18 / (len(rows) + 4)), ncol=2)
    fig.tight_layout()
    return _save(fig, out)


def ratio_bars(rows: list[tuple[str, dict[str, float | None]]], out: Path, title: str, xlabel: str) -> Path:
    """Time ratios (torch_segops / another) per row on a log axis, each bar drawn from 1 so that its side says who
    won; one series: green below 1, red above; several: one color each, with a legend. None: no bar."""
    plt = _pyplot()
    names = list(dict.fromkeys(n for _, s in rows for n in s))
    h = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(8.5, 0.25 * len(rows) * max(1, 0.7 * len(names)) + 1.4))
    for k, name in enumerate(names):
        ys = [i - 0.4 + h * (k + 0.5) for i, (_, s) in enumerate(rows) if s.get(name)]
        vals = [s[name] for _, s in rows if s.get(name)]
        color = ["#2ca02c" if v < 1 else "#d62728" for v in vals] if len(names) == 1 else f"C{k}"
        ax.barh(ys, [v - 1 for v in vals], left=1, height=h, color=color, label=name)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=9)
    if len(names) > 1:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, out)


# ---- one function per table format: (src, out, title=None) -> the PNG; src is a results file or the Markdown ----

def plot_cpu_bandwidth(src: Path | str, out: Path, title: str | None = None) -> Path:
    """bench_cpu.py: bandwidth reached per op and shape beside the machine's own bandwidth for the op's bytes,
    same run."""
    return bandwidth_bars(cpu_bandwidth_rows(src), out, _title(src, "CPU, fp32 unless noted", title),
                          "yardstick: read (src.sum()), fill (gather) or copy (softmax)")


def plot_scatter_ratios(src: Path | str, out: Path, title: str | None = None) -> Path:
    """bench_coo.py: torch_segops time / pytorch_scatter time per case (run A of a results file)."""
    rows = scatter_ratio_rows(src, "## Run A" if isinstance(src, Path) else None)
    return ratio_bars([(label, {"pytorch_scatter": r}) for label, r in rows], out,
                      _title(src, "COO and scatter, CPU, 2 threads", title) + (" (run A)" if isinstance(src, Path) else ""),
                      "time ratio torch_segops / pytorch_scatter 2.1.2 (log; < 1: torch_segops faster)")


def plot_scatter_vs_torch(src: Path | str, out: Path, title: str | None = None) -> Path:
    """bench_scatter.py: the deterministic scatter's time over the fastest torch op's, sorting every call and with
    a plan."""
    rows = ratio_rows(src, ["shape (fp32)", "op"], {"sort every call": "sort every call / fastest torch",
                                                    "with a plan": "plan / fastest torch"})
    return ratio_bars(rows, out, _title(src, "deterministic scatter vs torch, CPU", title),
                      "time ratio torch_segops / fastest of scatter_reduce_, index_add_ (log; < 1: torch_segops faster)")


def plot_unsorted_ratios(src: Path | str, out: Path, title: str | None = None) -> Path:
    """bench_scatter_unsorted.py: scatter on a shuffled index, time over pytorch_scatter's."""
    rows = ratio_rows(src, ["rows x F (fp32)", "targets", "reduce"], {"pytorch_scatter": "segops / pytorch_scatter"})
    return ratio_bars(rows, out, _title(src, "scatter, shuffled index, CPU", title),
                      "time ratio torch_segops / pytorch_scatter (log; < 1: torch_segops faster)")


def plot_pyg_ratios(src: Path | str, out: Path, title: str | None = None) -> Path:
    """bench_pyg.py: PyG through the torch_scatter alias over native PyG, forward + backward."""
    rows = ratio_rows(src, ["case (forward + backward)"], {"alias": "alias / native [per-round range]"})
    return ratio_bars(rows, out, _title(src, "PyG with the torch_scatter alias, CPU", title),
                      "time ratio with the alias / native PyG (log; < 1: the alias faster)")


def plot_extrema_ratios(src: Path | str, out: Path, title: str | None = None) -> Path:
    """bench_extrema.py: segment max and min (with arg) over segment sum, and torch's dense amax over max out=."""
    cols = {"max / sum": "max/sum", "min / sum": "min/sum", "max out= / sum": "max out=/sum",
            "amax(0) / max out=": "amax/(max out=)"}
    return ratio_bars(ratio_rows(src, ["shape"], cols), out, _title(src, "segment min/max vs sum, CPU", title),
                      "time ratio (log)")


def plot_cuda_bandwidth(src: Path | str, out: Path, title: str | None = None) -> Path:
    """bench_cuda.py: torch_segops' bandwidth as % of the same run's copy bandwidth, per op and dtype (rows) and
    segment distribution and F (columns)."""
    plt = _pyplot()
    rows = cuda_bandwidth_rows(src)
    ys, xs = list(dict.fromkeys(r[0] for r in rows)), list(dict.fromkeys(r[1] for r in rows))
    grid = [[float("nan")] * len(xs) for _ in ys]
    for y, x, pct in rows:
        grid[ys.index(y)][xs.index(x)] = pct
    fig, ax = plt.subplots(figsize=(1.0 + 0.62 * len(xs) + 1.6, 0.32 * len(ys) + 1.8))
    im = ax.imshow(grid, cmap="viridis", vmin=0, vmax=100, aspect="auto")
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if v == v:
                ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=7, color="white" if v < 60 else "black")
    ax.set_xticks(range(len(xs)), xs, rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(len(ys)), ys, fontsize=7)
    fig.colorbar(im, ax=ax, label="% of copy bandwidth (same run)")
    ax.set_title(_title(src, "CUDA", title), fontsize=9)
    fig.tight_layout()
    return _save(fig, out)


def plot_gpu_prediction(src: Path | str, out: Path, title: str | None = None, stated_error: float = 0.40) -> Path:
    """Predicted vs measured GPU time per case, log-log, with the diagonal and the model's stated error band
    (research/gpu_model/model.py: STATED_ERROR = 0.40). Reads tools/gpu_check.sh's results file."""
    plt = _pyplot()
    rows = gpu_prediction_rows(src)
    if not rows:
        raise ValueError("no case with both a predicted and a measured time")
    fig, ax = plt.subplots(figsize=(6.5, 6))
    ops = list(dict.fromkeys(label.split()[0] for label, _, _ in rows))
    for k, op in enumerate(ops):
        pts = [(m * 1e6, p * 1e6) for label, p, m in rows if label.split()[0] == op]
        ax.scatter([a for a, _ in pts], [b for _, b in pts], s=18, color=f"C{k}", label=op)
    lo = min(min(p, m) for _, p, m in rows) * 1e6 / 1.5
    hi = max(max(p, m) for _, p, m in rows) * 1e6 * 1.5
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8, label="predicted = measured")
    ax.fill_between([lo, hi], [lo * (1 - stated_error), hi * (1 - stated_error)],
                    [lo * (1 + stated_error), hi * (1 + stated_error)], color="#cccccc", alpha=0.5,
                    label=f"the model's stated error (±{stated_error:.0%}, for full-size rows)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured (us)")
    ax.set_ylabel("predicted before the run (us)")
    inside = sum(abs(p / m - 1) <= stated_error for _, p, m in rows)
    ax.set_title(_title(src, "GPU: memory model vs measurement", title) +
                 f"\n{inside} of {len(rows)} cases within the stated error", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, out)


# table format -> its plot function (the scripts' --plot and `plots.py --kind`)
KINDS = {
    "cpu-bandwidth": plot_cpu_bandwidth,
    "coo-vs-pytorch-scatter": plot_scatter_ratios,
    "scatter-vs-torch": plot_scatter_vs_torch,
    "unsorted-vs-pytorch-scatter": plot_unsorted_ratios,
    "pyg-alias": plot_pyg_ratios,
    "extrema": plot_extrema_ratios,
    "cuda-bandwidth": plot_cuda_bandwidth,
    "gpu-predicted-vs-measured": plot_gpu_prediction,
}

# plot file under benchmarks/results/plots/ -> (function, results file it reads)
PLOTS_FROM = {
    "cpu-bandwidth-2026-11-24.png": (plot_cpu_bandwidth, "cpu-2core-2026-11-24-quiet.md"),
    "cpu-bandwidth-intel-2026-11-24.png": (plot_cpu_bandwidth, "cpu-2core-intel-2026-11-24.md"),
    "cpu-bandwidth-mul-2026-11-25.png": (plot_cpu_bandwidth, "cpu-2core-mul-2026-11-25.md"),
    "coo-scatter-vs-pytorch-scatter-2026-11-25.png": (plot_scatter_ratios, "coo-scatter-cpu-2core-2026-11-25.md"),
    "scatter-vs-torch-2026-11-24.png": (plot_scatter_vs_torch, "scatter-cpu-2core-2026-11-24.md"),
    "scatter-unsorted-vs-pytorch-scatter-2026-11-27.png": (plot_unsorted_ratios, "2026-11-27-scatter-unsorted-cpu.md"),
    "pyg-alias-2026-11-25.png": (plot_pyg_ratios, "pyg-cpu-2core-2026-11-25.md"),
    "cuda-h100-quick-2026-11-23.png": (plot_cuda_bandwidth, "cuda-h100-2026-11-23-quick.md"),
}


# ---- the benchmark scripts' --plot -----------------------------------------------------------------------

def add_plot_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plot", metavar="PNG", type=Path,
                        help="also draw the results table into PNG (needs matplotlib: pip install matplotlib)")


def check_plot_argument(args) -> None:
    """Before a benchmark runs: refuse --plot without matplotlib (minutes of measuring, then no plot)."""
    if getattr(args, "plot", None) and not have_matplotlib():
        sys.exit(MATPLOTLIB_MISSING)


def plot_from_script(kind: str, markdown: str, args, title: str) -> None:
    """Draw the Markdown table a benchmark script just made, when it was asked for with --plot."""
    if getattr(args, "plot", None):
        print("plot written to", KINDS[kind](markdown, args.plot, title))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print each plot and the results file it reads")
    ap.add_argument("--out", type=Path, default=PLOTS, help="folder for the PNG files (default: %(default)s)")
    ap.add_argument("--kind", choices=list(KINDS), help="draw one results file (SRC) of this table format into OUT")
    ap.add_argument("files", nargs="*", type=Path, metavar="SRC OUT", help="with --kind: the results file and the PNG")
    args = ap.parse_args(argv)
    if args.kind:
        if len(args.files) != 2:
            ap.error("--kind takes a results file and an output PNG")
        print(KINDS[args.kind](args.files[0], args.files[1]))
        return 0
    for name, (fn, src) in PLOTS_FROM.items():
        if args.list:
            print(f"{name}: {fn.__name__}({src})")
        else:
            print(fn(RESULTS / src, args.out / name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
