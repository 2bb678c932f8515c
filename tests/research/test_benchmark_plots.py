"""benchmarks/plots.py draws every benchmark table format (the scripts' --plot) and tools/gpu_check.sh's
predicted-vs-measured results, from tiny synthetic tables written as the scripts write them. Reading needs the
standard library only; drawing needs matplotlib (optional, benchmarks only: those tests skip, saying so, without
it; tools/bootstrap.sh installs it for CI). About 3 s with matplotlib."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import plots

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
needs_matplotlib = pytest.mark.skipif(not plots.have_matplotlib(), reason=(
    "matplotlib is not installed (optional, benchmarks only; tools/bootstrap.sh installs it): plots not drawn"))


def _cpu_table() -> str:
    from benchmarks import common as C

    rows = [C.Row("2M x 64, 100k random segments", "sum", "float32", nbytes=600_000_000, yard_bytes=512_000_000,
                  segops=0.0146, yard=0.0117, alternatives={"scatter_reduce_": 0.0277}, native=("scatter_reduce_",),
                  round_yard_pct=[66.0, 84.0, 85.0]),
            C.Row("2M x 64, 100k random segments", "max", "bfloat16", nbytes=300_000_000, yard_bytes=256_000_000,
                  segops=0.02, yard=0.01, alternatives={"scatter_reduce_": None}, native=("scatter_reduce_",))]
    return C.table(rows, ["scatter_reduce_"], markdown=True)


def _cuda_table() -> str:
    from benchmarks import bench_cuda

    def result(dist, feat, dtype, op, t):
        return dict(dist=dist, feat=feat, dtype=dtype, op=op, segments=1024, max_len=97, segops=t, nbytes=2e8,
                    copy=1e-4, copy_bytes=2.8e8, alts={"torch.segment_reduce": 2 * t}, agrees=True)

    return bench_cuda.table([result("uniform", 1, "float32", "sum", 1.1e-4), result("uniform", 64, "float32", "sum", 2e-4),
                             result("few-huge", 1, "bfloat16", "softmax", 5e-4)], markdown=True)


# table format -> a tiny table as its script writes it (the header cells the reader needs are checked against the
# script's source by test_scripts_write_the_columns_the_plots_read)
SYNTHETIC = {
    "coo-vs-pytorch-scatter": (
        "| shape (fp32) | index | case | segops | pytorch_scatter | segops / pytorch_scatter | segops / torch | "
        "segops / segment_coo | other |\n|---|---|---|---|---|---|---|---|---|\n"
        "| 1M x 64 | sorted | segment_coo sum | 194.90 ms | 321.25 ms | 0.62 | - | - | - |\n"
        "| 1M x 64 | shuffled | scatter sum | 394.90 ms | 321.25 ms | 1.23 | scatter_reduce_ 0.9 | - | - |\n"),
    "scatter-vs-torch": (
        "| shape (fp32) | op | segops scatter | segops scatter, plan | plan alone (sort) | scatter_reduce_ | "
        "index_add_ | sort every call / fastest torch | plan / fastest torch |\n|---|---|---|---|---|---|---|---|---|\n"
        "| 1M x 64, 50k targets | sum | 408.39 ms | 242.40 ms | 168.09 ms | 150.45 ms | 158.59 ms | "
        "2.71x (scatter_reduce_) [1.59x-3.61x] | 0.61x (scatter_reduce_) [0.53x-0.79x] |\n"),
    "unsorted-vs-pytorch-scatter": (
        "| rows x F (fp32) | targets | reduce | segops | pytorch_scatter | segops / pytorch_scatter | segops / torch | "
        "peak MiB per call (segops / pytorch_scatter / torch scatter_reduce_) |\n|---|---|---|---|---|---|---|---|\n"
        "| 1e+06 x 1 | 1e+03 | sum | 69.62 ms | 1.36 ms | 49.23 | scatter_reduce_ 4.20 | 6 / 0 / 0 |\n"
        "| 1e+06 x 64 | 1e+05 | max | 9.62 ms | 11.36 ms | n/a | scatter_reduce_ 0.80 | - |\n"),
    "pyg-alias": (
        "| case (forward + backward) | native PyG | with the alias | alias / native [per-round range] |\n"
        "|---|---|---|---|\n| segment_sum | 1871.9 ms | 1351.8 ms | 0.72x [0.66x-0.72x] |\n"
        "| gat | 100.0 ms | 110.0 ms | 1.10x [1.05x-1.20x] |\n"),
    "extrema": (
        "| shape | sum ms | max ms | min ms | max out= ms | amax(0) ms | max/sum | min/sum | max out=/sum | "
        "amax/(max out=) |\n|---|---|---|---|---|---|---|---|---|---|\n"
        "| 2M x 64 (100000 segs) | 19.7 | 26.0 | 25.2 | 24.0 | 30.1 | 1.33 | 1.28 | 1.22 | 1.25 |\n"),
}


def test_rows_of_each_format():
    assert plots.cpu_bandwidth_rows(_cpu_table()) == [("2M x 64 sum", 41.1, 43.8, 94.0),
                                                      ("2M x 64 max bfloat16", 15.0, 25.6, 59.0)]
    assert plots.cuda_bandwidth_rows(_cuda_table()) == [
        ("sum float32", "uniform F=1", 65.0), ("sum float32", "uniform F=64", 36.0),
        ("softmax bfloat16", "few-huge F=1", 14.0)]
    assert plots.scatter_ratio_rows(SYNTHETIC["coo-vs-pytorch-scatter"], after=None) == [
        ("1M x 64 sorted segment_coo sum", 0.62), ("1M x 64 shuffled scatter sum", 1.23)]
    assert plots.ratio_rows(SYNTHETIC["unsorted-vs-pytorch-scatter"], ["reduce"], {"p": "segops / pytorch_scatter"}) == [
        ("sum", {"p": 49.23}), ("max", {"p": None})]
    with pytest.raises(ValueError, match="no line starting with '## Run A'"):
        plots.read_table(SYNTHETIC["pyg-alias"], after="## Run A")
    assert plots.seconds("109.7 us") == pytest.approx(1.097e-4) and plots.seconds("1.237 ms") == pytest.approx(1.237e-3)
    assert plots.seconds("~0.4 s (est.)") == pytest.approx(0.4) and plots.seconds("n/a") is None


def test_scripts_write_the_columns_the_plots_read():
    """Each script's --plot names a format of plots.KINDS, and the columns that format reads are in the script."""
    reads = {"cpu-bandwidth": (["shape", "op", "dtype", "GB/s", "yardstick GB/s", "segops % of yardstick"], "common.py"),
             "cuda-bandwidth": (["dist", "op", "dtype", "% of copy"], "bench_cuda.py"),
             "coo-vs-pytorch-scatter": (["shape (fp32)", "index", "case", "segops / pytorch_scatter"], "bench_coo.py"),
             "scatter-vs-torch": (["sort every call / fastest torch", "plan / fastest torch"], "bench_scatter.py"),
             "unsorted-vs-pytorch-scatter": (["rows x F (fp32)", "targets", "segops / pytorch_scatter"],
                                             "bench_scatter_unsorted.py"),
             "pyg-alias": (["case (forward + backward)", "alias / native [per-round range]"], "bench_pyg.py"),
             "extrema": (["max/sum", "min/sum", "max out=/sum", "amax/(max out=)"], "bench_extrema.py")}
    assert set(reads) == set(plots.KINDS) - {"gpu-predicted-vs-measured"}
    scripts = sorted(BENCH.glob("bench_*.py"))
    drawn = {}
    for script in scripts:
        text = script.read_text()
        kinds = re.findall(r'plot_from_script\(\s*"([^"]+)"', text)
        assert kinds and "add_plot_argument" in text and "check_plot_argument" in text, f"{script.name}: no --plot"
        drawn.update({k: script.name for k in kinds})
    assert set(drawn) == set(reads), drawn
    for kind, (columns, source) in reads.items():
        text = (BENCH / source).read_text()
        assert not [c for c in columns if c not in text], (kind, source)


