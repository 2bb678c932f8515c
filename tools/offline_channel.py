#!/usr/bin/env python3
"""Build a local conda channel of STAND-IN packages so recipe/ can be built with no conda-forge access.

Nothing in this channel is a conda-forge package. Each stand-in only provides what the recipe's
build and tests touch, made from what this machine already has:

* ``python``      a venv of the interpreter running this script (bin/python -> that interpreter),
* ``pytorch``     the local CPU torch wheel (build string ``cpu_*`` so the recipe's ``cpu*`` pin is
                  exercised), and every other Python package (pip, setuptools, scikit-build-core,
                  pytest, hypothesis, numpy and their dependencies) repackaged from PyPI wheels into
                  ``lib/pythonX.Y/site-packages`` with ``.dist-info`` intact, so ``pip check`` works,
* ``cmake``, ``ninja``  the binaries from the PyPI wheels, at ``bin/``,
* ``gcc_linux-64``, ``gxx_linux-64``, ``cuda-nvcc_linux-64``  activation scripts pointing at the
                  system gcc/g++ and ``/usr/local/cuda`` (no compiler is shipped),
* ``sysroot_linux-64`` (what ``stdlib('c')`` resolves to) and ``cuda-version`` metapackages: empty,
* ``libhwy``      Google Highway from this machine's Debian libhwy-dev, laid out as conda-forge's libhwy:
                  ``include/hwy``, ``lib/libhwy.so.1`` and a CMake package ``hwy`` (an imported ``hwy::hwy``)
                  written here, with conda-forge's run-export (``libhwy >=X.Y.Z,<X.(Y+1).0a0``).

For a CUDA variant (``--cuda 13.0``) a second channel is added next to it, made from PyPI's CUDA build
of torch (downloaded once into a cache folder that is kept, see ``cache_dir()``):

* ``pytorch``     build ``cuda130_*``, the ``torch==2.13.0`` wheel (a ``+cu130`` build), depending on
                  ``cuda-version >=13.0,<14`` as conda-forge's pytorch does, and on every NVIDIA
                  library wheel it needs (``nvidia-*``, ``cuda-toolkit``, ``cuda-bindings``, ``triton``),
                  each repackaged the same way (extras such as ``cuda-toolkit[cublas]`` are expanded),
* ``cuda-cudart``, ``cuda-cudart-dev``  conda-forge's names for the CUDA runtime: the first needs the
                  repackaged ``nvidia-cuda-runtime`` (libcudart), the second carries conda-forge's
                  run-export ``cuda-cudart >=V,<major+1``; headers come from the system CUDA.

Because the stand-ins carry this machine's versions (gcc 12, Python 3.11, torch 2.13, ...), the tool
also writes ``offline_variants.yaml`` into the channel: a variant file that overrides the compiler,
stdlib, python_min and pytorch keys of ``conda_build_config.yaml`` to what the stand-ins provide. The
shipped recipe and ``conda_build_config.yaml`` contain nothing that exists only for this channel.

Everything generated lives in the cache folder, outside the source tree (conda-build copies the whole
source folder into every build). How one package is made (from files, from wheels): tools/standin_packages.py.

Usage:  python tools/offline_channel.py [--channel DIR] [--cuda 13.0] [--force]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script (python tools/offline_channel.py): the tools package from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools import standin_packages  # noqa: E402
from tools.conda_tools import cache_dir, cache_lock, pypi_only_env  # noqa: E402
from tools.standin_packages import (STANDIN, SUBDIR, Builder, ChannelError, activation, log, py_tag,  # noqa: E402
                                    rattler_modules, repack_wheels, run)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CHANNEL = cache_dir() / "offline-channel"

# Top-level Python packages the recipe's build and test environments need. Their dependencies are
# resolved by pip from the index and repackaged too. torch comes from the local CPU wheel only: a
# plain `pip download torch` would fetch the multi-GB CUDA build.
TORCH_VERSION = "2.13.0"
PY_PINS = [
    "pip==26.3",
    "setuptools==84.2.1",
    "scikit-build-core==1.1.2",
    "pytest==9.0.3",
    "hypothesis==6.155.2",
    "numpy==2.4.6",
]
BINARY_WHEELS = {"cmake": "cmake==4.4.4", "ninja": "ninja==1.13.2"}
CUDA_VERSIONS = ["12.9", "13.0"]
CUDA_HOME = Path("/usr/local/cuda")
# The CUDA torch wheels on PyPI that a CUDA variant can be built against offline, by CUDA version.
# PyPI's Linux torch wheels are CUDA builds: 2.10 is cu128, 2.11 to 2.14 are cu130; none is cu129.
CUDA_TORCH = {"13.0": "torch==2.13.0"}
CUDA_MISSING = {
    "12.9": (
        "the cuda129 variant cannot be built offline on this machine: PyPI has no CUDA 12.9 build of torch "
        "(its Linux torch 2.10 wheel is cu128, 2.11 to 2.14 are cu130), and the nvidia-cuda-nvcc-cu12 12.9 "
        "wheel ships ptxas, libnvvm and headers but no nvcc, cicc or fatbinary. A packager gets all of them "
        "from conda-forge (pytorch *cuda129* builds, cuda-nvcc 12.9, cuda-cudart-dev 12.9): on a machine "
        "that reaches it run `bash tools/main.sh --variant cuda129 --conda-forge`, or `rattler-build build "
        "-r recipe/recipe.yaml -m conda_build_config.yaml --variant cuda_compiler_version=12.9 -c conda-forge`."),
}


# ---------------------------------------------------------------------------------------------
# what this machine provides
# ---------------------------------------------------------------------------------------------

def torch_wheel() -> Path:
    """The local CPU torch wheel, found the way pip finds it (find-links), never downloaded."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    with tempfile.TemporaryDirectory() as d:
        res = subprocess.run(
            [sys.executable, "-m", "pip", "download", f"torch=={TORCH_VERSION}", "--no-deps", "--no-index",
             "--only-binary=:all:", "-d", d],
            text=True, capture_output=True)
        got = list(Path(d).glob("torch-*.whl"))
        if res.returncode == 0 and got and "+cpu" in got[0].name:
            for link in os.environ.get("PIP_FIND_LINKS", "").split() + ["/opt/wheels"]:
                cand = Path(link) / got[0].name
                if cand.is_file():
                    return cand
            keep = cache_dir() / "wheels" / got[0].name
            keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(got[0], keep)
            return keep
    raise ChannelError(
        f"no local CPU wheel for torch=={TORCH_VERSION} ({tag}) was found through pip's find-links "
        "(expected e.g. /opt/wheels/torch-2.13.0+cpu-cp311-...whl). This tool never downloads the "
        "multi-GB CUDA torch from PyPI; put the CPU wheel in a find-links folder and retry.")


