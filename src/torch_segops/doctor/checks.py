"""The checks in the order ``diagnose`` runs them (``CHECKS``): generators over Facts that yield plain findings,
(severity, code, message[, fix]); and the install commands every fix is made of. A command that installs torch-segops
names a channel that holds it: the one it was installed from, or the local channel tools/main.sh builds (no public
channel holds it)."""

from __future__ import annotations

import os
import re
from collections import namedtuple

from .records import (CUDATOOLKIT_LAST, ERROR, INFO, MIN_DRIVER_LINUX, MIN_TORCH, OK, OLDEST_ARCH, SUGGESTED_CUDA, WARNING, Facts,
                      Finding, cuda_major, version_at_least)


def variant(f: Facts) -> str | None:
    return (f.build_info or {}).get("variant")


def build_cuda(f: Facts) -> str | None:
    return (f.build_info or {}).get("cuda_version") or None


def build_name(cuda: str | None) -> str:
    """The conda build string's variant ("cpu", "cuda129") of a torch_segops build for this CUDA (None: cpu)."""
    return f"cuda{cuda.replace('.', '')}" if cuda else "cpu"


def torch_fix(f: Facts, minimum: str = MIN_TORCH, flag: str = "", cuda: str | None = None) -> str:
    """Install torch >= minimum (the build for this CUDA), with pip's ``flag`` (" --upgrade", " --force-reinstall"; pip
    replaces a build of the same version by another CUDA's only with --force-reinstall)."""
    if f.in_conda_env:
        force = " --force-reinstall" if flag == " --force-reinstall" else ""
        return (f'mamba install{force} "pytorch >={minimum} {build_name(cuda)}_*" "cuda-version {cuda}.*"' if cuda
                else f'mamba install{force} "pytorch>={minimum}"')
    index = f" --index-url https://download.pytorch.org/whl/cu{cuda.replace('.', '')}" if cuda else ""
    return f"pip install{flag or (' --force-reinstall' if cuda else '')} 'torch>={minimum}'{index}"


def installed_by(f: Facts) -> str:
    """"pip" or "conda": what installed torch_segops (else what this environment suggests)."""
    return (f.install or {}).get("kind") or ("conda" if f.in_conda_env else "pip")


def segops_fix(f: Facts, build: str | None = None, force: bool = False) -> str:
    """Install torch_segops (the conda ``build``: "cpu", "cuda129"; None: any) the way this one was installed."""
    install, how = f.install or {}, " --force-reinstall" if force else ""
    if installed_by(f) == "pip":
        cuda = "TORCH_SEGOPS_WITH_CUDA=1 " if build and build != "cpu" else ""
        cmd = f"{cuda}pip install --no-build-isolation{how and how + ' --no-deps'} {'-e ' if install.get('editable') else ''}{install.get('source') or '.'}"
        return cmd if install.get("source") else cmd + "  (in a torch-segops source checkout)"
    spec = f'"torch-segops * {build}_*"' if build else "torch-segops"
    for channel in filter(None, (install.get("channel"), f.local_channel)):
        builds = f.channel_builds.get(channel, [] if channel.startswith("file:") else None)  # None: not a folder, not read
        if builds is None or any(b.startswith(f"{build}_") if build else True for b in builds):
            return f"mamba install{how} -c {channel} {spec}"
    local = f.local_channel or "<the file:// channel it prints>"
    return (f"bash tools/main.sh --variant {build or 'cpu'}  (in a torch-segops source checkout: it builds the package "
            f"into the channel {local}), then: mamba install{how} -c {local} {spec}")


def fix_cuda_segops(f: Facts, cuda: str | None = None) -> str:
    fix = segops_fix(f, build_name(cuda or f.torch_cuda_version or SUGGESTED_CUDA))
    if installed_by(f) == "pip":
        return f"rebuild with CUDA: {fix}"
    return f"{fix}   or, building from source: TORCH_SEGOPS_WITH_CUDA=1 pip install --no-build-isolation -e .  (from a source checkout)"