def test_plot_without_matplotlib_says_so(monkeypatch):
    class Args:
        plot = Path("out.png")

    monkeypatch.setattr(plots, "have_matplotlib", lambda: False)
    with pytest.raises(SystemExit, match="needs matplotlib.*pip install matplotlib"):
        plots.check_plot_argument(Args())
    Args.plot = None
    plots.check_plot_argument(Args())  # no --plot: nothing asked, nothing refused


def _gpu_check_md(bench_table: str, prediction: str) -> str:
    """The two sections of tools/gpu_check.sh's gpu-check.md that the plot reads, as the script writes them."""
    return (f"# GPU check\n\n- bench: exit 0\n\n{plots.MEASURED_HEADING}\n\n{bench_table}\n\n"
            f"{plots.PREDICTED_HEADING} before the run (gpu-prebuilt/prediction.md)\n\n{prediction}\n\ncalibration ...\n")


def _prediction(rows: list[tuple[str, str, str, str, str]]) -> str:
    head = ["dist", "F", "dtype", "op", "predicted", "% of copy (pred.)", "measured", "% of copy (meas.)", "error"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + [f"| {d} | {f} | {dt} | {op} | {t} | 50% | - | - | - |" for d, f, dt, op, t in rows])


def test_gpu_check_sections_are_the_ones_read():
    script = (ROOT / "tools" / "gpu_check.sh").read_text()
    assert "'## Measured (quick benchmark)'" in script and plots.MEASURED_HEADING == "## Measured (quick benchmark)"
    assert f"'{plots.PREDICTED_HEADING} before the run" in script
    model = (ROOT / "research" / "gpu_model" / "model.py").read_text()
    assert 'head = ["dist", "F", "dtype", "op", "predicted"' in model and "STATED_ERROR = 0.40" in model


