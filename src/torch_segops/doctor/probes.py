"""Gathering facts from the real machine: ``gather_facts()`` reads it into a Facts record; each probe records its
own failure, none raises. This process imports neither torch nor the library: the child process does (child.py),
after the library's file has passed its ELF check and the sha256 its install record holds."""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
from importlib import metadata

from .. import _libfile
from .install import (channel_builds, conda_record, file_sha256, find_cudatoolkit, find_in_file, json_or_none,
                      local_channel, pip_record)
from .records import GPU, Facts, parse_version

CHILD_TIMEOUT = 300  # seconds: importing torch on a busy machine, initialising CUDA


def read_build_info_from_file(path: str) -> dict | None:
    """The build-info JSON is one string literal in the binary: read it without loading the library.
    Values that are not strings (a hostile or damaged file) count as unknown (None)."""
    info = json_or_none(lambda: (find_in_file(path, b'{"version": "', b"}") or b"null").decode())  # UnicodeDecodeError: a ValueError
    if not isinstance(info, dict):
        return None
    archs = info.get("cuda_archs") or ""
    if isinstance(archs, list) and all(isinstance(a, str) for a in archs):
        archs = ";".join(archs)
    info = {k: v if isinstance(v, str) else None for k, v in info.items()}
    info["cuda_archs"] = [a for a in archs.replace(",", ";").split(";") if a] if isinstance(archs, str) else None
    info["cuda_version"] = info.get("cuda_version") or None
    return info


def _probe_libcuda(f: Facts) -> bool:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        f.gpu_probe_error = f"libcuda.so.1 not loadable ({e})"
        return False
    v = ctypes.c_int(0)
    if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value:
        f.driver_cuda_version = f"{v.value // 1000}.{(v.value % 1000) // 10}"
    rc = lib.cuInit(0)
    if rc != 0:
        f.gpu_probe_error = f"cuInit failed with CUresult {rc}" + (" (no CUDA device)" if rc == 100 else " (stub libcuda, no driver)" if rc == 34 else "")
        return rc == 100  # a working driver that sees no device is an answer
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return False
    for i in range(count.value):
        dev, name, ma, mi = ctypes.c_int(0), ctypes.create_string_buffer(256), ctypes.c_int(-1), ctypes.c_int(-1)
        if lib.cuDeviceGet(ctypes.byref(dev), i) != 0:
            continue
        lib.cuDeviceGetName(name, 256, dev)
        lib.cuDeviceGetAttribute(ctypes.byref(ma), 75, dev)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        lib.cuDeviceGetAttribute(ctypes.byref(mi), 76, dev)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
        f.gpus.append(GPU(i, name.value.decode(errors="replace"), (ma.value, mi.value) if ma.value >= 0 and mi.value >= 0 else None))
    f.gpu_source = "libcuda"
    return True


def parse_nvidia_smi(stdout: str) -> tuple[list[GPU], str | None]:
    """Parse `nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv,noheader`: the GPU lines (an
    index, a name, a compute capability and a driver version, each possibly N/A), not warnings or a wrapper's chatter."""
    gpus, driver, unknown = [], None, ("[N/A]", "N/A", "[Not Supported]")
    for line in stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) > 4:  # a name with a comma in it
            parts = [parts[0], ", ".join(parts[1:-2]), parts[-2], parts[-1]]
        if (len(parts) != 4 or not parts[0].isdigit() or not parts[1] or not (re.fullmatch(r"\d+\.\d+", parts[2]) or parts[2] in unknown)
                or not (re.fullmatch(r"\d+\.\d+(\.\d+)?", parts[3]) or parts[3] in unknown)):
            continue
        gpus.append(GPU(int(parts[0]), parts[1], tuple(int(x) for x in parts[2].split(".")) if parts[2] not in unknown else None))
        driver = driver or (parts[3] if parse_version(parts[3]) else None)
    return gpus, driver


def parse_nvrm_version(text: str) -> str | None:
    """The driver version from /proc/driver/nvidia/version ("NVRM version: ... Kernel Module  580.65.06  ...")."""
    m = re.search(r"NVRM version:.*?\s(\d{3,}\.\d+(?:\.\d+)?)\s", text)
    return m.group(1) if m else None


def _probe_gpus(f: Facts) -> None:
    """GPUs and driver without torch (a cpu torch cannot see them): the driver API, else nvidia-smi."""
    with contextlib.suppress(OSError), open("/proc/driver/nvidia/version") as fh:
        f.driver_version = parse_nvrm_version(fh.read())
    try:
        exe = None if _probe_libcuda(f) else shutil.which("nvidia-smi")
        out = exe and subprocess.run([exe, "--query-gpu=index,name,compute_cap,driver_version", "--format=csv,noheader"],
                                     capture_output=True, text=True, timeout=20)
        if out and out.returncode == 0:
            gpus, driver = parse_nvidia_smi(out.stdout)
            f.driver_version = f.driver_version or driver
            if gpus and not f.gpus:
                f.gpus, f.gpu_source = gpus, "nvidia-smi"
    except Exception as e:
        f.gpu_probe_error = "; ".join(filter(None, (f.gpu_probe_error, f"{type(e).__name__}: {e}")))