def system_tools() -> dict:
    gcc, gxx = shutil.which("gcc"), shutil.which("g++")
    if not gcc or not gxx:
        raise ChannelError("gcc/g++ not found on PATH: the compiler stand-ins point at the system compilers")
    gcc_ver = run([gcc, "-dumpfullversion"]).stdout.strip()
    gxx_ver = run([gxx, "-dumpfullversion"]).stdout.strip()
    import platform
    libc, libc_ver = platform.libc_ver()
    if libc != "glibc":
        raise ChannelError("the sysroot stand-in needs a glibc system")
    nvcc = CUDA_HOME / "bin" / "nvcc"
    nvcc_ver = None
    if nvcc.exists():
        m = re.search(r"release (\d+\.\d+)", run([str(nvcc), "--version"]).stdout)
        nvcc_ver = m.group(1) if m else None
    return {"gcc": gcc, "gcc_version": gcc_ver, "gxx": gxx, "gxx_version": gxx_ver,
            "glibc": ".".join(libc_ver.split(".")[:2]), "nvcc": str(nvcc) if nvcc_ver else None,
            "nvcc_version": nvcc_ver, **system_hwy()}


def system_hwy() -> dict:
    """This machine's Google Highway (Debian's libhwy-dev): headers, libhwy.so.1, version."""
    header = Path("/usr/include/hwy/highway.h")
    libs = sorted(Path("/usr/lib").glob("*/libhwy.so.1")) + sorted(Path("/usr/lib").glob("libhwy.so.1"))
    if not header.exists() or not libs:
        raise ChannelError("Google Highway (libhwy-dev) is not installed: tools/bootstrap.sh installs it with apt-get")
    text = header.read_text()
    version = ".".join(re.search(rf"#define HWY_{k} (\d+)", text).group(1) for k in ("MAJOR", "MINOR", "PATCH"))
    return {"hwy_include": str(header.parent), "hwy_lib": str(libs[0]), "hwy_version": version}