def test_gpu_prediction_rows_join_on_the_case():
    md = _gpu_check_md(_cuda_table(), _prediction([("uniform", "64", "float32", "sum", "150.0 us"),
                                                   ("uniform", "1", "float32", "sum", "1.100 ms"),
                                                   ("power-law", "1", "float32", "sum", "99.0 us")]))
    rows = plots.gpu_prediction_rows(md)
    assert rows == [("sum uniform F=64 float32", pytest.approx(1.5e-4), pytest.approx(2e-4)),
                    ("sum uniform F=1 float32", pytest.approx(1.1e-3), pytest.approx(1.1e-4))]  # power-law: not measured
    one_table = _prediction([("uniform", "64", "float32", "sum", "150.0 us")]).replace("| - | - | - |", "| 200.0 us | 40% | -25% |")
    assert plots.gpu_prediction_rows(one_table) == [("sum uniform F=64 float32", pytest.approx(1.5e-4), pytest.approx(2e-4))]


@needs_matplotlib
@pytest.mark.parametrize("kind", sorted(plots.KINDS))
def test_each_kind_draws(kind, tmp_path):
    if kind == "cpu-bandwidth":
        src = _cpu_table()
    elif kind == "cuda-bandwidth":
        src = _cuda_table()
    elif kind == "gpu-predicted-vs-measured":
        src = tmp_path / "gpu-check.md"  # a file, as `plots.py --kind` reads it
        src.write_text(_gpu_check_md(_cuda_table(), _prediction([("uniform", "64", "float32", "sum", "150.0 us"),
                                                                 ("uniform", "1", "float32", "sum", "120.0 us")])))
    else:
        src = SYNTHETIC[kind]
    out = plots.KINDS[kind](src, tmp_path / "sub" / f"{kind}.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000, (kind, len(data))


@needs_matplotlib
def test_plots_cli_draws_one_file(tmp_path, capsys):
    src = tmp_path / "gpu-check.md"
    src.write_text(_gpu_check_md(_cuda_table(), _prediction([("few-huge", "1", "bfloat16", "softmax", "400.0 us")])))
    assert plots.main(["--kind", "gpu-predicted-vs-measured", str(src), str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="no case with both"):
        plots.plot_gpu_prediction(_gpu_check_md(_cuda_table(), _prediction([])), tmp_path / "none.png")
