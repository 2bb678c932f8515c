"""The doctor: its checks are pure functions over Facts, tested by feeding facts; plus runs of the real
`python -m torch_segops.doctor` on this machine (healthy install, missing library, unloadable library).
"""

from __future__ import annotations

import ast
import base64
import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import os
import random
import re
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from doctor_module import load_doctor, load_libfile

ROOT = Path(__file__).resolve().parents[2]


D = load_doctor()
L = load_libfile()

LOCAL = "file:///home/u/.cache/torch-segops/output/channel"  # tools/main.sh's channel, holding its last build
CPU_BUILD = {"version": "0.1.0", "variant": "cpu", "cuda_version": None, "cuda_archs": [], "torch_target": "2.10", "torch_headers": "2.13.0+cpu"}


def cuda_build(cuda="12.9", archs=("75-real", "80-real", "86-real", "89-real", "90-real", "100-real", "120")):
    return {**CPU_BUILD, "variant": "cuda", "cuda_version": cuda, "cuda_archs": list(archs)}


def facts(**kw) -> "D.Facts":
    base = dict(
        python="3.12.7", platform="Linux", in_conda_env=True, package_version="0.1.0",
        library_path="/env/lib/python3.12/site-packages/torch_segops/_C.so", library_exists=True,
        build_info=dict(CPU_BUILD), build_info_source="loaded", torch_version="2.13.0",
        local_channel=LOCAL, channel_builds={LOCAL: ["cpu_h1a2b3c4_0"]},
    )
    base.update(kw)
    return D.Facts(**base)


def h100(index=0):
    return D.GPU(index, "NVIDIA H100 80GB HBM3", (9, 0))


def codes(findings, severity=None):
    return [f.code for f in findings if severity is None or f.severity == severity]


def only(findings, code):
    hits = [f for f in findings if f.code == code]
    assert len(hits) == 1, f"expected one {code}, got {codes(findings)}"
    return hits[0]


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "v, parsed", [("2.13.0+cpu", (2, 13, 0)), ("2.10.0a0+git1234", (2, 10, 0)), ("580.65.06", (580, 65, 6)), ("12.9", (12, 9)), ("", None), (None, None), ("cpu", None)]
)
def test_parse_version(v, parsed):
    assert D.records.parse_version(v) == parsed


@pytest.mark.parametrize(
    "v, minimum, ok",
    [("2.10.0", "2.10", True), ("2.9.1", "2.10", False), ("2.13.0+cu130", "2.10", True), ("3.0", "2.10", True),
     ("580", "580", True), ("575.57.08", "580", False), ("525.60.13", "525.60.13", True), ("525.60.11", "525.60.13", False), (None, "2.10", None)],
)
def test_version_at_least(v, minimum, ok):
    assert D.records.version_at_least(v, minimum) is ok


@pytest.mark.parametrize(
    "entry, expected",
    [("75-real", (7, 5, "", True, False)), ("90-virtual", (9, 0, "", False, True)), ("120", (12, 0, "", True, True)),
     ("90a-real", (9, 0, "a", True, False)), ("100f", (10, 0, "f", True, True)), ("sm_86", (8, 6, "", True, True))],
)
def test_parse_arch(entry, expected):
    e = D.checks.parse_arch(entry)
    assert (e.major, e.minor, e.suffix, e.sass, e.ptx) == expected


@pytest.mark.parametrize("entry", ["native", "all", "all-major", "", "75-realish"])
def test_parse_arch_rejects_lists_it_cannot_judge(entry):
    assert D.checks.parse_arch(entry) is None


@pytest.mark.parametrize(
    "cc, archs, kind, via",
    [
        ((8, 6), ["80-real"], "sass", "80"),  # same major, lower minor: binary compatible
        ((8, 0), ["86-real"], "none", None),  # higher minor does not run on a lower one
        ((8, 9), ["75", "80-real", "86-real"], "sass", "86"),  # the closest minor is picked
        ((9, 0), ["80-real", "90-virtual"], "ptx", "90"),  # sm_80 SASS never runs on a 9.x GPU
        ((12, 0), ["75-real", "90-real", "120"], "sass", "120"),
        ((12, 1), ["120-real"], "sass", "120"),
        ((10, 0), ["90a-real", "90-virtual"], "ptx", "90"),  # sm_90a runs only on exactly 9.0
        ((9, 0), ["90a-real"], "sass", "90a"),
        ((10, 3), ["100f-real"], "sass", "100f"),  # family-specific: same major
        ((7, 0), ["75-real", "80"], "none", None),  # PTX must be of a lower or equal cc
        ((12, 0), ["75-real", "80-real", "90-virtual"], "ptx", "90"),  # newer GPU: JIT from the newest PTX
        ((11, 0), ["100-real", "120-virtual"], "none", None),
        ((9, 0), ["100a-virtual", "80-real"], "none", None),  # arch-specific PTX is not portable
        ((8, 7), ["80-real", "86-real", "90-virtual"], "none", None),  # Jetson Orin: Tegra SASS is exact-cc only
        ((8, 7), ["86-real", "87-real"], "sass", "87"),
        ((8, 7), ["80-real", "86"], "ptx", "86"),
        ((8, 9), ["87-real"], "none", None),  # Orin's SASS does not run on a discrete 8.9
    ],
)
def test_arch_support(cc, archs, kind, via):
    got_kind, entry = D.checks.arch_support(cc, archs)
    assert got_kind == kind
    assert (entry.name if entry else None) == via


def test_facts_round_trip_through_json():
    f = facts(gpus=[h100(), D.GPU(1, "Tesla T4", (7, 5)), D.GPU(2, "unknown", None)], driver_version="580.65.06")
    back = D.Facts.from_dict(json.loads(json.dumps(f.to_dict())))
    assert back == f


def test_read_build_info_from_file(tmp_path):
    blob = (
        b"\x7fELF\x02\x01\x01garbage\x00"
        b'{"version": "0.1.0", "variant": "cuda", "cuda_version": "13.0", "cuda_archs": "75-real;90-real;120", '
        b'"torch_target": "2.10", "torch_headers": "2.13.0", "cxx_compiler": "14.3.0"}\x00more}\x00'
    )
    p = tmp_path / "_C.so"
    p.write_bytes(blob)
    info = D.probes.read_build_info_from_file(str(p))
    assert info["variant"] == "cuda" and info["cuda_version"] == "13.0"
    assert info["cuda_archs"] == ["75-real", "90-real", "120"]
    p.write_bytes(b"\x7fELF no build info here")
    assert D.probes.read_build_info_from_file(str(p)) is None
    assert D.probes.read_build_info_from_file(str(tmp_path / "absent.so")) is None


