"""Google Highway in the build (cmake/highway.cmake): the installed library where CMake finds it; where it is
missing, Highway's release source (downloaded, checked against its SHA-256, built static into _C.so); where
that download fails, configuring stops with a message that says how to install it. Configure-only runs (a few
seconds each, nothing compiled): the download is pointed at a file that does not exist, or at one with the
wrong hash, as on a machine without a network (this one cannot reach GitHub). Also the CPU kernel objects, one per
Highway target: TORCH_SEGOPS_CPU_ISAS chooses some of them (the sse4 one only on request) and refuses a list that
does not start with the baseline, names an unknown object or is out of order."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INSTALL_HINTS = ("apt-get install libhwy-dev", "conda install -c conda-forge libhwy", "dnf install highway-devel",
                 "brew install highway", "vcpkg install highway",
                 "-DTORCH_SEGOPS_HWY=source -DTORCH_SEGOPS_HWY_SOURCE_DIR=")
HWY_CMAKE = (REPO / "cmake" / "highway.cmake").read_text()
SHA256 = re.search(r'set\(TORCH_SEGOPS_HWY_SHA256 "([0-9a-f]{64})"', HWY_CMAKE).group(1)
MIN_VERSION = re.search(r"set\(TORCH_SEGOPS_HWY_MIN_VERSION ([\d.]+)\)", HWY_CMAKE).group(1)


def configure(tmp_path: Path, *defines: str) -> tuple[int, str]:
    """cmake's exit status and its output, whitespace folded (CMake wraps its messages)."""
    spec = importlib.util.find_spec("torch")
    assert spec is not None, "torch is not installed (tools/bootstrap.sh installs it)"
    cmd = ["cmake", "-S", str(REPO), "-B", str(tmp_path / "build"),
           f"-DTORCH_SEGOPS_TORCH_DIR={list(spec.submodule_search_locations)[0]}", *defines]
    if shutil.which("ninja"):
        cmd += ["-G", "Ninja"]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return cp.returncode, re.sub(r"\s+", " ", cp.stdout + cp.stderr)


def test_no_highway_and_no_download_says_how_to_get_it(tmp_path):
    missing = tmp_path / "nowhere" / "highway-1.3.0.tar.gz"
    rc, text = configure(tmp_path, "-DCMAKE_DISABLE_FIND_PACKAGE_hwy=ON", f"-DTORCH_SEGOPS_HWY_URL=file://{missing}")
    assert rc != 0, text[-3000:]
    assert "Google Highway was not found installed, and its release source could not be downloaded" in text, text[-3000:]
    for hint in INSTALL_HINTS:
        assert hint in text, (hint, text[-3000:])
    assert f"SHA-256 {SHA256}" in text, "the message names the archive's hash for an offline download"


def test_a_download_with_the_wrong_hash_is_refused(tmp_path):
    fake = tmp_path / "highway.tar.gz"
    fake.write_bytes(b"not a release")
    rc, text = configure(tmp_path, "-DTORCH_SEGOPS_HWY=source", f"-DTORCH_SEGOPS_HWY_URL=file://{fake}")
    assert rc != 0 and f"expected {SHA256}" in text, text[-3000:]
    assert not (tmp_path / "build" / "_deps" / "highway" / "highway.tar.gz").exists(), "the bad archive was kept"


def test_system_only_without_highway_says_how_to_get_it(tmp_path):
    rc, text = configure(tmp_path, "-DTORCH_SEGOPS_HWY=system", "-DCMAKE_DISABLE_FIND_PACKAGE_hwy=ON")
    assert rc != 0 and f"TORCH_SEGOPS_HWY=system: CMake found no package `hwy` >= {MIN_VERSION}" in text, text[-3000:]
    assert "downloading" not in text, "system must never download"
    for hint in INSTALL_HINTS:
        assert hint in text, (hint, text[-3000:])


def test_the_installed_highway_is_found(tmp_path):
    installed_highway()
    rc, text = configure(tmp_path, "-DTORCH_SEGOPS_HWY=system")
    assert rc == 0, text[-3000:]
    assert re.search(r"torch_segops: Google Highway [\d.]+, installed", text), text[-2000:]


def installed_highway() -> None:
    if not Path("/usr/include/hwy/highway.h").exists():
        if shutil.which("apt-get"):
            pytest.fail("no installed Highway: run tools/bootstrap.sh, which installs libhwy-dev with apt-get")
        pytest.skip("no installed Highway and no apt-get to install it: the configure with it did not run")


def objects(tmp_path: Path) -> tuple[str, str]:
    """The generated list of CPU objects (cpu_isa_list.h's TORCH_SEGOPS_CPU_ISAS) and the build's compile rules."""
    header = (tmp_path / "build" / "generated" / "cpu_isa_list.h").read_text()
    rules = next((tmp_path / "build").glob("build.ninja"), None) or next((tmp_path / "build").rglob("flags.make"))
    return re.search(r'#define TORCH_SEGOPS_CPU_ISAS "([^"]*)"', header).group(1), rules.read_text()


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the x86-64 objects")
@pytest.mark.parametrize("isas, built", [(None, "baseline,avx2,avx512"), ("baseline", "baseline"),
                                         ("baseline,sse4,avx2", "baseline,sse4,avx2"),
                                         ("baseline;avx512", "baseline,avx512")])
def test_cpu_objects_chosen(tmp_path, isas, built):
    installed_highway()
    rc, text = configure(tmp_path, "-DTORCH_SEGOPS_HWY=system", *([f"-DTORCH_SEGOPS_CPU_ISAS={isas}"] if isas else []))
    assert rc == 0, text[-3000:]
    listed, rules = objects(tmp_path)
    assert listed == built
    for isa in ("baseline", "sse4", "avx2", "avx512"):
        assert (f"torch_segops_cpu_{isa}" in rules) == (isa in built.split(",")), isa
    if "sse4" in built:
        assert "-msse4.2 -mpopcnt -mpclmul -maes" in rules


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the x86-64 objects")
@pytest.mark.parametrize("isas, message", [
    ("avx2", "TORCH_SEGOPS_CPU_ISAS=avx2: the first object must be baseline"),
    ("baseline,neon", "TORCH_SEGOPS_CPU_ISAS: unknown object 'neon' for x86_64; known here: baseline;sse4;avx2;avx512"),
    ("baseline,avx2,sse4", "TORCH_SEGOPS_CPU_ISAS=baseline;avx2;sse4: list each object once, lowest first"),
    ("baseline,avx2,avx2", "TORCH_SEGOPS_CPU_ISAS=baseline;avx2;avx2: list each object once, lowest first")])
def test_cpu_objects_refused(tmp_path, isas, message):
    installed_highway()
    rc, text = configure(tmp_path, "-DTORCH_SEGOPS_HWY=system", f"-DTORCH_SEGOPS_CPU_ISAS={isas}")
    assert rc != 0 and message in text, text[-3000:]
