#!/usr/bin/env python3
"""Run the op tests on linux-aarch64 under qemu-user, on an x86-64 Debian machine (not part of CI).

    python tools/aarch64_qemu.py                 # tests/api/test_ops.py, test_autograd.py, test_errors.py
    python tools/aarch64_qemu.py tests/api/test_ops.py -k gather

1. Cross-builds _C.so for aarch64 (optimised, as released) against PyPI's torch==2.10.0 aarch64 wheel
   (tools/torch_wheels.py, as tests/packaging/test_aarch64.py does) and Debian's arm64 Google Highway
   (libhwy-dev, libhwy1: tools/debian_arm64.py), with Debian's g++-aarch64-linux-gnu.
2. An aarch64 Python: Debian's own python3.11 for arm64 (the same Python minor as the cp311 wheels), with
   its library closure (libc6, libstdc++6, ...), downloaded by apt-get with a PRIVATE state folder
   (-o Dir::State/Dir::Cache=... APT::Architecture=arm64: the machine's dpkg and apt configuration are not
   touched, no foreign architecture is added) and unpacked with dpkg-deb -x into
   cache_dir()/aarch64-root (tools/debian_arm64.py). qemu-aarch64 -L <that root> then finds the aarch64
   loader and libraries; the guest's LD_LIBRARY_PATH (qemu -E) is the arm64 libhwy's folder of step 1.
3. torch 2.10.0 (aarch64, +cpu) with --no-deps (pip evaluates torch's x86-only nvidia markers against the
   host otherwise), its pure-Python dependencies, numpy (aarch64 wheel), pytest and hypothesis go into
   <root>/site with `pip install --target --platform manylinux_2_28_aarch64`.
4. pytest runs under qemu-aarch64 with PYTHONPATH=<root>/site:src and TORCH_SEGOPS_LIBRARY=<the aarch64
   _C.so>. test_compile.py is left out: torch.compile's inductor needs a C++ compiler for the target
   inside the emulated system (not installed there).
Needs: apt-get (g++-aarch64-linux-gnu, qemu-user; installed here with apt-get when missing), network.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script (python tools/aarch64_qemu.py): the tools package from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools import debian_arm64  # noqa: E402
from tools import torch_wheels as tw  # noqa: E402
from tools.conda_tools import cache_dir  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEBS = ["python3.11", "libstdc++6", "zlib1g"]
PURE_DEPS = ["filelock", "typing-extensions", "sympy>=1.13.3", "networkx", "jinja2", "fsspec"]
TESTS = ["tests/api/test_ops.py", "tests/api/test_autograd.py", "tests/api/test_errors.py"]


def log(msg: str) -> None:
    print(f"[aarch64-qemu] {msg}", flush=True)


sh = tw.run_checked


def ensure_host_tools() -> None:
    missing = [pkg for exe, pkg in (("aarch64-linux-gnu-g++", "g++-aarch64-linux-gnu"), ("qemu-aarch64", "qemu-user"))
               if shutil.which(exe) is None]
    if missing:
        log(f"installing {' '.join(missing)} with apt-get")
        sh(["apt-get", "update", "-qq"])
        sh(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
           env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def aarch64_root() -> Path:
    """Debian's arm64 python3.11 and its libraries, unpacked (not installed) into the cache, with torch and the
    test requirements in <root>/site."""
    root = cache_dir() / "aarch64-root"
    if (root / "usr" / "bin" / "python3.11").exists() and (root / "site" / "torch").is_dir():
        return root
    root = debian_arm64.unpacked_root("root", DEBS, "usr/bin/python3.11")
    whl = tw.download_torch(tw.OLDEST, "aarch64")
    target = ["--target", root / "site", "--platform", tw.MACHINES["aarch64"], "--python-version", "3.11",
              "--implementation", "cp", "--only-binary=:all:"]
    sh([sys.executable, "-m", "pip", "install", "-q", *target, "--no-deps", whl], env=tw.pip_env())
    sh([sys.executable, "-m", "pip", "install", "-q", *target, "--upgrade", *PURE_DEPS, "pytest", "hypothesis", "numpy"],
       env=tw.pip_env())
    return root


def main(argv=None) -> int:
    tests = (argv if argv is not None else sys.argv[1:]) or TESTS
    t0 = time.time()
    ensure_host_tools()
    lib, _, s = tw.build_library(cache_dir() / "aarch64-build", tw.oldest_torch_dir("aarch64"),
                                 defines=debian_arm64.cross_defines())
    log(f"cross-built {lib} in {s:.0f} s")
    root = aarch64_root()
    env = dict(os.environ, PYTHONPATH=f"{root / 'site'}:{REPO / 'src'}", TORCH_SEGOPS_LIBRARY=str(lib),
               PYTHONNOUSERSITE="1")
    # the guest's loader finds libhwy.so.1 where the library was linked against it (a host path: qemu -L
    # maps a guest path into the root first, then falls back to the same path outside it)
    cmd = ["qemu-aarch64", "-L", root, "-E", f"LD_LIBRARY_PATH={debian_arm64.hwy_lib_dir()}",
           root / "usr" / "bin" / "python3.11", "-m", "pytest", *tests, "-q", "-p", "no:cacheprovider"]
    log("running " + " ".join(map(str, cmd)))
    rc = subprocess.call([str(c) for c in cmd], env=env, cwd=REPO)
    log(f"pytest exit {rc} after {time.time() - t0:.0f} s in all")
    return rc


if __name__ == "__main__":
    sys.exit(main())
