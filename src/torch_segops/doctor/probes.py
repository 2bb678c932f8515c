"""Gathering facts from the real machine: ``gather_facts()`` reads it into a Facts record; each probe
records its own failure, none raises. Nothing here imports torch or ``torch_segops._library`` at
module level: the doctor must run when the compiled library does not load."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys

from .files import find_in_file, library_file_problem, read_regular
from .records import CUDATOOLKIT, GPU, Facts, parse_version

# A conda-meta record lists a package's files: a few MB for the largest packages.
_RECORD_LIMIT = 64 << 20


def find_cudatoolkit(conda_prefix: str | None) -> str | None:
    """The version of the `cudatoolkit` package recorded in conda_prefix/conda-meta, or None."""
    if not conda_prefix:
        return None
    meta = os.path.join(conda_prefix, "conda-meta")
    try:
        names = sorted(os.listdir(meta))
    except OSError:
        return None
    for name in names:
        if not (name.startswith(CUDATOOLKIT + "-") and name.endswith(".json")):
            continue
        try:
            rec = json.loads(read_regular(os.path.join(meta, name), _RECORD_LIMIT))
        except (OSError, ValueError):  # unreadable, not a regular file (a FIFO, /dev/zero), not JSON
            continue
        if isinstance(rec, dict) and rec.get("name") == CUDATOOLKIT:  # not cudatoolkit-dev & co.
            return str(rec.get("version") or "unknown version")
    return None


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".strip()


def describe_torch_import_error(e: BaseException) -> str:
    """What `import torch` raising ``e`` means, in the words both the doctor and ``import torch_segops`` use."""
    if isinstance(e, SystemExit):
        return (f"`import torch` raised SystemExit({e.code!r}): torch's import exits the process instead of raising "
                "an ImportError (a broken torch installation)")
    return _err(e)


def _find_library_path() -> str | None:
    override = os.environ.get("TORCH_SEGOPS_LIBRARY")
    if override:
        return override
    try:
        spec = importlib.util.find_spec("torch_segops._C")
        if spec is not None and spec.origin:
            return spec.origin
    except Exception:
        pass
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_C.so")  # torch_segops/_C.so


def read_build_info_from_file(path: str) -> dict | None:
    """The build-info JSON is one string literal in the binary: read it without loading the library.
    Values that are not strings (a hostile or damaged file) count as unknown (None)."""
    try:
        text = find_in_file(path, b'{"version": "', b"}")
        info = json.loads(text.decode()) if text else None
    except (OSError, ValueError):  # unreadable or not a regular file; not JSON (UnicodeDecodeError is one)
        return None
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
        dev = ctypes.c_int(0)
        if lib.cuDeviceGet(ctypes.byref(dev), i) != 0:
            continue
        name = ctypes.create_string_buffer(256)
        lib.cuDeviceGetName(name, 256, dev)
        ma, mi = ctypes.c_int(-1), ctypes.c_int(-1)
        lib.cuDeviceGetAttribute(ctypes.byref(ma), 75, dev)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        lib.cuDeviceGetAttribute(ctypes.byref(mi), 76, dev)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
        cap = (ma.value, mi.value) if ma.value >= 0 and mi.value >= 0 else None
        f.gpus.append(GPU(i, name.value.decode(errors="replace"), cap))
    f.gpu_source = "libcuda"
    return True


def parse_nvidia_smi(stdout: str) -> tuple[list[GPU], str | None]:
    """Parse `nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv,noheader`."""
    gpus: list[GPU] = []
    driver = None
    for line in stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) > 4:  # a name with a comma in it
            parts = [parts[0], ", ".join(parts[1:-2]), parts[-2], parts[-1]]
        # a GPU line: its index, a name, a compute capability (or N/A) and a driver version (or N/A);
        # anything else (warnings, errors, a wrapper's chatter) is not a GPU
        if len(parts) != 4 or not parts[0].isdigit() or not parts[1]:
            continue
        unknown = ("[N/A]", "N/A", "[Not Supported]")
        if not (re.fullmatch(r"\d+\.\d+", parts[2]) or parts[2] in unknown):
            continue
        if not (re.fullmatch(r"\d+\.\d+(\.\d+)?", parts[3]) or parts[3] in unknown):
            continue
        cap = tuple(int(x) for x in parts[2].split(".")) if parts[2] not in unknown else None
        gpus.append(GPU(int(parts[0]), parts[1], cap))
        driver = driver or (parts[3] if parse_version(parts[3]) else None)
    return gpus, driver


def parse_nvrm_version(text: str) -> str | None:
    """The driver version from /proc/driver/nvidia/version ("NVRM version: ... Kernel Module  580.65.06  ...")."""
    m = re.search(r"NVRM version:.*?\s(\d{3,}\.\d+(?:\.\d+)?)\s", text)
    return m.group(1) if m else None


def _probe_nvidia_smi(f: Facts) -> None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,name,compute_cap,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        )
    except Exception as e:
        f.gpu_probe_error = (f.gpu_probe_error or "") + f"; nvidia-smi failed ({_err(e)})"
        return
    if out.returncode != 0:
        return
    gpus, driver = parse_nvidia_smi(out.stdout)
    f.driver_version = f.driver_version or driver
    if gpus and not f.gpus:
        f.gpus, f.gpu_source = gpus, "nvidia-smi"


def _probe_driver_version(f: Facts) -> None:
    try:
        with open("/proc/driver/nvidia/version") as fh:
            f.driver_version = parse_nvrm_version(fh.read())
    except OSError:
        return


def gather_facts() -> Facts:
    f = Facts(python=sys.version.split()[0], platform=platform.platform())
    f.in_conda_env = os.path.isdir(os.path.join(sys.prefix, "conda-meta"))
    f.conda_prefix = os.environ.get("CONDA_PREFIX") or (sys.prefix if f.in_conda_env else None)
    f.cudatoolkit = find_cudatoolkit(f.conda_prefix)
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            f.package_version = version("torch-segops")
        except PackageNotFoundError:
            f.package_version = None
    except Exception:
        pass

    # torch
    torch = None
    try:
        import torch  # noqa: F811

        f.torch_version = str(torch.__version__)
        f.torch_cuda_version = getattr(torch.version, "cuda", None)
    except BaseException as e:  # a broken torch can raise anything, even SystemExit from a C extension
        if isinstance(e, KeyboardInterrupt):
            raise
        f.torch_error = describe_torch_import_error(e)
        torch = None

    # GPUs and driver, independent of torch
    _probe_driver_version(f)
    try:
        if not _probe_libcuda(f):
            _probe_nvidia_smi(f)
    except Exception as e:
        f.gpu_probe_error = _err(e)
    if torch is not None and f.torch_cuda_version:
        try:
            f.torch_cuda_available = bool(torch.cuda.is_available())
            if f.torch_cuda_available and not f.gpus:
                for i in range(torch.cuda.device_count()):
                    f.gpus.append(GPU(i, torch.cuda.get_device_name(i), tuple(torch.cuda.get_device_capability(i))))
                f.gpu_source = "torch"
        except Exception as e:
            f.torch_cuda_available, f.torch_cuda_error = False, _err(e)

    # the compiled library: load it the way torch_segops does, else read its build info from the file
    f.library_path = _find_library_path()
    if torch is not None:
        try:
            from torch_segops import _library

            f.library_path = _library.library_path()
            f.build_info = dict(_library.build_info())
            f.build_info_source = "loaded"
        except BaseException as e:
            f.library_error = _err(e)
    else:
        f.library_error = "not loaded: torch cannot be imported"
    f.library_exists = bool(f.library_path) and os.path.exists(f.library_path)
    if f.library_exists:
        f.library_file_problem = library_file_problem(f.library_path)
    if f.build_info is None and f.library_exists:
        f.build_info = read_build_info_from_file(f.library_path)
        f.build_info_source = "file" if f.build_info else None
    if not f.library_exists:
        f.library_error = None  # reported as "library-missing"
    return f
