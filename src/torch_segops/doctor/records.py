"""The doctor's records (Facts, GPU, Finding), the compatibility constants (copies of ``data/compat.yaml``;
``tests/packaging/test_environments.py`` checks that they agree), version helpers."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

# Stable-ABI target: the binary loads in every torch >= this (data/compat.yaml: stable_abi.min_torch).
MIN_TORCH = "2.10"
# Minimum Linux driver for a CUDA major under minor-version compatibility (data/compat.yaml: cuda[].min_driver_linux).
MIN_DRIVER_LINUX = {12: "525.60.13", 13: "580"}
# Oldest GPU architecture each CUDA major can build for (data/compat.yaml: cuda[].oldest_arch).
OLDEST_ARCH = {12: 50, 13: 75}
# CUDA toolkit a conda / pip user is pointed at when a CUDA build is needed.
SUGGESTED_CUDA = "12.9"
# The pre-CUDA-12 conda package and its last version (data/compat.yaml: cudatoolkit).
CUDATOOLKIT, CUDATOOLKIT_LAST = "cudatoolkit", "11.8"

ERROR, WARNING, OK, INFO = "error", "warning", "ok", "info"


@dataclass
class GPU:
    index: int
    name: str
    capability: tuple[int, int] | None  # (major, minor), None when unknown


@dataclass
class Facts:
    python: str = ""
    platform: str = ""
    in_conda_env: bool = False
    conda_prefix: str | None = None  # the active conda environment (CONDA_PREFIX)
    cudatoolkit: str | None = None  # version of a `cudatoolkit` record in its conda-meta/, if any
    package_version: str | None = None  # torch-segops distribution metadata
    # the compiled library
    library_path: str | None = None
    library_exists: bool = False
    library_error: str | None = None  # why loading it in the child process failed (an exception, a signal)
    library_file_problem: str | None = None  # why the file must not be loaded (truncated, a FIFO, a sha256 mismatch)
    build_info: dict | None = None  # torch_segops build info (loaded, or read from the file)
    build_info_source: str | None = None  # "loaded" | "file"
    # the install record that lists the library: {"kind": "pip" | "conda", "record": path, "sha256": the recorded
    # hash, "channel": the conda channel, "source": the pip source folder, "editable": bool}
    install: dict | None = None
    library_sha256: str | None = None  # the file's, computed when a record holds one
    local_channel: str | None = None  # the channel tools/main.sh builds (a file:// URL)
    channel_builds: dict = field(default_factory=dict)  # file:// channel -> the torch-segops builds in it
    # torch
    torch_version: str | None = None  # None unless torch imports and works
    torch_path: str | None = None  # the folder `import torch` imported, when it did
    torch_error: str | None = None
    torch_cuda_version: str | None = None  # torch.version.cuda, None for a cpu build
    torch_cuda_available: bool | None = None
    torch_cuda_error: str | None = None
    # GPUs and driver, probed without torch (a cpu torch cannot see them)
    gpus: list[GPU] = field(default_factory=list)
    gpu_source: str | None = None  # "libcuda" | "nvidia-smi" | "torch"
    gpu_probe_error: str | None = None
    driver_version: str | None = None  # e.g. "580.65.06"
    driver_cuda_version: str | None = None  # newest CUDA the driver supports, e.g. "13.0"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Facts":
        d = dict(d)
        gpus = [GPU(g["index"], g["name"], tuple(g["capability"]) if g.get("capability") else None) for g in d.pop("gpus", [])]
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(gpus=gpus, **{k: v for k, v in d.items() if k in known})


@dataclass
class Finding:
    severity: str  # error | warning | ok | info
    code: str  # stable identifier, e.g. "torch-too-old"
    message: str
    fix: str | None = None


def parse_version(v: str | None) -> tuple[int, ...] | None:
    """Leading numeric components: '2.13.0+cpu' -> (2, 13, 0); '580.65.06' -> (580, 65, 6)."""
    if not v:
        return None
    m = re.match(r"\d+(?:\.\d+)*", v.strip())
    return tuple(int(p) for p in m.group(0).split(".")) if m else None


def version_at_least(v: str | None, minimum: str) -> bool | None:
    pv, pm = parse_version(v), parse_version(minimum)
    if pv is None or pm is None:
        return None
    n = max(len(pv), len(pm))
    return pv + (0,) * (n - len(pv)) >= pm + (0,) * (n - len(pm))


def cuda_major(v: str | None) -> int | None:
    p = parse_version(v)
    return p[0] if p else None