@pytest.mark.parametrize(
    "text, version",
    [
        ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 06:54:38 UTC 2025\nGCC version:  gcc version 12.2.0\n", "580.65.06"),
        ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  575.57.08  Release Build  (dvs-builder@U16)  Sat May 24 2025\n", "575.57.08"),
        ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  590.10  Release Build\n", "590.10"),
        ("no driver here\n", None),
    ],
)
def test_parse_nvrm_version(text, version):
    assert D.probes.parse_nvrm_version(text) == version


def test_parse_nvidia_smi():
    out = "0, NVIDIA H100 80GB HBM3, 9.0, 580.65.06\n1, NVIDIA GeForce RTX 5090, 12.0, 580.65.06\n2, Some GPU, [N/A], 580.65.06\n"
    gpus, driver = D.probes.parse_nvidia_smi(out)
    assert driver == "580.65.06"
    assert gpus == [D.GPU(0, "NVIDIA H100 80GB HBM3", (9, 0)), D.GPU(1, "NVIDIA GeForce RTX 5090", (12, 0)), D.GPU(2, "Some GPU", None)]
    assert D.probes.parse_nvidia_smi("") == ([], None)


# ---------------------------------------------------------------------------------------------
# checks, fed with facts
# ---------------------------------------------------------------------------------------------
def test_healthy_cpu_machine_has_no_problem():
    f = facts()
    findings = D.diagnose(f)
    assert not D.has_errors(findings) and not codes(findings, D.WARNING)
    assert {"torch", "library"} <= set(codes(findings, D.OK))


def test_healthy_gpu_machine_has_no_problem():
    f = facts(
        torch_version="2.12.0", torch_cuda_version="12.9", torch_cuda_available=True, gpus=[h100()],
        driver_version="575.57.08", driver_cuda_version="12.9", build_info=cuda_build("12.9"),
    )
    findings = D.diagnose(f)
    assert not D.has_errors(findings) and not codes(findings, D.WARNING), [dataclasses.asdict(x) for x in findings]
    assert {"torch", "library", "driver", "arch"} <= set(codes(findings, D.OK))


@pytest.mark.parametrize("conda", [True, False])
def test_torch_older_than_stable_abi_minimum(conda):
    findings = D.diagnose(facts(torch_version="2.9.1", in_conda_env=conda))
    f = only(findings, "torch-too-old")
    assert f.severity == D.ERROR and "2.9.1" in f.message and "2.10" in f.message
    assert f.fix.startswith('mamba install "pytorch>=2.10"' if conda else "pip install --upgrade 'torch>=2.10'")
    # the binary's own stable-ABI target is also reported against the same torch
    assert "torch-below-binary-target" in codes(findings, D.ERROR)


def test_torch_missing_is_reported_once():
    findings = D.diagnose(facts(torch_version=None, torch_error="ModuleNotFoundError: No module named 'torch'", library_error="not loaded: torch cannot be imported"))
    assert codes(findings, D.ERROR) == ["torch-missing"]
    assert "No module named 'torch'" in only(findings, "torch-missing").message


def test_torch_below_the_binarys_target():
    f = only(D.diagnose(facts(torch_version="2.10.1", build_info={**CPU_BUILD, "torch_target": "2.11"})), "torch-below-binary-target")
    assert f.severity == D.ERROR and "2.11" in f.message and "2.11" in f.fix


@pytest.mark.parametrize("conda, fix", [(True, 'mamba install "pytorch >=2.10 cuda129_*" "cuda-version 12.9.*"'), (False, "--index-url https://download.pytorch.org/whl/cu129")])
def test_cpu_torch_on_gpu_machine(conda, fix):
    findings = D.diagnose(facts(gpus=[h100()], driver_version="580.65.06", driver_cuda_version="13.0", in_conda_env=conda))
    f = only(findings, "cpu-torch-on-gpu-machine")
    assert f.severity == D.ERROR and "H100" in f.message and fix in f.fix
    if not conda:
        assert 'mamba install "pytorch=*=cuda*"' in f.fix


@pytest.mark.parametrize(
    "driver, torch_cuda, ok",
    [("575.57.08", "13.0", False), ("580.65.06", "13.0", True), ("520.61.05", "12.9", False), ("525.60.13", "12.9", True), ("590.10", "12.9", True)],
)
def test_driver_minimum_per_cuda_major(driver, torch_cuda, ok):
    findings = D.diagnose(facts(torch_cuda_version=torch_cuda, torch_cuda_available=ok, gpus=[h100()], driver_version=driver, build_info=cuda_build(torch_cuda)))
    if ok:
        assert "driver" in codes(findings, D.OK) and "driver-too-old" not in codes(findings)
    else:
        f = only(findings, "driver-too-old")
        need = "580" if torch_cuda.startswith("13") else "525.60.13"
        assert f.severity == D.ERROR and driver in f.message and f">= {need}" in f.fix
        if torch_cuda.startswith("13"):
            assert "cuda129" in f.fix  # the alternative: stay on the driver with CUDA 12 builds


def test_driver_checked_from_cuda_api_version_when_no_driver_string():
    findings = D.diagnose(facts(torch_cuda_version="13.0", torch_cuda_available=False, gpus=[h100()], driver_version=None, driver_cuda_version="12.4", build_info=cuda_build("13.0")))
    assert "driver-too-old" in codes(findings, D.ERROR)
    assert "torch-cuda-unavailable" in codes(findings, D.WARNING)


def test_driver_unknown_is_a_warning_not_an_error():
    findings = D.diagnose(facts(torch_cuda_version="12.9", torch_cuda_available=True, gpus=[h100()], build_info=cuda_build("12.9")))
    assert "driver-unknown" in codes(findings, D.WARNING) and not D.has_errors(findings)


def test_cpu_segops_with_gpu_and_cuda_torch():
    findings = D.diagnose(facts(torch_cuda_version="12.9", torch_cuda_available=True, gpus=[h100()], driver_version="575.57.08"))
    f = only(findings, "cpu-segops-with-cuda-torch")
    assert f.severity == D.ERROR
    assert f'mamba install -c {LOCAL} "torch-segops * cuda129_*"' in f.fix and "TORCH_SEGOPS_WITH_CUDA=1 pip install --no-build-isolation -e ." in f.fix


def test_cpu_segops_with_cuda_torch_but_no_gpu_is_fine():
    findings = D.diagnose(facts(torch_cuda_version="12.9", torch_cuda_available=False))
    assert not D.has_errors(findings) and "cpu-segops-no-gpu" in codes(findings, D.INFO)


def test_cuda_segops_with_cpu_torch():
    f = only(D.diagnose(facts(build_info=cuda_build("13.0"))), "cuda-segops-with-cpu-torch")
    assert f.severity == D.ERROR and "13.0" in f.message and "cuda130_*" in f.fix