def _tool_hash():
    """sha256 fed with this tool's sources: a changed tool rebuilds its channels."""
    h = hashlib.sha256()
    for source in (__file__, standin_packages.__file__):
        h.update(Path(source).read_bytes())
    return h


def fingerprint(tools: dict, wheel: Path) -> str:
    h = _tool_hash()
    h.update(json.dumps(tools, sort_keys=True).encode())
    h.update(wheel.name.encode())
    h.update(sys.version.encode())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# the stand-ins of the base channel
# ---------------------------------------------------------------------------------------------

def build_python(b: Builder) -> str:
    """python: a venv of this interpreter (bin/python is a link to it, pyvenv.cfg points home)."""
    mm, pyname = py_tag()
    exe = Path(os.path.realpath(sys._base_executable))
    if not exe.is_file():
        raise ChannelError(f"cannot resolve the base interpreter ({sys._base_executable})")
    d = b.stage("python")
    (d / "bin").mkdir()
    os.symlink(exe, d / "bin" / pyname)
    os.symlink(pyname, d / "bin" / "python3")
    os.symlink(pyname, d / "bin" / "python")
    (d / "pyvenv.cfg").write_text(
        f"home = {exe.parent}\ninclude-system-site-packages = false\nversion = {sys.version.split()[0]}\n")
    sp = d / "lib" / pyname / "site-packages"
    sp.mkdir(parents=True)
    (sp / "README.offline-standin").write_text(
        f"This environment's python is a venv of {exe}; see tools/offline_channel.py.\n")
    version = sys.version.split()[0]
    b.package("python", version, f"{STANDIN}_0_cpython", files_dir=d,
              summary=f"venv of the system interpreter {exe}")
    return version


def build_python_packages(b: Builder, torch_whl: Path) -> None:
    wheels = b.work / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)  # pip's own cache makes a fresh download cheap
    wheels.mkdir(parents=True)
    log(f"resolving and downloading wheels for {', '.join(PY_PINS)} (+ torch from {torch_whl.name})")
    run([sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--dest", str(wheels),
         str(torch_whl), *PY_PINS])
    repack_wheels(b, sorted(wheels.glob("*.whl")), pytorch_build=f"cpu_{STANDIN}_0")


def build_binary_wheel_packages(b: Builder) -> None:
    """cmake and ninja: the binaries shipped inside their PyPI wheels, laid out at the prefix root."""
    wheels = b.work / "wheels-bin"
    wheels.mkdir(parents=True, exist_ok=True)
    run([sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps", "--dest", str(wheels),
         *BINARY_WHEELS.values()])
    for name, pin in BINARY_WHEELS.items():
        version = pin.split("==")[1]
        whl = next(wheels.glob(f"{name}-{version}-*.whl"))
        d = b.stage(name)
        with zipfile.ZipFile(whl) as z:
            for info in z.infolist():
                # cmake ships an install tree under cmake/data/, ninja its binary as a wheel script
                for prefix, dest in ((f"{name}/data/", ""), (f"{name}-{version}.data/scripts/", "bin/")):
                    if info.filename.startswith(prefix) and not info.is_dir():
                        break
                else:
                    continue
                target = d / (dest + info.filename[len(prefix):])
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                target.chmod(((info.external_attr >> 16) & 0o777) or 0o644)
        if not (d / "bin" / name).exists():
            raise ChannelError(f"{whl.name} has no {name} binary")
        b.package(name, version, f"{STANDIN}_0", files_dir=d,
                  summary=f"the {name} binary from the {whl.name} wheel")
        log(f"  {name} {version}")