def check_torch(f: Facts):
    if f.torch_version is None and f.torch_path:  # it imports, but is not a working torch (a stub, a stray folder)
        yield (ERROR, "torch-broken", f"the torch imported from {f.torch_path} does not work: {f.torch_error}",
               f"if {f.torch_path} is not your torch installation (a folder named torch ahead of it on sys.path), remove or "
               f"rename it; else reinstall torch: {torch_fix(f, flag=' --force-reinstall')}")
    elif f.torch_version is None:  # "No module named 'torch'": install; anything else: the install is broken
        broken = bool(f.torch_error) and "No module named 'torch'" not in f.torch_error
        yield ERROR, "torch-missing", f"torch cannot be imported: {f.torch_error or 'not installed'}", torch_fix(f, flag=" --force-reinstall" if broken else "")
    elif version_at_least(f.torch_version, MIN_TORCH) is False:
        yield (ERROR, "torch-too-old", f"torch {f.torch_version} is older than {MIN_TORCH}, the oldest torch whose stable ABI "
               "torch_segops targets", torch_fix(f, flag=" --upgrade", cuda=None if f.in_conda_env else f.torch_cuda_version))
    else:
        build = f"cuda {f.torch_cuda_version}" if f.torch_cuda_version else "cpu"
        yield OK, "torch", f"torch {f.torch_version} ({build} build) >= stable-ABI minimum {MIN_TORCH}"


def check_library(f: Facts):
    info = f.build_info
    installed = build_name(build_cuda(f)) if info and (variant(f) == "cpu" or build_cuda(f)) else None
    if not f.library_exists:
        yield (ERROR, "library-missing", f"the compiled library was not found ({f.library_path or 'no path'}): torch_segops is not "
               "built or not installed", segops_fix(f))
    elif f.library_file_problem:  # never handed to a loader
        yield ERROR, "library-damaged", f"the compiled library cannot be loaded: {f.library_file_problem}", segops_fix(f, installed, force=True)
    if not f.library_exists or f.library_file_problem or (f.library_error and f.torch_version is None):
        return  # (without torch, the torch finding says what to do)
    target = (info or {}).get("torch_target") or MIN_TORCH
    if f.library_error:
        hint = ("this is a CUDA build of torch_segops and torch is a cpu build; see below" if info and variant(f) == "cuda" and not f.torch_cuda_version
                else "torch is older than the binary's stable-ABI target; see below" if info and version_at_least(f.torch_version, target) is False
                else None)
        yield (ERROR, "library-load", f"loading {f.library_path} failed: {f.library_error}" + (f" ({hint})" if hint else ""),
               None if hint else f"reinstall torch_segops for this torch: {segops_fix(f, installed, force=True)}")
    if info and f.torch_version and version_at_least(f.torch_version, target) is False:
        yield (ERROR, "torch-below-binary-target", f"this torch_segops binary targets the stable ABI of torch {target}, but torch "
               f"is {f.torch_version}", torch_fix(f, target, " --upgrade"))
    if info and not f.library_error:
        record = (f.install or {}).get("record")
        verified = (f"; sha256 as in {record}" if f.library_sha256 else f"; sha256 not checked: {record} holds none" if record
                    else "; sha256 not checked: no install record (pip RECORD, conda-meta) lists it")
        yield (OK, "library", f"torch_segops {info.get('version')} {info.get('variant')} build loaded (CUDA {info.get('cuda_version') or '-'}, "
               f"archs {','.join(info.get('cuda_archs') or []) or '-'}){verified}")


def check_torch_vs_gpu(f: Facts):
    if not f.gpus or f.torch_version is None:
        return
    if not f.torch_cuda_version:
        yield (ERROR, "cpu-torch-on-gpu-machine", f"this machine has {len(f.gpus)} NVIDIA GPU(s) ({f.gpus[0].name}) but torch "
               f"{f.torch_version} is a cpu build",
               torch_fix(f, cuda=SUGGESTED_CUDA) + ("" if f.in_conda_env else '   (in a conda env: mamba install "pytorch=*=cuda*")'))
    elif f.torch_cuda_available is False:
        yield (WARNING, "torch-cuda-unavailable", f"torch {f.torch_version} is a CUDA {f.torch_cuda_version} build but "
               f"torch.cuda.is_available() is False{f': {f.torch_cuda_error}' if f.torch_cuda_error else ''}",
               "see the driver finding below; check CUDA_VISIBLE_DEVICES and that the NVIDIA kernel module is loaded (nvidia-smi)")