def test_cuda_major_mismatch():
    findings = D.diagnose(facts(torch_cuda_version="12.9", torch_cuda_available=True, gpus=[h100()], driver_version="580.65.06", build_info=cuda_build("13.0")))
    f = only(findings, "cuda-major-mismatch")
    assert f.severity == D.ERROR and "13.0" in f.message and "12.9" in f.message and "cuda129" in f.fix


def test_arch_missing_from_binary():
    gpu = D.GPU(0, "NVIDIA GeForce RTX 5090", (12, 0))
    findings = D.diagnose(facts(torch_cuda_version="12.9", torch_cuda_available=True, gpus=[gpu], driver_version="575.57.08", build_info=cuda_build("12.9", ["75-real", "90-real"])))
    f = only(findings, "arch-missing")
    assert f.severity == D.ERROR and "12.0" in f.message and "CMAKE_CUDA_ARCHITECTURES=120" in f.fix


def test_arch_served_by_ptx_jit_is_a_warning():
    gpu = D.GPU(0, "NVIDIA GeForce RTX 5090", (12, 0))
    f = facts(torch_cuda_version="12.9", torch_cuda_available=True, gpus=[gpu], driver_version="575.57.08", driver_cuda_version="12.9", build_info=cuda_build("12.9", ["75-real", "90"]))
    findings = D.diagnose(f)
    assert only(findings, "arch-ptx-jit").severity == D.WARNING and not D.has_errors(findings)


def test_ptx_from_newer_toolkit_than_driver_cannot_jit():
    gpu = D.GPU(0, "NVIDIA GeForce RTX 5090", (12, 0))
    f = facts(torch_cuda_version="12.9", torch_cuda_available=True, gpus=[gpu], driver_version="570.86.10", driver_cuda_version="12.8", build_info=cuda_build("12.9", ["75-real", "90"]))
    findings = D.diagnose(f)
    assert only(findings, "ptx-needs-newer-driver").severity == D.ERROR
    assert "driver-too-old" not in codes(findings)  # 570 is fine for 12.x SASS under minor-version compatibility


def test_every_gpu_is_checked():
    gpus = [h100(0), D.GPU(1, "Tesla V100", (7, 0))]
    findings = D.diagnose(facts(torch_cuda_version="13.0", torch_cuda_available=True, gpus=gpus, driver_version="580.65.06", build_info=cuda_build("13.0")))
    assert codes(findings, D.OK).count("arch") == 1
    assert "Tesla V100" in only(findings, "arch-missing").message


def test_cuda_13_on_a_volta_gpu():
    v100 = D.GPU(0, "Tesla V100-SXM2-32GB", (7, 0))
    findings = D.diagnose(facts(torch_cuda_version="13.0", torch_cuda_available=True, gpus=[v100], driver_version="580.65.06", build_info=cuda_build("13.0")))
    hits = [x for x in findings if x.code == "cuda-drops-gpu"]
    assert sorted(x.message.split("used by ")[1].split(":")[0] for x in hits) == ["torch", "torch_segops"]
    assert all(x.severity == D.ERROR and "sm_75" in x.message and "cuda129_*" in x.fix for x in hits)
    # the same GPU under CUDA 12.9 is fine as far as the toolkit goes
    ok = D.diagnose(facts(torch_cuda_version="12.9", torch_cuda_available=True, gpus=[v100], driver_version="580.65.06", build_info=cuda_build("12.9", ["70-real", "80-real"])))
    assert "cuda-drops-gpu" not in codes(ok) and not D.has_errors(ok)


def test_library_missing():
    findings = D.diagnose(facts(library_exists=False, build_info=None, build_info_source=None))
    f = only(findings, "library-missing")
    assert f.severity == D.ERROR and f.fix


def test_library_load_failure_explained_by_build_facts():
    # the binary could not be loaded, its build info was read from the file: CUDA build on a cpu torch
    findings = D.diagnose(facts(library_error="LibraryLoadError: libcudart.so.13: cannot open shared object file", build_info=cuda_build("13.0"), build_info_source="file"))
    assert only(findings, "library-load").severity == D.ERROR
    assert "cuda-segops-with-cpu-torch" in codes(findings, D.ERROR)
    assert "library" not in codes(findings, D.OK)


def test_render_lists_every_finding_with_its_fix():
    f = facts(gpus=[h100()], driver_version="580.65.06", driver_cuda_version="13.0")
    findings = D.diagnose(f)
    text = D.render(f, findings)
    for x in findings:
        assert x.message in text
        if x.fix:
            assert x.fix in text
    assert "H100" in text and "580.65.06" in text and "error(s)" in text


# ---------------------------------------------------------------------------------------------
# the real doctor, as a user runs it
# ---------------------------------------------------------------------------------------------
def run_doctor(*args, env_extra=None, prepend_path=(), tmp_path):
    env = dict(os.environ)
    env.update(env_extra or {})
    paths = [str(p) for p in prepend_path]
    if importlib.util.find_spec("torch_segops") is None:  # not installed: run the checkout's package
        paths.append(str(ROOT / "src"))
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "torch_segops.doctor", *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)


def test_real_doctor_on_this_machine(tmp_path):
    torch = pytest.importorskip("torch")
    r = run_doctor("--json", tmp_path=tmp_path)
    assert "Traceback" not in r.stderr, r.stderr
    out = json.loads(r.stdout)
    f = out["facts"]
    if not f["library_exists"]:
        pytest.skip(f"torch_segops is not built here ({f['library_path']}): pip install --no-build-isolation -e .")
    assert f["torch_version"] == torch.__version__ and f["torch_cuda_version"] == torch.version.cuda
    assert r.returncode == (1 if any(x["severity"] == "error" for x in out["findings"]) else 0)
    assert f["build_info_source"] == "loaded", f["library_error"]
    if torch.version.cuda is None and not f["gpus"]:
        # this machine: cpu torch, no GPU -> a cpu build is right and nothing is wrong
        assert f["build_info"]["variant"] == "cpu"
        assert r.returncode == 0 and out["ok"], out["findings"]
    text = run_doctor(tmp_path=tmp_path)
    assert text.returncode == r.returncode and "torch-segops doctor" in text.stdout and torch.__version__ in text.stdout


def test_real_doctor_reports_a_missing_library(tmp_path):
    pytest.importorskip("torch")
    r = run_doctor("--json", env_extra={"TORCH_SEGOPS_LIBRARY": str(tmp_path / "nowhere" / "_C.so")}, tmp_path=tmp_path)
    assert "Traceback" not in r.stderr, r.stderr
    out = json.loads(r.stdout)
    assert r.returncode == 1 and not out["ok"]
    assert "library-missing" in [x["code"] for x in out["findings"] if x["severity"] == "error"]