def build_toolchain(b: Builder, tools: dict) -> None:
    gcc_major = tools["gcc_version"].split(".")[0]
    b.file_package("gcc_linux-64", tools["gcc_version"], f"{STANDIN}_0",
                   activation("gcc_linux-64", {"CC": tools["gcc"], "CC_FOR_BUILD": tools["gcc"]}),
                   summary=f"activation script exporting CC={tools['gcc']}")
    b.file_package("gxx_linux-64", tools["gxx_version"], f"{STANDIN}_0",
                   activation("gxx_linux-64", {"CXX": tools["gxx"], "CXX_FOR_BUILD": tools["gxx"]}),
                   depends=[f"gcc_linux-64 {tools['gcc_version']}"],
                   summary=f"activation script exporting CXX={tools['gxx']}")
    b.file_package("sysroot_linux-64", tools["glibc"], f"{STANDIN}_0",
                   {"share/doc/sysroot_linux-64/README.offline-standin":
                        f"No sysroot is shipped: the build links against this machine's glibc {tools['glibc']}.\n"},
                   summary="empty placeholder for stdlib('c')")
    for cv in CUDA_VERSIONS:
        b.file_package("cuda-version", cv, f"{STANDIN}_0",
                       {f"share/doc/cuda-version/README.{cv}": f"cuda-version {cv} metapackage stand-in\n"},
                       constrains=[f"__cuda >={cv.split('.')[0]}"], summary=f"cuda-version {cv} metapackage")
    if tools["nvcc"]:
        v = tools["nvcc_version"]
        b.file_package("cuda-nvcc_linux-64", v, f"{STANDIN}_0",
                       activation("cuda-nvcc_linux-64", {"CUDA_HOME": str(CUDA_HOME), "CUDACXX": tools["nvcc"],
                                                         "NVCC": tools["nvcc"]}),
                       depends=[f"cuda-version >={v},<{int(v.split('.')[0]) + 1}"],
                       # as conda-forge's cuda-nvcc_linux-64: packages built with it need this CUDA major
                       run_exports={"strong": [f"cuda-version >={v},<{int(v.split('.')[0]) + 1}"]},
                       summary=f"activation script exporting CUDACXX={tools['nvcc']}")
    else:
        log(f"no nvcc under {CUDA_HOME}: cuda-nvcc_linux-64 stand-in skipped")
    return gcc_major


# The CMake package of the libhwy stand-in: the shared library as Highway's own hwy-config.cmake imports it
HWY_CONFIG = """\
# OFFLINE STAND-IN of Google Highway's CMake package (tools/offline_channel.py): the shared library only.
get_filename_component(_hwy_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET hwy::hwy)
  add_library(hwy::hwy SHARED IMPORTED)
  set_target_properties(hwy::hwy PROPERTIES IMPORTED_LOCATION "${_hwy_prefix}/lib/libhwy.so.1"
                        IMPORTED_SONAME "libhwy.so.1" INTERFACE_INCLUDE_DIRECTORIES "${_hwy_prefix}/include"
                        INTERFACE_COMPILE_DEFINITIONS HWY_SHARED_DEFINE)
endif()
"""
HWY_CONFIG_VERSION = """\
set(PACKAGE_VERSION "{version}")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION OR NOT PACKAGE_FIND_VERSION_MAJOR EQUAL {major})
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()
"""