def cuda_users(f: Facts) -> tuple[tuple[str, str | None], ...]:
    """(who, CUDA version) of torch and torch_segops (None: a cpu build)."""
    return ("torch", f.torch_cuda_version), ("torch_segops", build_cuda(f) if variant(f) == "cuda" else None)


def check_driver(f: Facts):
    """The driver must support every CUDA major in use (torch's and torch_segops')."""
    if not f.gpus and not f.driver_version and not f.driver_cuda_version:
        return
    needed: dict[int, list[str]] = {}
    for who, v in cuda_users(f):
        if cuda_major(v):
            needed.setdefault(cuda_major(v), []).append(f"{who} (CUDA {v})")
    for major, users in sorted(needed.items()):
        minimum = MIN_DRIVER_LINUX.get(major)
        ok = (version_at_least(f.driver_version, minimum) if f.driver_version and minimum
              else cuda_major(f.driver_cuda_version) >= major if f.driver_cuda_version else None)
        if ok is False:
            alt = f"; or stay on this driver with CUDA 12 builds: {torch_fix(f, cuda='12.9')} and the cuda129 torch_segops" if major >= 13 else ""
            yield (ERROR, "driver-too-old", f"NVIDIA driver {f.driver_version or f'supporting CUDA {f.driver_cuda_version}'} is too old "
                   f"for {' and '.join(users)}: CUDA {major}.x needs driver >= {minimum} on Linux", f"upgrade the NVIDIA driver to >= {minimum}{alt}")
        elif ok is None:
            yield WARNING, "driver-unknown", f"could not read the NVIDIA driver version to check it against CUDA {major}.x (needs >= {minimum})"
        else:
            have = " ".join(x for x in (f.driver_version, f"(CUDA {f.driver_cuda_version})" if f.driver_cuda_version else None) if x)
            yield OK, "driver", f"NVIDIA driver {have} supports CUDA {major}.x (needs >= {minimum})"


def check_variant(f: Facts):
    if f.build_info is None or f.torch_version is None:
        return
    built, torch_cuda = build_cuda(f) or "(version unknown)", f.torch_cuda_version
    if variant(f) == "cpu" and f.gpus and torch_cuda:
        yield (ERROR, "cpu-segops-with-cuda-torch", f"torch_segops is the cpu build, but this machine has a GPU and torch is a CUDA "
               f"{torch_cuda} build: CUDA tensors will not be supported", fix_cuda_segops(f))
    elif variant(f) == "cpu" and torch_cuda:
        yield INFO, "cpu-segops-no-gpu", "torch_segops is the cpu build; torch is a CUDA build but no GPU was found here (fine on a login node)"
    elif variant(f) == "cuda" and not torch_cuda:
        yield (ERROR, "cuda-segops-with-cpu-torch", f"torch_segops is a CUDA {built} build but torch {f.torch_version} is a cpu build",
               f"{torch_fix(f, cuda=build_cuda(f) or SUGGESTED_CUDA)}   or install the cpu build of torch_segops: {segops_fix(f, 'cpu')}")
    elif variant(f) == "cuda" and cuda_major(torch_cuda) != cuda_major(build_cuda(f)):
        yield (ERROR, "cuda-major-mismatch", f"torch_segops was built with CUDA {built} but torch uses CUDA {torch_cuda}: different "
               "CUDA majors", fix_cuda_segops(f, torch_cuda))