def test_real_doctor_survives_an_unloadable_library(tmp_path):
    torch = pytest.importorskip("torch")
    fake = tmp_path / "_C.so"  # not a shared object, but it carries a CUDA 13.0 build info string
    fake.write_bytes(
        b"\x7fELF\x02\x01\x01\x00broken"
        b'{"version": "0.1.0", "variant": "cuda", "cuda_version": "13.0", "cuda_archs": "75-real;90-real;120", '
        b'"torch_target": "2.10", "torch_headers": "2.13.0", "cxx_compiler": "14.3.0"}\x00'
    )
    r = run_doctor("--json", env_extra={"TORCH_SEGOPS_LIBRARY": str(fake)}, tmp_path=tmp_path)
    assert "Traceback" not in r.stderr, r.stderr
    out = json.loads(r.stdout)
    f = out["facts"]
    assert r.returncode == 1
    assert f["library_error"] and f["build_info_source"] == "file" and f["build_info"]["cuda_version"] == "13.0"
    errors = [x["code"] for x in out["findings"] if x["severity"] == "error"]
    assert "library-damaged" in errors  # its ELF headers are garbage: found before the loader sees it
    if torch.version.cuda is None:
        assert "cuda-segops-with-cpu-torch" in errors
    text = run_doctor(env_extra={"TORCH_SEGOPS_LIBRARY": str(fake)}, tmp_path=tmp_path)
    assert text.returncode == 1 and "fix:" in text.stdout and "Traceback" not in text.stderr


def test_conda_fixes_are_valid_matchspecs():
    rattler = pytest.importorskip("rattler", reason="py-rattler is needed to parse conda MatchSpecs (pip install py-rattler)")
    import re

    cases = [
        facts(torch_version="2.9.1"),
        facts(gpus=[h100()], driver_version="580.65.06"),
        facts(torch_cuda_version="13.0", torch_cuda_available=False, gpus=[h100()], driver_version="575.57.08", build_info=cuda_build("13.0")),
        facts(torch_cuda_version="12.9", torch_cuda_available=True, gpus=[h100()], driver_version="575.57.08"),
        facts(build_info=cuda_build("13.0")),
        facts(torch_version="2.10.1", build_info={**CPU_BUILD, "torch_target": "2.11"}),
    ]
    seen = 0
    for f in cases:
        for x in D.diagnose(f):
            for cmd in re.findall(r"mamba install ([^;]*?)(?:   |$)", x.fix or ""):
                for spec in re.findall(r'"([^"]+)"', cmd):
                    rattler.MatchSpec(spec)
                    seen += 1
    assert seen >= 6


def _doctor_with_a_torch_that_raises(tmp_path, statement: str):
    """The doctor (--json) run with tmp_path/shadow/torch, whose import runs this raise statement, ahead on
    the path."""
    fake = tmp_path / "shadow" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(statement + "\n")
    return run_doctor("--json", prepend_path=[tmp_path / "shadow"], tmp_path=tmp_path)


def test_real_doctor_reports_a_broken_torch(tmp_path):
    r = _doctor_with_a_torch_that_raises(tmp_path, 'raise ImportError("simulated broken torch install")')
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert r.returncode == 1 and "simulated broken torch install" in out["facts"]["torch_error"]
    assert [x["code"] for x in out["findings"] if x["severity"] == "error"][:1] == ["torch-missing"]


# ---------------------------------------------------------------------------------------------
# cudatoolkit (the pre-CUDA-12 conda package) in the active conda environment
# ---------------------------------------------------------------------------------------------
def conda_env_with(tmp_path, records: dict[str, dict]):
    meta = tmp_path / "conda-meta"
    meta.mkdir()
    for fname, rec in records.items():
        (meta / fname).write_text(json.dumps(rec))
    return tmp_path


def test_find_cudatoolkit_reads_the_conda_meta_record(tmp_path):
    env = conda_env_with(tmp_path, {
        "cudatoolkit-dev-11.7.0-h1de0b5d_6.json": {"name": "cudatoolkit-dev", "version": "11.7.0"},
        "cudatoolkit-11.8.0-h4ba93d1_13.json": {"name": "cudatoolkit", "version": "11.8.0"},
        "pytorch-2.13.0-cpu_generic_py312_h0_0.json": {"name": "pytorch", "version": "2.13.0"},
    })
    assert D.install.find_cudatoolkit(str(env)) == "11.8.0"


@pytest.mark.parametrize("records", [
    {},
    {"cudatoolkit-dev-11.7.0-h1de0b5d_6.json": {"name": "cudatoolkit-dev", "version": "11.7.0"}},
    {"cudatoolkit-11.8.0-h0_0.json": "not a record"},
])
def test_find_cudatoolkit_ignores_other_records(tmp_path, records):
    env = conda_env_with(tmp_path, records)
    assert D.install.find_cudatoolkit(str(env)) is None


def test_find_cudatoolkit_without_an_environment(tmp_path):
    assert D.install.find_cudatoolkit(None) is None
    assert D.install.find_cudatoolkit(str(tmp_path / "missing")) is None


def test_cudatoolkit_is_named_with_the_fix():
    found = [x for x in D.diagnose(facts(conda_prefix="/opt/envs/old", cudatoolkit="11.8.0")) if x.code == "cudatoolkit"]
    assert len(found) == 1 and found[0].severity == D.WARNING
    assert "cudatoolkit 11.8.0" in found[0].message and "/opt/envs/old" in found[0].message
    assert "cuda-version" in found[0].message
    assert "conda remove -p /opt/envs/old cudatoolkit" in found[0].fix and "cuda-version=" in found[0].fix
    assert not [x for x in D.diagnose(facts()) if x.code == "cudatoolkit"]


def test_gather_facts_finds_cudatoolkit_in_conda_prefix(tmp_path, monkeypatch):
    env = conda_env_with(tmp_path, {"cudatoolkit-11.3.1-h2bc3f7f_2.json": {"name": "cudatoolkit", "version": "11.3.1"}})
    monkeypatch.setenv("CONDA_PREFIX", str(env))
    f = D.gather_facts()
    assert (f.conda_prefix, f.cudatoolkit) == (str(env), "11.3.1")
    assert any(x.code == "cudatoolkit" for x in D.diagnose(f))


# ---------------------------------------------------------------------------------------------
# hostile files and a torch that exits (issue #25)
# ---------------------------------------------------------------------------------------------
def a_shared_object() -> Path:
    import _ctypes  # an extension module of this Python: a small, complete ELF shared object

    return Path(_ctypes.__file__)


def installed_library() -> Path:
    spec = importlib.util.find_spec("torch_segops._C")
    if spec is None or not spec.origin or not os.path.exists(spec.origin):
        pytest.skip("torch_segops is not built here: pip install --no-build-isolation .")
    return Path(spec.origin)


