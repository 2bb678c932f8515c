"""Debian's arm64 packages, downloaded by apt-get and unpacked (not installed) into the kept cache folder.

apt-get runs with a PRIVATE state folder (-o Dir::State/Dir::Cache=... APT::Architecture=arm64), so the
machine's dpkg and apt configuration are not touched and no foreign architecture is added; the machine's
own sources (its Debian release and mirror) are used. dpkg-deb -x unpacks each .deb into a root folder.

    python tools/debian_arm64.py        # prints the arm64 Highway's CMake folder (for -Dhwy_DIR)

Used by tests/packaging/test_aarch64.py and tools/aarch64_qemu.py: Google Highway for the linux-aarch64 cross
build (libhwy-dev: headers, the arm64 libhwy and its CMake package `hwy`; libhwy1: the library itself), the
version of the machine's own libhwy-dev where it has one (else Debian's current one), and an aarch64 Python with
its libraries for the op tests under qemu-user. cross_defines() are the CMake definitions of that cross build.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the tools package from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.conda_tools import cache_dir, cache_lock  # noqa: E402
from tools.torch_wheels import run_checked  # noqa: E402

HWY_PACKAGES = ("libhwy-dev", "libhwy1")
CROSS_CXX = "aarch64-linux-gnu-g++"  # Debian's g++-aarch64-linux-gnu
MULTIARCH = "usr/lib/aarch64-linux-gnu"


def apt_options(apt: Path, archives: Path) -> list[str]:
    """apt-get/apt-cache options of the private arm64 state in `apt` (package lists shared by every root),
    downloading into `archives`."""
    for d in (apt / "lists" / "partial", apt / "state", archives / "partial"):
        d.mkdir(parents=True, exist_ok=True)
    (apt / "state" / "status").touch()
    opts = []
    for k, v in (("APT::Architecture", "arm64"), ("APT::Architectures::", "arm64"), ("Dir::State", apt / "state"),
                 ("Dir::State::Lists", apt / "lists"), ("Dir::State::Status", apt / "state" / "status"),
                 ("Dir::Cache", apt / "cache"), ("Dir::Cache::Archives", archives), ("Debug::NoLocking", "1")):
        opts += ["-o", f"{k}={v}"]
    return opts


def machine_version(package: str) -> str | None:
    """The version of `package` installed on this machine (its own architecture), or None."""
    if shutil.which("dpkg-query") is None:
        return None
    cp = subprocess.run(["dpkg-query", "-W", "-f", "${Status}\t${Version}", package], capture_output=True, text=True)
    status, _, version = cp.stdout.partition("\t")
    return version if cp.returncode == 0 and status.endswith(" installed") and version else None


def _fetch(name: str, packages: list[str], with_dependencies: bool) -> Path:
    """cache_dir()/aarch64-<name>: the arm64 .debs of `packages` (pkg or pkg=version; with their dependencies
    when asked) downloaded into a folder of their own and unpacked into a fresh root, which is returned."""
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise RuntimeError("apt-get and dpkg-deb are needed to fetch Debian's arm64 packages")
    apt = cache_dir() / "aarch64-apt"
    archives = apt / f"archives-{name}"
    shutil.rmtree(archives, ignore_errors=True)
    opts = apt_options(apt, archives)
    run_checked(["apt-get", *opts, "update", "-qq"])
    if with_dependencies:
        run_checked(["apt-get", *opts, "install", "--download-only", "-y", "-qq", "--no-install-recommends", *packages])
    else:  # `apt-get download` writes into the current folder
        run_checked(["apt-get", *opts, "download", "-qq", *packages], cwd=archives)
    root = cache_dir() / f"aarch64-{name}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    debs = sorted(archives.glob("*.deb"))
    if not debs:
        raise RuntimeError(f"apt-get downloaded no arm64 package of {' '.join(packages)} into {archives}")
    for deb in debs:
        run_checked(["dpkg-deb", "-x", deb, root])
    return root


@cache_lock("aarch64-debs")
def unpacked_root(name: str, packages: list[str], ready: str) -> Path:
    """cache_dir()/aarch64-<name>: the arm64 .debs of `packages` and their dependencies unpacked; done once
    (`ready`, a path inside the root, says it was)."""
    root = cache_dir() / f"aarch64-{name}"
    if (root / ready).exists():
        return root
    return _fetch(name, packages, with_dependencies=True)


@cache_lock("aarch64-debs")
def hwy_root() -> Path:
    """Debian's arm64 Highway (headers, libhwy.so.1 and its CMake package hwy) unpacked: libhwy-dev and libhwy1
    alone (their dependencies are the cross toolchain's C/C++ runtime), of the version of the machine's
    libhwy-dev where it has one. The root's VERSION file names the version."""
    root = cache_dir() / "aarch64-hwy"
    stamp = root / "VERSION"
    want = machine_version("libhwy-dev")
    if stamp.exists() and (root / MULTIARCH / "cmake" / "hwy" / "hwy-config.cmake").exists() and \
            (want is None or stamp.read_text().strip() == want):
        return root
    pins = [f"{p}={want}" if want else p for p in HWY_PACKAGES]
    try:
        root = _fetch("hwy", pins, with_dependencies=False)
    except RuntimeError as e:
        raise RuntimeError(f"Debian's arm64 {' and '.join(pins)} could not be fetched (this machine's libhwy-dev "
                           f"is {want or 'not installed'}): {e}") from None
    got = {}
    for deb in (cache_dir() / "aarch64-apt" / "archives-hwy").glob("*.deb"):
        m = re.match(r"^([^_]+)_([^_]+)_arm64\.deb$", deb.name)
        if m:
            got[m.group(1)] = m.group(2).replace("%3a", ":")
    versions = {got.get(p) for p in HWY_PACKAGES}
    if len(versions) != 1 or None in versions or (want and versions != {want}):
        raise RuntimeError(f"expected arm64 {' and '.join(HWY_PACKAGES)} {want or '(one version)'}, got {got}")
    stamp.write_text(versions.pop() + "\n")
    return root


def hwy_cmake_dir() -> Path:
    """The folder of the arm64 hwy-config.cmake, for -Dhwy_DIR."""
    return hwy_root() / MULTIARCH / "cmake" / "hwy"


def hwy_lib_dir() -> Path:
    """The folder of the arm64 libhwy.so.1 (the loader's path for the library under qemu-user)."""
    return hwy_root() / MULTIARCH


def cross_defines() -> dict:
    """CMake's cross build for linux-aarch64: Debian's cross compiler, and Debian's arm64 Highway (the installed
    package only: never Highway's source, which TORCH_SEGOPS_HWY=auto would fetch when this one is not found)."""
    return {"CMAKE_SYSTEM_NAME": "Linux", "CMAKE_SYSTEM_PROCESSOR": "aarch64", "CMAKE_CXX_COMPILER": CROSS_CXX,
            "TORCH_SEGOPS_HWY": "system", "hwy_DIR": str(hwy_cmake_dir())}


if __name__ == "__main__":
    print(hwy_cmake_dir())