def _died(rc: int | None, stage: str, stderr: str) -> str:
    what = {"torch": "importing torch", "library": "loading the library", "op": "running segment_csr on the CPU"}[stage]
    if rc is None:
        return f"the doctor's child process was still {what} after {CHILD_TIMEOUT} s"
    try:
        how = f"{signal.Signals(-rc).name} (signal {-rc})" if rc < 0 else f"exit status {rc}"
    except ValueError:
        how = f"signal {-rc}"
    tail = (stderr.strip().splitlines() or [""])[-1][-300:]
    return f"the doctor's child process died of {how} while {what}" + (f": {tail}" if tail else "")


def probe_in_child(f: Facts, load: bool) -> None:
    """torch's facts and, with ``load``, the library loaded and one op run, all in a child process (child.py)."""
    env = {**os.environ, _libfile.LIBRARY_ENV: f.library_path} if load else None
    with open(os.path.join(os.path.dirname(__file__), "child.py")) as fh:
        cmd = [sys.executable, "-c", fh.read(), "load" if load else "", os.path.dirname(os.path.dirname(os.path.dirname(__file__)))]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env, timeout=CHILD_TIMEOUT)
        out, err, rc = r.stdout, r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:  # its output may come as bytes
        out, err = (x.decode(errors="replace") if isinstance(x, bytes) else x or "" for x in (e.stdout, e.stderr))
        rc = None
    except OSError as e:
        out, err, rc = "", str(e), 1
    lines = [d for d in (json_or_none(lambda: line) for line in out.splitlines()) if isinstance(d, dict)]
    done, got = [d.pop("stage", None) for d in lines], {k: v for d in lines for k, v in d.items()}
    for stage in ("torch", "library", "op")[: 3 if load else 1]:
        if stage not in done and not (got.get("torch_error") or got.get("library_error")):  # it died, not stopped
            got["torch_error" if stage == "torch" else "library_error"] = _died(rc, stage, err)
            break
    if "torch_exit" in got:
        got["torch_error"] = _libfile.describe_torch_import_error(SystemExit(got["torch_exit"]))
    if got.get("torch_gpus") and not f.gpus:
        f.gpus, f.gpu_source = [GPU(i, name, tuple(cc)) for i, name, cc in got["torch_gpus"]], "torch"
    for k, v in got.items():
        if k in Facts.__dataclass_fields__ and k != "gpus":
            setattr(f, k, v)
    if load and f.torch_version is None:
        f.library_error = "not loaded: torch is not usable"


def gather_facts() -> Facts:
    f = Facts(python=sys.version.split()[0], platform=platform.platform())
    f.in_conda_env = os.path.isdir(os.path.join(sys.prefix, "conda-meta"))
    f.conda_prefix = os.environ.get("CONDA_PREFIX") or (sys.prefix if f.in_conda_env else None)
    f.cudatoolkit = find_cudatoolkit(f.conda_prefix)
    with contextlib.suppress(Exception):  # PackageNotFoundError, or metadata that cannot be read
        f.package_version = metadata.version("torch-segops")
    _probe_gpus(f)
    try:
        f.library_path = _libfile.library_path()
    except Exception:  # the package itself does not import: where the library would be
        f.library_path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_C.so")
    f.library_exists = os.path.exists(f.library_path)
    if f.library_exists:
        f.library_file_problem = _libfile.library_file_problem(f.library_path)
        f.install = conda_record(f.library_path) or pip_record(f.library_path)
    if f.library_exists and not f.library_file_problem and (f.install or {}).get("sha256"):
        want = f.install["sha256"]
        try:
            f.library_sha256 = file_sha256(f.library_path)
        except OSError as e:
            f.library_file_problem = f"{f.library_path} cannot be read: {e}"
        if f.library_sha256 and f.library_sha256 != want:
            f.library_file_problem = (f"{f.library_path} is not the file that was installed: its sha256 is {f.library_sha256}, "
                                      f"{f.install['record']} records {want} (a damaged disk or copy, or a file replaced or edited)")
    if f.library_file_problem:
        f.library_error = "not loaded: the file failed its check"
    f.local_channel = local_channel()
    f.channel_builds = {c: channel_builds(c) for c in {(f.install or {}).get("channel"), f.local_channel} if c and c.startswith("file:")}
    probe_in_child(f, load=f.library_exists and not f.library_file_problem)
    if f.build_info is None and f.library_exists:
        f.build_info = read_build_info_from_file(f.library_path)
        f.build_info_source = "file" if f.build_info else None
    return f