def check_gpu_vs_cuda(f: Facts):
    """A CUDA major that no longer targets the GPU (CUDA 13 dropped Maxwell, Pascal and Volta)."""
    for g in (g for g in f.gpus if g.capability is not None):
        cc = g.capability[0] * 10 + g.capability[1]
        for who, v in cuda_users(f):
            oldest = OLDEST_ARCH.get(cuda_major(v) or -1)
            if oldest is not None and cc < oldest:
                older = any(a <= cc for a in OLDEST_ARCH.values())
                yield (ERROR, "cuda-drops-gpu", f"GPU {g.index} {g.name} (sm_{cc}) is not supported by CUDA {v}, used by {who}: "
                       f"CUDA {cuda_major(v)}.x builds for sm_{oldest} and newer",
                       (torch_fix(f, cuda=SUGGESTED_CUDA) if older else "this GPU is older than every supported CUDA toolkit")
                       + (" and the matching torch_segops build" if who == "torch_segops" or variant(f) == "cuda" else ""))


# Integrated (Tegra/Jetson) GPUs: SASS runs there only when built for exactly that cc, and their SASS
# runs on no other GPU (CUDA C++ Programming Guide, "Binary Compatibility").
TEGRA = {(5, 3), (6, 2), (7, 2), (8, 7), (10, 1), (11, 0)}


# One CMake CUDA_ARCHITECTURES entry: '75-real' (SASS), '90-virtual' (PTX), '120' (both), '90a-real'; suffix "a":
# arch-specific, "f": family-specific; name: '90a'.
ArchEntry = namedtuple("ArchEntry", "major minor suffix sass ptx name")


def parse_arch(entry: str) -> ArchEntry | None:
    m = re.fullmatch(r"(?:sm_|compute_)?(\d+)([af]?)(?:-(real|virtual))?", entry.strip())
    if not m:
        return None  # "native", "all", "all-major": cannot be judged from the list
    (major, minor), suffix, kind = divmod(int(m.group(1)), 10), m.group(2), m.group(3)
    return ArchEntry(major, minor, suffix, kind in (None, "real"), kind in (None, "virtual"), f"{major}{minor}{suffix}")


def arch_support(capability: tuple[int, int], archs: list[str]) -> tuple[str, ArchEntry | None]:
    """How a binary with these CMake arch entries runs on a GPU of this compute capability: ("sass", entry) when
    there is machine code the GPU runs (same major, minor not above the GPU's; an "a" entry, or a Tegra GPU or
    entry, only on its exact cc), ("ptx", entry) when only PTX of a lower or equal cc can be JIT-compiled,
    ("none", None) otherwise."""
    cc, entries = tuple(capability), [e for e in map(parse_arch, archs) if e is not None]
    same_major = lambda e: e.major == cc[0] and e.minor <= cc[1]  # noqa: E731
    sass = [e for e in entries if e.sass and (e[:2] == cc if e.suffix == "a" or {cc, e[:2]} & TEGRA else same_major(e))]
    if sass:
        return "sass", max(sass, key=lambda e: (e.minor, e.suffix == "a"))
    ptx = [e for e in entries if e.ptx and (e[:2] == cc if e.suffix == "a" else same_major(e) if e.suffix == "f"
                                            else e[:2] <= cc)]
    return ("ptx", max(ptx, key=lambda e: e[:2])) if ptx else ("none", None)


