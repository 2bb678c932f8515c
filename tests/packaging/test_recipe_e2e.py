"""End to end: build the cpu and cuda130 variants of recipe/ with rattler-build against the offline
channels of stand-in packages (recipe tests ON), inspect each package, install it into a fresh
environment with py-rattler and run the ops there.

cuda130 is built against PyPI's CUDA 13.0 torch (its wheels, about 2.7 GB, are downloaded once into the
cache folder, see tools/offline_channel.py) for a reduced arch list (CI_ARCHS: one old, one new GPU;
the main command builds the full list). Without a driver, CONDA_OVERRIDE_CUDA lets the test and demo
environments accept the package's __cuda requirement; the CUDA kernels are not run here.

Slow (cpu: a few minutes; cuda130: about ten), but it runs in CI. Measured numbers go to the terminal
and to conda-e2e-metrics.json in the cache folder.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools import conda_tools as ct

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow
XDIST_SPLIT_BY = "built"  # the cpu and cuda130 packages are built by two workers at once (tests/conftest.py)
METRICS = ct.cache_dir() / "conda-e2e-metrics.json"
CI_ARCHS = "75-real;90-real"
HWY_MIN = re.search(r"set\(TORCH_SEGOPS_HWY_MIN_VERSION ([\d.]+)\)", (REPO / "cmake" / "highway.cmake").read_text()).group(1)


def report(request, line: str) -> None:
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(f"[conda e2e] {line}")


@pytest.fixture(scope="module", params=["cpu", "cuda130"])
def built(request, tmp_path_factory, monkeypatch_module):
    ct.require_tools(patchelf=True)
    from tools import offline_channel

    name = request.param
    t0 = time.time()
    channel, variants_file = offline_channel.ensure_channel()
    channels = [channel.as_uri()]
    archs = None
    if name != "cpu":
        # first: both channels hold a pytorch, and strict channel priority takes the first that has one
        channels.insert(0, offline_channel.ensure_cuda_channel("13.0", channel).as_uri())
        archs = CI_ARCHS
        monkeypatch_module.setenv("CUDAARCHS", archs)  # read when the recipe is rendered
        if not ct.has_cuda_driver():
            monkeypatch_module.setenv("CONDA_OVERRIDE_CUDA", "13.0")
    t_channel = time.time() - t0
    variant = ct.select(ct.render([variants_file]), name)
    out = tmp_path_factory.mktemp(f"rattler-build-{name}")
    res = ct.build(variant, channels, out, test=True, echo=False)
    pkg = ct.read_package(res.package, tmp_path_factory.mktemp(f"unpacked-{name}"))
    metrics = json.loads(METRICS.read_text()) if METRICS.exists() else {}
    metrics[name] = {"package": res.package.name, "package_bytes": pkg.size,
                     "build_and_test_seconds": round(res.seconds, 1), "offline_channel_seconds": round(t_channel, 1)}
    METRICS.parent.mkdir(parents=True, exist_ok=True)
    METRICS.write_text(json.dumps(metrics, indent=1))
    report(request, f"{res.package.name}: {pkg.size / 1024:.0f} KiB, rattler-build build + recipe tests "
                    f"{res.seconds:.0f} s (stand-in channels ready in {t_channel:.0f} s)")
    return {"name": name, "variant": variant, "result": res, "pkg": pkg, "channels": channels, "archs": archs}


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_recipe_tests_ran_during_build(built, request):
    log = built["result"].log.read_text()
    assert "python imports test passed" in log and "pip check passed" in log
    for f in ("__init__.py", "_C.so"):
        assert f'site_packages: "site-packages/torch_segops/{f}" matched' in log
    torch_version = "2.13.0+cpu" if built["name"] == "cpu" else "2.13.0+cu130"
    assert f"torch {torch_version} | python 3.11" in log, "recipe/test_package.py did not report success"
    summary = re.findall(r"^info: (\d+ passed.*in [\d.]+s.*)$", log, re.M)
    assert summary and "failed" not in summary[-1] and "error" not in summary[-1], summary
    report(request, f"{built['name']} recipe test suite (tests/api/test_ops*.py in the package's test env): {summary[-1]}")


def test_package_metadata(built):
    idx, name = built["pkg"].index, built["name"]
    assert idx["name"] == "torch-segops" and idx["version"] == "0.1.0"
    assert idx["build"] == built["variant"].recipe.build.string and idx["build"].startswith(f"{name}_h")
    assert idx["build_number"] == (0 if name == "cpu" else 200)
    assert idx["subdir"] == "linux-64" and idx["noarch"] == "python", "python-version independent (abi3 style)"
    # python_min is the offline variant file's (the stand-in channel has one python); shipped: 3.10
    python_min = built["variant"].variant["python_min"]
    assert python_min == f"{sys.version_info.major}.{sys.version_info.minor}"
    # libhwy: the recipe's range and the (stand-in) libhwy's run-export, as conda-forge's carries it
    from tools import offline_channel
    hwy = offline_channel.system_hwy()["hwy_version"]
    major, minor = (int(x) for x in hwy.split(".")[:2])
    libhwy = [f"libhwy >={hwy},<{major}.{minor + 1}.0a0", f"libhwy >={HWY_MIN},<{int(HWY_MIN.split('.')[0]) + 1}"]
    if name == "cpu":
        assert sorted(idx["depends"]) == sorted([*libhwy, f"python >={python_min}", "pytorch >=2.10 cpu*"])
    else:  # the run-exports of the (stand-in) cuda-nvcc and cuda-cudart-dev, as conda-forge's carry them
        assert sorted(idx["depends"]) == sorted(["__cuda", "cuda-cudart >=13.0.96,<14.0a0", "cuda-version >=13.0,<14",
                                                 *libhwy, f"python >={python_min}", "pytorch >=2.10 cuda*"])
    assert built["pkg"].link["noarch"]["entry_points"] == ["torch-segops-doctor = torch_segops.doctor:main"]


def test_package_inspection(built, request):
    """The checks tools/main.py runs on every package it builds: dependencies of the variant, no build
    paths, one doctor entry point; CUDA: SASS for exactly the arch list, NEEDED libtorch_cuda/cudart."""
    facts = ct.inspect_package(built["pkg"], built["variant"].variant, built["archs"])
    assert facts["problems"] == []
    if built["name"] != "cpu":
        assert facts["fatbin"] == ["elf:75", "elf:90"], facts["fatbin"]
        assert {"libtorch_cuda.so", "libtorch_cpu.so", "libcudart.so.13"} <= set(facts["needed"]), facts["needed"]
        report(request, f"cuda130 _C.so: fatbin {facts['fatbin']} ({facts['fatbin_bytes'] / 1024:.0f} KiB), "
                        f"NEEDED {facts['needed']}")


def test_package_contents(built, request):
    pkg = built["pkg"]
    files = pkg.files()
    for f in ("site-packages/torch_segops/_C.so", "site-packages/torch_segops/__init__.py",
              "site-packages/torch_segops/_library.py", "site-packages/torch_segops/csr.py"):
        assert f in files
    assert (pkg.root / "info" / "licenses" / "LICENSE").read_text() == (REPO / "LICENSE").read_text()
    assert not [f for f in files if f.endswith((".o", ".a", ".pyc", "direct_url.json", "CMakeCache.txt"))]
    assert not [f for f in files if f.startswith(("bin/", "lib/", "include/"))], "only site-packages content"
    assert pkg.size < 5 * 2**20, f"package unexpectedly large: {pkg.size} bytes"
    report(request, f"{built['name']}: {pkg.size / 2**20:.2f} MiB, {len(files)} files")


def test_no_build_paths_in_package(built):
    pkg, res = built["pkg"], built["result"]
    work = res.log.parent / "bld"
    needles = [str(REPO), str(work), "host_env_placehold", "build_env", "/work/"]
    hits = ct.build_paths_in(pkg, needles)
    assert not hits, f"unrelocated build paths: {hits}"
    assert not [p for p in pkg.paths if p.get("prefix_placeholder")], "no file needs prefix rewriting"


def test_install_into_fresh_env_and_run(built, tmp_path_factory, request):
    name = built["name"]
    channel = ct.make_channel([built["result"].package], tmp_path_factory.mktemp(f"channel-{name}"))
    env = tmp_path_factory.mktemp(f"env-{name}") / "segops"
    t0 = time.time()
    installed = ct.create_env(env, [channel.as_uri(), *built["channels"]], ["torch-segops", "pip"])
    report(request, f"{name}: fresh environment with {len(installed)} packages in {time.time() - t0:.0f} s")
    assert any(i.startswith(f"torch-segops=0.1.0={name}_h") for i in installed)
    assert any(i.startswith(f"pytorch=2.13.0={'cpu' if name == 'cpu' else 'cuda130'}_") for i in installed), installed
    py = env / "bin" / "python"
    code = (
        "import torch, torch_segops as so\n"
        "src = torch.tensor([[1., 2.], [3., 4.], [5., 6.], [7., 8.]])\n"
        "indptr = torch.tensor([0, 1, 1, 4])\n"
        "assert so.segment_csr(src, indptr, reduce='sum').tolist() == [[1, 2], [0, 0], [15, 18]]\n"
        "assert so.segment_csr(src, indptr, reduce='max').tolist() == [[1, 2], [0, 0], [7, 8]]\n"
        "assert so.gather_csr(torch.tensor([[1.], [2.], [3.]]), indptr).tolist() == [[1], [3], [3], [3]]\n"
        "info = so.build_info()\n"
        "assert info['variant'] == ('cpu' if torch.version.cuda is None else 'cuda'), info\n"
        "assert info['cuda_version'] == torch.version.cuda, (info, torch.version.cuda)\n"
        "print(so.library_path())\n"
        "print(*sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libhwy.so' in l}))\n")
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd=env)
    assert out.returncode == 0, out.stderr
    library, hwy = out.stdout.splitlines()
    assert library.startswith(str(env)), f"library not loaded from the new environment: {out.stdout}"
    # _C.so's libhwy.so.1 is the environment's (this machine also has Debian's, in the loader's cache)
    assert hwy.split() and all(h.startswith(f"{env}/lib/") for h in hwy.split()), hwy
    check = subprocess.run([str(py), "-m", "pip", "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    doctor = env / "bin" / "torch-segops-doctor"
    assert doctor.exists(), "the entry point was not created at install time"
    diag = subprocess.run([str(doctor)], capture_output=True, text=True)
    assert diag.returncode == 0 and f"variant={'cpu' if name == 'cpu' else 'cuda'}" in diag.stdout, \
        diag.stdout + diag.stderr