@contextlib.contextmanager
def no_hang(seconds=30):
    """Fail instead of waiting forever (opening a FIFO to read waits for a writer)."""
    def hung(*_):
        raise TimeoutError(f"still blocked after {seconds} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def memory_capped(headroom_gb=2):
    """Cap this process's address space (and its children's, which inherit it) a little above its size:
    a regression that reads /dev/zero to the end then fails with MemoryError instead of filling the
    machine's memory. The soft limit goes back afterwards."""
    import re
    import resource

    vm = int(re.search(r"VmSize:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) * 1024
    old = resource.getrlimit(resource.RLIMIT_AS)
    cap = vm + int(headroom_gb * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (min(cap, old[1]) if old[1] != resource.RLIM_INFINITY else cap, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


def test_elf_problem_finds_a_truncated_shared_object(tmp_path):
    good = a_shared_object().read_bytes()
    assert L.elf_problem(str(a_shared_object())) is None
    for keep in (20, 63, 4096, len(good) // 2, len(good) - 1):
        cut = tmp_path / f"cut{keep}.so"
        cut.write_bytes(good[:keep])
        problem = L.elf_problem(str(cut))
        assert problem and "truncated" in problem and str(cut) in problem, (keep, problem)


def test_elf_problem_names_files_that_are_not_shared_objects(tmp_path):
    text = tmp_path / "_C.so"
    text.write_text('{"version": "0.1.0"}')
    os.mkfifo(tmp_path / "fifo")
    cases = {str(text): "not a shared object", "/dev/zero": "character device", str(tmp_path): "directory",
             str(tmp_path / "fifo"): "FIFO"}
    with no_hang(), memory_capped():
        for path, kind in cases.items():
            assert kind in (L.elf_problem(path) or ""), path


def test_a_damaged_library_is_reported_with_the_reinstall_command():
    for conda in (True, False):
        findings = D.diagnose(facts(in_conda_env=conda, library_error="LibraryLoadError: ... truncated ...",
                                    library_file_problem="/x/_C.so is truncated: it has 4096 bytes, but ..."))
        f = only(findings, "library-damaged")
        assert f.severity == D.ERROR and "truncated" in f.message and "--force-reinstall" in f.fix
        assert "library-load" not in codes(findings)


def test_real_doctor_and_import_report_a_truncated_library(tmp_path):
    """A truncated _C.so (an interrupted copy) killed the doctor and `import torch_segops` with SIGBUS."""
    pytest.importorskip("torch")
    cut = tmp_path / "_C.so"
    cut.write_bytes(installed_library().read_bytes()[:4096])
    env = {"TORCH_SEGOPS_LIBRARY": str(cut)}
    r = run_doctor("--json", env_extra=env, tmp_path=tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr, (r.returncode, r.stderr[-2000:])
    out = json.loads(r.stdout)
    damaged = only([D.Finding(**x) for x in out["findings"]], "library-damaged")
    assert "truncated" in damaged.message and damaged.fix
    text = run_doctor(env_extra=env, tmp_path=tmp_path)
    assert text.returncode == 1 and "truncated" in text.stdout and "fix:" in text.stdout
    imp = subprocess.run([sys.executable, "-c", "import torch_segops"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, **env}, cwd=tmp_path)
    assert imp.returncode == 1, (imp.returncode, imp.stderr[-2000:])  # not -7 (SIGBUS)
    assert "LibraryLoadError" in imp.stderr and "truncated" in imp.stderr and "torch_segops.doctor" in imp.stderr


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "json_with_int_archs"])
def test_real_doctor_survives_hostile_library_files(tmp_path, kind):
    pytest.importorskip("torch")
    path = tmp_path / "_C.so"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        path = Path("/dev/zero")
    else:
        path.write_text('{"version": "0.1.0", "variant": "cuda", "cuda_version": 12.9, "cuda_archs": 7}')
    with memory_capped():
        r = run_doctor("--json", env_extra={"TORCH_SEGOPS_LIBRARY": str(path)}, tmp_path=tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr, (r.returncode, r.stderr[-2000:])
    out = json.loads(r.stdout)
    assert "library-damaged" in [x["code"] for x in out["findings"] if x["severity"] == "error"]


def test_read_build_info_treats_values_that_are_not_strings_as_unknown(tmp_path):
    p = tmp_path / "_C.so"
    p.write_text('{"version": "0.1.0", "variant": "cuda", "cuda_version": 12.9, "cuda_archs": 7, "torch_target": [2]}')
    info = D.probes.read_build_info_from_file(str(p))
    assert info["variant"] == "cuda" and info["cuda_version"] is None and info["cuda_archs"] is None
    assert info["torch_target"] is None
    D.render(facts(build_info=info, build_info_source="file", gpus=[h100()]), D.diagnose(facts(build_info=info, gpus=[h100()])))
    p.write_text('{"version": "0.1.0", "cuda_archs": ["75-real", "90"]}')
    assert D.probes.read_build_info_from_file(str(p))["cuda_archs"] == ["75-real", "90"]
    with no_hang(), memory_capped():
        assert D.probes.read_build_info_from_file("/dev/zero") is None


@pytest.mark.parametrize("offset", [0, (1 << 20) - 7, (1 << 20) - 40, 3 << 20])
def test_build_info_is_found_across_read_chunks(tmp_path, offset):
    """The library is read in 1 MiB chunks (a CUDA build's is hundreds of MB): the string may straddle one."""
    blob = b'{"version": "0.1.0", "variant": "cpu", "cuda_archs": ""}'
    p = tmp_path / "_C.so"
    p.write_bytes(b"\x7fELF" + b"x" * offset + blob + b"\x00tail}" + b"y" * 100)
    assert D.probes.read_build_info_from_file(str(p)) == {"version": "0.1.0", "variant": "cpu", "cuda_archs": [],
                                                   "cuda_version": None}
    assert D.install.find_in_file(str(p), b'{"version": "', b"}") == blob


def test_find_cudatoolkit_skips_records_that_are_not_regular_files(tmp_path):
    """A conda-meta record that is /dev/zero gave a MemoryError, a FIFO hung."""
    env = conda_env_with(tmp_path, {"cudatoolkit-11.8.0-h4ba93d1_13.json": {"name": "cudatoolkit", "version": "11.8.0"}})
    os.symlink("/dev/zero", env / "conda-meta" / "cudatoolkit-11.7.0-h0_0.json")
    os.mkfifo(env / "conda-meta" / "cudatoolkit-11.6.0-h0_0.json")
    with no_hang(), memory_capped():
        assert D.install.find_cudatoolkit(str(env)) == "11.8.0"


def test_parse_nvidia_smi_counts_only_gpu_lines():
    out = ("WARNING: infoROM is corrupted at gpu 0000:3B:00.0, a, b, c\n"
           "0, NVIDIA H100 80GB HBM3, 9.0, 580.65.06\n"
           "a, b, c, d\n"
           "1, , 9.0, 580.65.06\n"
           "2, Some GPU, garbage, 580.65.06\n"
           "3, Some GPU, 8.6, not a driver\n"
           "4, NVIDIA A100-SXM4-80GB, [N/A], [N/A]\n")
    gpus, driver = D.probes.parse_nvidia_smi(out)
    assert gpus == [D.GPU(0, "NVIDIA H100 80GB HBM3", (9, 0)), D.GPU(4, "NVIDIA A100-SXM4-80GB", None)]
    assert driver == "580.65.06"


def test_real_doctor_and_import_report_a_torch_that_exits(tmp_path):
    """`import torch` raising SystemExit: the doctor printed only the exit message ("broken torch")."""
    r = _doctor_with_a_torch_that_raises(tmp_path, 'raise SystemExit("broken torch")')
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert "SystemExit('broken torch')" in out["facts"]["torch_error"]
    missing = only([D.Finding(**x) for x in out["findings"]], "torch-missing")
    assert "SystemExit" in missing.message and "--force-reinstall" in missing.fix
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "shadow"), os.environ.get("PYTHONPATH", "")]))
    imp = subprocess.run([sys.executable, "-c", "import torch_segops"], capture_output=True, text=True, timeout=300,
                         env=env, cwd=tmp_path)
    assert imp.returncode == 1 and "ImportError" in imp.stderr, imp.stderr[-2000:]
    assert L.describe_torch_import_error(SystemExit("broken torch")) in imp.stderr
    assert "torch_segops.doctor" in imp.stderr


# ---------------------------------------------------------------------------------------------
# a library changed after its install, a library that kills its loader, a stub torch (issue #36 item 7);
# each corrupts a copy of the library, never the installed one
# ---------------------------------------------------------------------------------------------
def elf_sections(data: bytes) -> dict[str, tuple[int, int]]:
    """name -> (file offset, size) of the sections of an ELF64 little-endian file."""
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = heads[shstrndx][4]
    return {data[names + h[0] : data.index(b"\0", names + h[0])].decode(): (h[4], h[5]) for h in heads}


def damaged_copy(path: Path, how: str) -> bytes:
    """The installed library's bytes with one section zeroed (".text", ...) or 1 MiB of random bytes in the middle."""
    data = bytearray(installed_library().read_bytes())
    if data[:6] != b"\x7fELF\x02\x01":
        pytest.skip("the library is not an ELF64 little-endian file")
    if how == "random":
        start = len(data) // 2 - (1 << 19)
        data[start : start + (1 << 20)] = random.Random(0).randbytes(1 << 20)
    else:
        off, size = elf_sections(bytes(data))[how]
        data[off : off + size] = bytes(size)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(data))
    return bytes(data)


def findings_of(r) -> list:
    assert "Traceback" not in r.stderr and r.stdout, (r.returncode, r.stderr[-2000:])
    return [D.Finding(**x) for x in json.loads(r.stdout)["findings"]]


@pytest.mark.parametrize("section", [".dynamic", ".dynsym", ".text"])
def test_real_doctor_survives_a_library_that_kills_its_loader(tmp_path, section):
    """Zeroed sections keep the file's size and ELF headers: loading it killed the doctor (SIGSEGV, no output)."""
    pytest.importorskip("torch")
    lib = tmp_path / "_C.so"
    damaged_copy(lib, section)
    r = run_doctor("--json", env_extra={"TORCH_SEGOPS_LIBRARY": str(lib)}, tmp_path=tmp_path)
    load = only(findings_of(r), "library-load")
    assert r.returncode == 1 and load.severity == D.ERROR
    assert re.search(r"child process died of SIG[A-Z]+ \(signal \d+\) while loading the library", load.message), load.message
    assert "--force-reinstall" in load.fix and "torch-segops" in load.fix
    if section == ".text":  # the text report too, once
        text = run_doctor(env_extra={"TORCH_SEGOPS_LIBRARY": str(lib)}, tmp_path=tmp_path)
        assert text.returncode == 1 and "died of SIG" in text.stdout and "fix:" in text.stdout


def pip_site(tmp_path: Path, recorded: bytes, installed: bytes, source: Path | None = None) -> Path:
    """A site-packages folder whose RECORD lists torch_segops/_C.so with the sha256 of ``recorded`` and which holds
    ``installed`` there; with ``source``, direct_url.json names that folder."""
    lib = tmp_path / "site" / "torch_segops" / "_C.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(installed)
    dist = tmp_path / "site" / "torch_segops-0.1.0.dist-info"
    dist.mkdir()
    digest = base64.urlsafe_b64encode(hashlib.sha256(recorded).digest()).rstrip(b"=").decode()
    (dist / "RECORD").write_text(f"torch_segops/__init__.py,sha256=abc,10\ntorch_segops/_C.so,sha256={digest},{len(recorded)}\n"
                                 "torch_segops-0.1.0.dist-info/RECORD,,\n")
    if source:
        (dist / "direct_url.json").write_text(json.dumps({"url": source.as_uri(), "dir_info": {}}))
    return lib


def test_real_doctor_checks_the_sha256_in_pips_record(tmp_path):
    """1 MiB of random bytes in the middle: "no problems found", and the ops then crashed. Now the sha256 differs from
    RECORD's, and the file is never loaded."""
    pytest.importorskip("torch")
    good = installed_library().read_bytes()
    bad = damaged_copy(tmp_path / "bad.so", "random")
    lib = pip_site(tmp_path, good, bad, source=tmp_path)
    r = run_doctor("--json", env_extra={"TORCH_SEGOPS_LIBRARY": str(lib)}, tmp_path=tmp_path)
    out = json.loads(r.stdout)
    damaged = only(findings_of(r), "library-damaged")
    assert r.returncode == 1 and "sha256" in damaged.message and "RECORD" in damaged.message
    assert damaged.fix == f"pip install --no-build-isolation --force-reinstall --no-deps {tmp_path}"
    assert out["facts"]["build_info_source"] == "file"  # read from the file, not loaded
    assert out["facts"]["library_sha256"] == hashlib.sha256(bad).hexdigest()
    lib.write_bytes(good)  # the file the record describes: verified, loaded, no problem
    r = run_doctor("--json", env_extra={"TORCH_SEGOPS_LIBRARY": str(lib)}, tmp_path=tmp_path)
    found = findings_of(r)
    assert r.returncode == 0 and "sha256 as in" in only(found, "library").message, found


def conda_env(tmp_path: Path, library: bytes, recorded: bytes, channel: str, **entry) -> Path:
    """A conda environment whose conda-meta record of torch-segops lists its library with the sha256 of ``recorded``."""
    rel = "lib/python3.12/site-packages/torch_segops/_C.so"
    lib = tmp_path / "env" / rel
    lib.parent.mkdir(parents=True)
    lib.write_bytes(library)
    (tmp_path / "env" / "conda-meta").mkdir()
    record = {"name": "torch-segops", "version": "0.1.0", "build": "cpu_h1a2b3c4_0", "subdir": "linux-64",
              "channel": f"{channel}/linux-64", "url": f"{channel}/linux-64/torch-segops-0.1.0-cpu_h1a2b3c4_0.conda",
              "files": [rel], "paths_data": {"paths_version": 1, "paths": [
                  {"_path": rel, "path_type": "hardlink", "sha256": hashlib.sha256(recorded).hexdigest(), "size_in_bytes": len(recorded), **entry}]}}
    (tmp_path / "env" / "conda-meta" / "torch-segops-0.1.0-cpu_h1a2b3c4_0.json").write_text(json.dumps(record))
    return lib


def test_real_doctor_checks_the_sha256_in_conda_meta(tmp_path):
    """A conda install: the record in conda-meta/ holds the sha256; the fix installs from the channel it names."""
    pytest.importorskip("torch")
    good = installed_library().read_bytes()
    channel = tmp_path / "channel"
    (channel / "linux-64").mkdir(parents=True)
    (channel / "linux-64" / "torch-segops-0.1.0-cpu_h1a2b3c4_0.conda").write_bytes(b"")
    lib = conda_env(tmp_path, damaged_copy(tmp_path / "bad.so", ".text"), good, channel.as_uri())
    r = run_doctor("--json", env_extra={"TORCH_SEGOPS_LIBRARY": str(lib)}, tmp_path=tmp_path)
    damaged = only(findings_of(r), "library-damaged")
    assert r.returncode == 1 and "sha256" in damaged.message and "conda-meta" in damaged.message
    assert damaged.fix == f'mamba install --force-reinstall -c {channel.as_uri()} "torch-segops * cpu_*"'
    lib.write_bytes(good)
    found = findings_of(run_doctor("--json", env_extra={"TORCH_SEGOPS_LIBRARY": str(lib)}, tmp_path=tmp_path))
    assert "conda-meta" in only(found, "library").message and not D.has_errors(found)


def test_real_doctor_reads_the_record_a_conda_installer_writes(tmp_path):
    """The record py-rattler (mamba 2's installer) writes for a package of this library, installed from a local
    channel: the doctor checks its sha256 and names that channel."""
    rattler = pytest.importorskip("rattler", reason="py-rattler installs the package (pip install py-rattler)")
    pytest.importorskip("torch")
    import asyncio
    import io
    import tarfile

    good, rel = installed_library().read_bytes(), "lib/python3.12/site-packages/torch_segops/_C.so"
    files = {"info/index.json": json.dumps({"name": "torch-segops", "version": "0.1.0", "build": "cpu_h1a2b3c4_0", "build_number": 0,
                                            "subdir": "linux-64", "depends": []}),
             "info/paths.json": json.dumps({"paths_version": 1, "paths": [{"_path": rel, "path_type": "hardlink",
                                            "sha256": hashlib.sha256(good).hexdigest(), "size_in_bytes": len(good)}]}),
             "info/files": rel + "\n", rel: good}
    channel = tmp_path / "channel"
    (channel / "linux-64").mkdir(parents=True)
    with tarfile.open(channel / "linux-64" / "torch-segops-0.1.0-cpu_h1a2b3c4_0.tar.bz2", "w:bz2") as tar:
        for name, data in files.items():
            data = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

    async def install():
        await rattler.index.index_fs(channel, write_shards=False)
        records = await rattler.solve([channel.as_uri()], ["torch-segops"], platforms=[rattler.Subdir("linux-64")])
        await rattler.install(records, tmp_path / "env", cache_dir=tmp_path / "cache", show_progress=False)

    asyncio.run(install())
    lib = tmp_path / "env" / rel
    damaged_copy(lib, "random")
    found = findings_of(run_doctor("--json", env_extra={"TORCH_SEGOPS_LIBRARY": str(lib)}, tmp_path=tmp_path))
    damaged = only(found, "library-damaged")
    assert "sha256" in damaged.message and "torch-segops-0.1.0-cpu_h1a2b3c4_0.json" in damaged.message
    assert damaged.fix == f'mamba install --force-reinstall -c {channel.as_uri()} "torch-segops * cpu_*"'


def test_conda_record_reads_paths_data(tmp_path):
    lib = conda_env(tmp_path, b"rewritten", b"as packaged", "https://example.org/my-channel",
                    sha256_in_prefix=hashlib.sha256(b"rewritten").hexdigest(), prefix_placeholder="/opt/placeholder")
    rec = D.install.conda_record(str(lib))
    assert rec["channel"] == "https://example.org/my-channel" and rec["record"].endswith("torch-segops-0.1.0-cpu_h1a2b3c4_0.json")
    assert rec["sha256"] == hashlib.sha256(b"rewritten").hexdigest()  # the installer rewrote it: sha256_in_prefix
    meta = next((tmp_path / "env" / "conda-meta").glob("*.json"))
    record = json.loads(meta.read_text())
    del record["paths_data"]["paths"][0]["sha256_in_prefix"]
    meta.write_text(json.dumps(record))
    assert D.install.conda_record(str(lib))["sha256"] is None  # rewritten at install, no hash of the result
    del record["paths_data"], record["url"]
    meta.write_text(json.dumps(record))
    assert D.install.conda_record(str(lib)) == {"kind": "conda", "record": str(meta), "sha256": None,
                                                "channel": "https://example.org/my-channel"}  # listed in "files" only
    record["files"] = []
    meta.write_text(json.dumps(record))
    assert D.install.conda_record(str(lib)) is None


def test_pip_record_reads_the_hash_and_the_source(tmp_path):
    lib = pip_site(tmp_path, b"library", b"library", source=tmp_path)
    rec = D.install.pip_record(str(lib))
    assert rec == {"kind": "pip", "record": str(tmp_path / "site" / "torch_segops-0.1.0.dist-info" / "RECORD"),
                   "sha256": hashlib.sha256(b"library").hexdigest(), "source": str(tmp_path), "editable": False}
    assert D.install.pip_record(str(tmp_path / "site" / "torch_segops" / "other.so")) is None


def test_real_doctor_reports_a_stub_torch(tmp_path):
    """A `torch` with only __version__ got "[ok] torch 2.13.0", then "torch cannot be imported" with the fix
    "reinstall torch_segops"."""
    stub = tmp_path / "shadow" / "torch"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text('__version__ = "2.13.0"\n')
    r = run_doctor("--json", prepend_path=[tmp_path / "shadow"], tmp_path=tmp_path)
    found = findings_of(r)
    assert r.returncode == 1 and codes(found, D.ERROR) == ["torch-broken"] and "torch" not in codes(found, D.OK), found
    broken = only(found, "torch-broken")
    assert str(stub) in broken.message and "AttributeError" in broken.message
    assert str(stub) in broken.fix and "--force-reinstall 'torch>=2.10'" in broken.fix
    assert "torch_segops" not in broken.fix and "torch-segops" not in broken.fix


# ---------------------------------------------------------------------------------------------
# fixes name a channel that holds torch-segops (issue #41)
# ---------------------------------------------------------------------------------------------
def segops_fixes(f) -> list[str]:
    """The fixes of the findings that install torch_segops, for facts that call for each of them."""
    cases = [dict(library_exists=False), dict(library_file_problem="... sha256 ..."),
             dict(library_error="OSError: undefined symbol", build_info_source="file"),
             dict(torch_cuda_version="12.9", torch_cuda_available=True, gpus=[h100()], driver_version="575.57.08"),
             dict(torch_cuda_version="12.9", gpus=[h100()], driver_version="580.65.06", build_info=cuda_build("13.0")),
             dict(cudatoolkit="11.8.0", conda_prefix="/opt/envs/x")]
    fixes = [x.fix for kw in cases for x in D.diagnose(dataclasses.replace(f, **kw)) if x.fix and "segops" in x.fix]
    assert len(fixes) == len(cases), fixes
    return fixes


def conda_commands(fix: str) -> list[str]:
    """The conda/mamba commands in a fix that install torch-segops."""
    commands = re.findall(r"(?:mamba|conda) (?:install|create)[^;]*?(?=   |;|$)", fix)
    return [c for c in commands if re.search(r'[ "]torch-segops( |"|$)', c)]


def test_conda_fixes_install_from_the_recorded_channel():
    ch = "https://example.org/my-channel"
    for fix in segops_fixes(facts(install={"kind": "conda", "record": "/env/conda-meta/x.json", "sha256": None, "channel": ch})):
        assert conda_commands(fix) and all(f"-c {ch} " in c for c in conda_commands(fix)), fix
        assert "conda-forge" not in fix and "tools/main.sh" not in fix


def test_conda_fixes_build_the_local_channel_when_it_lacks_the_build():
    for fix in segops_fixes(facts(channel_builds={LOCAL: []})):
        assert conda_commands(fix) and all(f"-c {LOCAL} " in c for c in conda_commands(fix)), fix
        assert re.search(r"bash tools/main.sh --variant (cpu|cuda129|cuda130) ", fix) and "conda-forge" not in fix, fix
    # a recorded file:// channel that is gone is not named; the local one that holds the build is, without building
    gone = "file:///tmp/removed-channel"
    f = facts(install={"kind": "conda", "record": "/x.json", "sha256": None, "channel": gone}, channel_builds={gone: [], LOCAL: ["cpu_h1_0"]})
    fix = only(D.diagnose(dataclasses.replace(f, library_file_problem="...")), "library-damaged").fix
    assert fix == f'mamba install --force-reinstall -c {LOCAL} "torch-segops * cpu_*"'


def test_pip_fixes_build_from_the_source_folder():
    f = facts(in_conda_env=False, install={"kind": "pip", "record": "/site/x/RECORD", "sha256": None, "source": "/src/torch-segops",
                                           "editable": False})
    for fix in segops_fixes(f):
        assert "pip install --no-build-isolation" in fix and "/src/torch-segops" in fix and not conda_commands(fix), fix
    unknown = facts(in_conda_env=False)
    fix = only(D.diagnose(dataclasses.replace(unknown, library_exists=False)), "library-missing").fix
    assert fix == "pip install --no-build-isolation .  (in a torch-segops source checkout)"
    editable = dataclasses.replace(f, install={**f.install, "editable": True}, library_file_problem="...")
    assert only(D.diagnose(editable), "library-damaged").fix == "pip install --no-build-isolation --force-reinstall --no-deps -e /src/torch-segops"


def test_local_channel_is_where_tools_main_builds_it(monkeypatch, tmp_path):
    from tools import conda_tools

    main = (ROOT / "tools" / "main.py").read_text()
    assert 'default=ct.cache_dir() / "output"' in main and 'channel = args.output / "channel"' in main
    for env in ({"TORCH_SEGOPS_CACHE": str(tmp_path / "c")}, {"XDG_CACHE_HOME": str(tmp_path / "x")}, {"HOME": str(tmp_path / "h")}):
        for var in ("TORCH_SEGOPS_CACHE", "XDG_CACHE_HOME"):
            monkeypatch.delenv(var, raising=False)
        for var, value in env.items():
            monkeypatch.setenv(var, value)
        assert D.install.local_channel() == (conda_tools.cache_dir() / "output" / "channel").as_uri()
    (tmp_path / "h" / "ch" / "linux-64").mkdir(parents=True)
    for name in ("torch-segops-0.1.0-cuda129_h1a2_0.conda", "torch-segops-0.1.0-cpu_h3b4_1.tar.bz2", "pytorch-2.13.0-cpu_0.conda"):
        (tmp_path / "h" / "ch" / "linux-64" / name).write_bytes(b"")
    assert D.install.channel_builds((tmp_path / "h" / "ch").as_uri()) == ["cpu_h3b4_1", "cuda129_h1a2_0"]


# ---------------------------------------------------------------------------------------------
# layering (issue #40): the loader does not import the doctor, no private name from a public sibling
# ---------------------------------------------------------------------------------------------
def test_the_doctor_and_the_loader_import_no_private_name_of_a_public_module():
    package = ROOT / "src" / "torch_segops"
    bad = []
    for path in [*sorted((package / "doctor").glob("*.py")), package / "_library.py", package / "__init__.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if path.name == "_library.py" and isinstance(node, ast.ImportFrom) and "doctor" in [a.name for a in node.names]:
                bad.append("_library.py imports the doctor")
            if isinstance(node, ast.ImportFrom) and node.level and node.module:  # `from .. import _libfile`: a module
                public = not node.module.split(".")[-1].startswith("_")
                bad += [f"{path.name}: {a.name} from {node.module}" for a in node.names if public and a.name.startswith("_")]
                if path.name == "_library.py" and "doctor" in node.module:
                    bad.append(f"_library.py imports {node.module}")
    assert not bad, bad


def test_import_torch_segops_does_not_import_the_doctor(tmp_path):
    pytest.importorskip("torch")
    installed_library()
    code = "import sys, torch_segops; print(sorted(m for m in sys.modules if m.startswith('torch_segops.doctor')))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr[-2000:]