def check_arch(f: Facts):
    if variant(f) != "cuda":
        return
    archs = list((f.build_info or {}).get("cuda_archs") or [])
    judged = archs and all(parse_arch(a) for a in archs)  # not "native", "all"
    for g in f.gpus:
        sm, gpu = g.capability and f"{g.capability[0]}{g.capability[1]}", f"GPU {g.index} {g.name}"
        kind, entry = arch_support(g.capability, archs) if sm and judged else ("unjudged", None)
        rebuild = f'TORCH_SEGOPS_WITH_CUDA=1 CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES={sm}" pip install --no-build-isolation -e .'
        if not sm:
            yield WARNING, "gpu-cc-unknown", f"GPU {g.index} ({g.name}): compute capability unknown, cannot check the binary's architectures"
        elif kind == "unjudged":
            yield (WARNING, "archs-unknown", f"the binary's architecture list ({';'.join(archs) or 'empty'}) cannot be checked against "
                   f"GPU {g.index} (sm_{sm})")
        elif kind == "sass":
            yield OK, "arch", f"{gpu} (sm_{sm}): the binary has machine code for sm_{entry.name}"
        elif kind == "ptx" and f.driver_cuda_version and build_cuda(f) and version_at_least(f.driver_cuda_version, build_cuda(f)) is False:
            yield (ERROR, "ptx-needs-newer-driver", f"{gpu} (sm_{sm}) would run PTX for compute_{entry.name}, made by CUDA {build_cuda(f)}, "
                   f"but the driver only supports CUDA {f.driver_cuda_version}: the PTX cannot be JIT-compiled",
                   f"upgrade the NVIDIA driver, or rebuild with machine code for this GPU: {rebuild}")
        elif kind == "ptx":
            yield (WARNING, "arch-ptx-jit", f"{gpu} (sm_{sm}) has no machine code in the binary; the driver JIT-compiles PTX for "
                   f"compute_{entry.name} on first use (slow start, possibly slower kernels)", f"for native code: {rebuild}")
        else:
            yield (ERROR, "arch-missing", f"{gpu} (compute capability {g.capability[0]}.{g.capability[1]}) is not covered by the "
                   f"binary's architectures {';'.join(archs)} (no sm_{g.capability[0]}x machine code <= sm_{sm}, no PTX <= compute_{sm})",
                   f"rebuild for this GPU: {rebuild}")


def check_cudatoolkit(f: Facts):
    if f.cudatoolkit:
        yield (WARNING, "cudatoolkit", f"{f.conda_prefix or 'the active environment'} has cudatoolkit {f.cudatoolkit}: the pre-CUDA-12 "
               f"conda package (CUDA <= {CUDATOOLKIT_LAST}). No pytorch >= 2.10 build uses it; CUDA 12 and 13 come as cuda-version + "
               f"cuda-* packages", f"conda remove -p {f.conda_prefix or '$CONDA_PREFIX'} cudatoolkit, then install \"cuda-version="
               f"{SUGGESTED_CUDA}\" and the CUDA build: {fix_cuda_segops(f, SUGGESTED_CUDA)}   (or recreate the environment from "
               "environments/cuda-*.yml)")


def check_cuda_plans(f: Facts):
    """TORCH_SEGOPS_CUDA_PLANS: an invalid value makes every CUDA reduction raise; a valid one is reported."""
    plans = (f.build_info or {}).get("cuda_plans") if f.build_info_source == "loaded" else None
    fix = "unset TORCH_SEGOPS_CUDA_PLANS, or set it to a subset of short,merge,block holding short or merge (e.g. merge)"
    if plans is None and os.environ.get("TORCH_SEGOPS_CUDA_PLANS"):
        yield INFO, "cuda-plans", f"TORCH_SEGOPS_CUDA_PLANS={os.environ['TORCH_SEGOPS_CUDA_PLANS']} (not checked: the library is not loaded)"
    elif plans and plans.startswith("invalid:"):
        why, cuda = plans[len("invalid:"):].strip(), variant(f) == "cuda"
        yield (ERROR if cuda else WARNING, "cuda-plans-invalid", why + (": every CUDA reduction raises this" if cuda
               else " (this cpu build has no CUDA kernels and ignores it)"), fix)
    elif plans is not None and plans != "short,merge,block":
        yield (INFO, "cuda-plans", f"CUDA reductions restricted to the plans {plans} (TORCH_SEGOPS_CUDA_PLANS or "
               "torch_segops.set_cuda_plans; the default is every plan)")


CHECKS = [check_torch, check_library, check_torch_vs_gpu, check_driver, check_variant, check_gpu_vs_cuda, check_arch,
          check_cudatoolkit, check_cuda_plans]


def diagnose(f: Facts) -> list[Finding]:
    return [Finding(*finding) for check in CHECKS for finding in check(f)]
