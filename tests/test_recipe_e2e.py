"""End to end: build the cpu variant of recipe/ with rattler-build against the offline channel of
stand-in packages (recipe tests ON), inspect the package, install it into a fresh environment with
py-rattler and run the ops there.

Slow (a few minutes: the stand-in channel on first use, one compile, the recipe's test suite), but
it runs in CI. Measured numbers go to the terminal and to _work/conda-e2e-metrics.json.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import conda_tools as ct  # noqa: E402

pytestmark = pytest.mark.slow
METRICS = REPO / "_work" / "conda-e2e-metrics.json"


def report(request, line: str) -> None:
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(f"[conda e2e] {line}")


@pytest.fixture(scope="module")
def built(request, tmp_path_factory):
    ct.require_tools(patchelf=True)
    import offline_channel

    t0 = time.time()
    channel, variants_file = offline_channel.ensure_channel()
    t_channel = time.time() - t0
    variant = ct.select(ct.render([variants_file]), "cpu")
    out = tmp_path_factory.mktemp("rattler-build")
    res = ct.build(variant, [channel.as_uri()], out, test=True, echo=False)
    pkg = ct.read_package(res.package, tmp_path_factory.mktemp("unpacked"))
    metrics = {"package": res.package.name, "package_bytes": pkg.size, "build_and_test_seconds": round(res.seconds, 1),
               "offline_channel_seconds": round(t_channel, 1)}
    METRICS.parent.mkdir(exist_ok=True)
    METRICS.write_text(json.dumps(metrics, indent=1))
    report(request, f"{res.package.name}: {pkg.size / 1024:.0f} KiB, rattler-build build + recipe tests "
                    f"{res.seconds:.0f} s (stand-in channel ready in {t_channel:.0f} s)")
    return {"variant": variant, "result": res, "pkg": pkg, "channel": channel, "out": out}


def test_recipe_tests_ran_during_build(built, request):
    log = built["result"].log.read_text()
    assert "python imports test passed" in log and "pip check passed" in log
    for f in ("__init__.py", "_C.so"):
        assert f'site_packages: "site-packages/torch_segops/{f}" matched' in log
    assert "torch 2.13.0+cpu | python 3.11" in log, "recipe/test_package.py did not report success"
    summary = re.findall(r"^info: (\d+ passed.*in [\d.]+s.*)$", log, re.M)
    assert summary and "failed" not in summary[-1] and "error" not in summary[-1], summary
    report(request, f"recipe test suite (tests/test_ops*.py in the package's test env): {summary[-1]}")


def test_package_metadata(built):
    idx = built["pkg"].index
    assert idx["name"] == "torch-segops" and idx["version"] == "0.1.0"
    assert idx["build"] == built["variant"].recipe.build.string and idx["build"].startswith("cpu_h")
    assert idx["subdir"] == "linux-64" and idx["noarch"] == "python", "python-version independent (abi3 style)"
    # python_min is the offline variant file's (the stand-in channel has one python); shipped: 3.10
    python_min = built["variant"].variant["python_min"]
    assert python_min == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert sorted(idx["depends"]) == [f"python >={python_min}", "pytorch >=2.10 cpu*"]
    assert built["pkg"].link["noarch"]["entry_points"] == ["torch-segops-doctor = torch_segops.doctor:main"]


def test_package_contents(built, request):
    pkg = built["pkg"]
    files = pkg.files()
    report(request, f"{len(files)} files: " + ", ".join(f for f in files if "test-files" not in f))
    for f in ("site-packages/torch_segops/_C.so", "site-packages/torch_segops/__init__.py",
              "site-packages/torch_segops/_library.py", "site-packages/torch_segops/ops.py"):
        assert f in files
    assert (pkg.root / "info" / "licenses" / "LICENSE").read_text() == (REPO / "LICENSE").read_text()
    assert not [f for f in files if f.endswith((".o", ".a", ".pyc", "direct_url.json", "CMakeCache.txt"))]
    assert not [f for f in files if f.startswith(("bin/", "lib/", "include/"))], "only site-packages content"
    assert pkg.size < 5 * 2**20, f"package unexpectedly large: {pkg.size} bytes"


def test_no_build_paths_in_package(built):
    pkg, res = built["pkg"], built["result"]
    work = res.log.parent / "bld"
    needles = [str(REPO), str(work), "host_env_placehold", "build_env", "/work/"]
    hits = ct.build_paths_in(pkg, needles)
    assert not hits, f"unrelocated build paths: {hits}"
    assert not [p for p in pkg.paths if p.get("prefix_placeholder")], "no file needs prefix rewriting"


def test_install_into_fresh_env_and_run(built, tmp_path_factory, request):
    channel = ct.make_channel([built["result"].package], tmp_path_factory.mktemp("channel"))
    env = tmp_path_factory.mktemp("env") / "segops"
    t0 = time.time()
    installed = ct.create_env(env, [channel.as_uri(), built["channel"].as_uri()], ["torch-segops", "pip"])
    report(request, f"fresh environment with {len(installed)} packages in {time.time() - t0:.0f} s")
    assert any(i.startswith("torch-segops=0.1.0=cpu_h") for i in installed)
    py = env / "bin" / "python"
    code = (
        "import torch, torch_segops as so\n"
        "src = torch.tensor([[1., 2.], [3., 4.], [5., 6.], [7., 8.]])\n"
        "indptr = torch.tensor([0, 1, 1, 4])\n"
        "assert so.segment_csr(src, indptr, reduce='sum').tolist() == [[1, 2], [0, 0], [15, 18]]\n"
        "assert so.segment_csr(src, indptr, reduce='max').tolist() == [[1, 2], [0, 0], [7, 8]]\n"
        "assert so.gather_csr(torch.tensor([[1.], [2.], [3.]]), indptr).tolist() == [[1], [3], [3], [3]]\n"
        "print(so.library_path())\n")
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(env)), f"library not loaded from the new environment: {out.stdout}"
    check = subprocess.run([str(py), "-m", "pip", "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    doctor = env / "bin" / "torch-segops-doctor"
    assert doctor.exists(), "the entry point was not created at install time"
    diag = subprocess.run([str(doctor)], capture_output=True, text=True)
    assert diag.returncode == 0 and "variant=cpu" in diag.stdout, diag.stdout + diag.stderr