def build_libhwy(b: Builder, tools: dict) -> None:
    """libhwy: this machine's Highway headers and library, a CMake package, and conda-forge's run-export
    (its recipe: pin_subpackage('libhwy', max_pin='x.x'))."""
    v = tools["hwy_version"]
    major, minor = (int(x) for x in v.split(".")[:2])
    d = b.stage("libhwy")
    shutil.copytree(tools["hwy_include"], d / "include" / "hwy", symlinks=True)
    real = Path(os.path.realpath(tools["hwy_lib"]))
    (d / "lib" / "cmake" / "hwy").mkdir(parents=True)
    shutil.copy2(real, d / "lib" / real.name)
    if real.name != "libhwy.so.1":
        (d / "lib" / "libhwy.so.1").symlink_to(real.name)
    (d / "lib" / "libhwy.so").symlink_to("libhwy.so.1")
    (d / "lib" / "cmake" / "hwy" / "hwy-config.cmake").write_text(HWY_CONFIG)
    (d / "lib" / "cmake" / "hwy" / "hwy-config-version.cmake").write_text(
        HWY_CONFIG_VERSION.format(version=v, major=major))
    (d / "info").mkdir()
    (d / "info" / "run_exports.json").write_text(json.dumps({"weak": [f"libhwy >={v},<{major}.{minor + 1}.0a0"]}))
    b.package("libhwy", v, f"{STANDIN}_0", files_dir=d,
              summary=f"Google Highway {v} from this machine's libhwy-dev (headers, libhwy.so.1, a CMake package)")
    log(f"  libhwy {v}")


def write_variants(channel: Path, tools: dict, python_version: str) -> Path:
    """The variant overrides that make conda_build_config.yaml's keys match the stand-ins."""
    mm = ".".join(python_version.split(".")[:2])
    gcc_major = tools["gcc_version"].split(".")[0]
    text = f"""\
# Generated by tools/offline_channel.py for the OFFLINE STAND-IN channel next to this file.
# Layered over conda_build_config.yaml: it replaces the conda-forge compiler, sysroot, python_min and
# pytorch versions by what the stand-ins on this machine provide. cpu and cuda130 can be built offline
# (cuda130 with the second channel, --cuda 13.0); every CUDA row is kept so the zip stays the same length.
c_compiler_version:
  - {gcc_major}
  - {gcc_major}
  - {gcc_major}
cxx_compiler_version:
  - {gcc_major}
  - {gcc_major}
  - {gcc_major}
c_stdlib_version:
  - "{tools['glibc']}"
  - "{tools['glibc']}"
  - "{tools['glibc']}"
python_min:
  - "{mm}"
pytorch:
  - "{TORCH_VERSION.rsplit('.', 1)[0]}"
"""
    path = channel / "offline_variants.yaml"
    path.write_text(text)
    return path


async def _index(channel: Path) -> None:
    rattler, _ = rattler_modules()
    await rattler.index.index_fs(channel, write_shards=False)  # every subdir, noarch included


def _up_to_date(channel: Path, fp: str, force: bool) -> bool:
    stamp = channel / "STANDIN-CHANNEL.json"
    if force or not stamp.exists():
        return False
    try:
        return json.loads(stamp.read_text()).get("fingerprint") == fp
    except json.JSONDecodeError:
        return False


def _start(channel: Path) -> Builder:
    log(f"building stand-in channel at {channel}")
    shutil.rmtree(channel, ignore_errors=True)
    (channel / SUBDIR).mkdir(parents=True)
    (channel / "noarch").mkdir()
    work = channel.parent / (channel.name + "-work")
    shutil.rmtree(work / "stage", ignore_errors=True)
    return Builder(channel, work)


def _finish(b: Builder, fp: str, t0: float, **facts) -> None:
    log("indexing")
    asyncio.run(_index(b.channel))
    (b.channel / "STANDIN-CHANNEL.json").write_text(json.dumps({
        "fingerprint": fp, "packages": sorted(b.made), **facts,
        "note": "stand-in packages made by tools/offline_channel.py; not conda-forge packages"}, indent=1))
    shutil.rmtree(b.work, ignore_errors=True)
    log(f"done: {len(b.made)} packages in {time.time() - t0:.0f} s")


@cache_lock("stand-in-channel")
def ensure_channel(channel: Path = DEFAULT_CHANNEL, force: bool = False) -> tuple[Path, Path]:
    """Build (or reuse) the stand-in channel; returns (channel dir, offline variant file)."""
    channel = Path(channel).resolve()
    tools = system_tools()
    whl = torch_wheel()
    fp = fingerprint(tools, whl)
    variants = channel / "offline_variants.yaml"
    if variants.exists() and _up_to_date(channel, fp, force):
        log(f"reusing {channel} (fingerprint {fp}; --force rebuilds)")
        return channel, variants
    t0 = time.time()
    b = _start(channel)
    python_version = build_python(b)
    log(f"  python {python_version} (venv of {os.path.realpath(sys._base_executable)})")
    build_python_packages(b, whl)
    build_binary_wheel_packages(b)
    build_toolchain(b, tools)
    build_libhwy(b, tools)
    variants = write_variants(channel, tools, python_version)
    _finish(b, fp, t0, tools=tools, torch_wheel=str(whl))
    return channel, variants


# ---------------------------------------------------------------------------------------------
# the CUDA part: PyPI's CUDA torch and its NVIDIA libraries
# ---------------------------------------------------------------------------------------------

def wheel_torch_version(whl: Path) -> tuple[str, str | None]:
    """(__version__, cuda) as written in the wheel's torch/version.py, read without installing it."""
    with zipfile.ZipFile(whl) as z:
        text = z.read("torch/version.py").decode()
    version = re.search(r"^__version__\s*=\s*'([^']+)'", text, re.M)
    cuda = re.search(r"^cuda\s*:.*=\s*'([^']+)'|^cuda\s*=\s*'([^']+)'", text, re.M)
    return (version.group(1) if version else "?"), (next(g for g in cuda.groups() if g) if cuda else None)


def resolution_wheels(pip_output: str, dest: Path) -> list[Path]:
    """The wheels that one `pip download --dest dest` run resolved to, read from its output ("Saved
    <file>" / "File was already downloaded <file>"): one file per project, each present in dest."""
    # pip indents the second kind ("  File was already downloaded ...") but not the first
    names = re.findall(r"^\s*(?:Saved|File was already downloaded) (\S+\.whl)\s*$", pip_output, re.M)
    if not names:
        raise ChannelError(f"pip download named no wheel it saved or found in {dest}:\n{pip_output[-2000:]}")
    wheels, projects = [], {}
    for name in dict.fromkeys(Path(n).name for n in names):
        path = dest / name
        if not path.is_file():
            raise ChannelError(f"pip download reported {name}, which is not in {dest}")
        project = re.sub(r"[-_.]+", "_", name.split("-")[0].lower())
        if project in projects:
            raise ChannelError(f"one pip resolution named two wheels of {project}: {projects[project]}, {name}")
        projects[project] = name
        wheels.append(path)
    return sorted(wheels)


@cache_lock("cuda-wheels-{0}")
def download_cuda_wheels(cuda: str) -> list[Path]:
    """PyPI's CUDA torch wheel and its whole dependency closure, into a cache folder that is kept
    (pip's own HTTP cache keeps none of these: the index sends no cache headers). Files already there
    are not downloaded again. pip's find-links (this machine's +cpu wheel, which sorts above the plain
    version) and config files are ignored for this one call."""
    if cuda not in CUDA_TORCH:
        raise ChannelError(CUDA_MISSING.get(cuda, f"no CUDA {cuda} torch is known to this tool (known: "
                                                  f"{', '.join(CUDA_TORCH)})"))
    dest = cache_dir() / "wheels" / ("cu" + cuda.replace(".", ""))
    dest.mkdir(parents=True, exist_ok=True)
    spec = CUDA_TORCH[cuda]
    have = sum(f.stat().st_size for f in dest.glob("*.whl"))
    log(f"downloading {spec} (CUDA {cuda} build, about 0.5 GB) and its NVIDIA libraries (about 2.2 GB) "
        f"into {dest} ({have / 2**30:.1f} GiB already there)")
    t0 = time.time()
    res = run([sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--dest", str(dest),
               "--progress-bar", "off", spec], env=pypi_only_env())
    # exactly the files of this resolution: the folder may hold older ones (an earlier resolution)
    wheels = resolution_wheels(res.stdout, dest)
    manifest = dest / f"resolution-{re.sub(r'[^A-Za-z0-9.]+', '_', spec)}.json"
    manifest.write_text(json.dumps({"spec": spec, "wheels": [w.name for w in wheels]}, indent=1) + "\n")
    torch_whl = [w for w in wheels if w.name.startswith("torch-")]
    if len(torch_whl) != 1:
        raise ChannelError(f"pip download {spec} left {len(torch_whl)} torch wheels in {dest}:\n{res.stdout[-2000:]}")
    version, wcuda = wheel_torch_version(torch_whl[0])
    if wcuda != cuda:
        raise ChannelError(f"{torch_whl[0].name} is torch {version} built for CUDA {wcuda}, not {cuda}")
    log(f"  {len(wheels)} wheels, {sum(w.stat().st_size for w in wheels) / 2**30:.1f} GiB, torch {version} "
        f"(cuda {wcuda}), in {time.time() - t0:.0f} s")
    return wheels


@cache_lock("stand-in-channel-cuda{0}")
def ensure_cuda_channel(cuda: str, base: Path = DEFAULT_CHANNEL, force: bool = False) -> Path:
    """The CUDA stand-ins, in a channel next to the base one (which must exist): pytorch ``cuda<XY>_*``
    and its NVIDIA wheels, cuda-cudart and cuda-cudart-dev. Returns the channel folder."""
    base = Path(base).resolve()
    channel = base.parent / f"{base.name}-cuda{cuda.replace('.', '')}"
    base_stamp = json.loads((base / "STANDIN-CHANNEL.json").read_text())
    wheels = download_cuda_wheels(cuda)
    h = _tool_hash()
    h.update(base_stamp["fingerprint"].encode())
    h.update("\n".join(w.name for w in wheels).encode())
    fp = h.hexdigest()[:16]
    if _up_to_date(channel, fp, force):
        log(f"reusing {channel} (fingerprint {fp}; --force rebuilds)")
        return channel
    t0 = time.time()
    b = _start(channel)
    have = {ident.rsplit("-", 2)[0] for ident in base_stamp["packages"]} - {"pytorch"}
    major = int(cuda.split(".")[0])
    made = repack_wheels(b, wheels, skip=have, pytorch_build=f"cuda{cuda.replace('.', '')}_{STANDIN}_0",
                         pytorch_depends=(f"cuda-version >={cuda},<{major + 1}",))
    runtime = made.get("nvidia-cuda-runtime")
    if runtime is None:
        raise ChannelError(f"the CUDA {cuda} torch wheel did not bring nvidia-cuda-runtime (libcudart)")
    pin = f"cuda-version >={cuda},<{cuda.split('.')[0]}.{int(cuda.split('.')[1]) + 1}"
    b.file_package("cuda-cudart", runtime, f"{STANDIN}_0",
                   {"share/doc/cuda-cudart/README.offline-standin":
                        "libcudart comes from the nvidia-cuda-runtime package (site-packages/nvidia).\n"},
                   depends=[pin, f"nvidia-cuda-runtime =={runtime}"], summary="CUDA runtime (via nvidia-cuda-runtime)")
    b.file_package("cuda-cudart-dev", runtime, f"{STANDIN}_0",
                   {"share/doc/cuda-cudart-dev/README.offline-standin":
                        f"Headers and libcudart.so come from the system CUDA at {CUDA_HOME}.\n"},
                   depends=[pin, f"cuda-cudart =={runtime}"],
                   run_exports={"weak": [f"cuda-cudart >={runtime},<{major + 1}.0a0"]},  # as conda-forge's
                   summary="CUDA runtime headers (the system CUDA's)")
    _finish(b, fp, t0, cuda=cuda, wheels=[w.name for w in wheels])
    return channel


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--channel", type=Path, default=DEFAULT_CHANNEL, help="channel folder (default: %(default)s)")
    ap.add_argument("--cuda", choices=sorted({*CUDA_TORCH, *CUDA_MISSING}),
                    help="also build the CUDA stand-ins for this CUDA version (downloads about 2.7 GB once)")
    ap.add_argument("--force", action="store_true", help="rebuild even if the channel is up to date")
    args = ap.parse_args(argv)
    try:
        channel, variants = ensure_channel(args.channel, args.force)
        print(f"channel:  {channel.as_uri()}\nvariants: {variants}")
        if args.cuda:
            print(f"channel:  {ensure_cuda_channel(args.cuda, channel, args.force).as_uri()}")
    except ChannelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
