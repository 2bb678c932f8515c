"""The install checks (torch, the library, the variant, cudatoolkit, the CUDA plans), pure functions
``Facts -> list[Finding]`` run in order by ``diagnose``, and the install commands every fix is made of.
A command that installs torch-segops names a channel that holds it: the one it was installed from, or the
local channel tools/main.sh builds; no public channel holds it."""

from __future__ import annotations

import os

from .records import CUDATOOLKIT_LAST, ERROR, INFO, MIN_TORCH, OK, SUGGESTED_CUDA, WARNING, Facts, Finding, cuda_major, version_at_least


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
        if cuda:
            return f'mamba install{force} "pytorch >={minimum} {build_name(cuda)}_*" "cuda-version {cuda}.*"'
        return f'mamba install{force} "pytorch>={minimum}"'
    flag = flag or (" --force-reinstall" if cuda else "")
    index = f" --index-url https://download.pytorch.org/whl/cu{cuda.replace('.', '')}" if cuda else ""
    return f"pip install{flag} 'torch>={minimum}'{index}"


def installed_by(f: Facts) -> str:
    """"pip" or "conda": what installed torch_segops (else what this environment suggests)."""
    return (f.install or {}).get("kind") or ("conda" if f.in_conda_env else "pip")


def segops_fix(f: Facts, build: str | None = None, force: bool = False) -> str:
    """Install torch_segops (the conda ``build``: "cpu", "cuda129"; None: any) the way this one was installed."""
    install = f.install or {}
    if installed_by(f) == "pip":
        cuda = "TORCH_SEGOPS_WITH_CUDA=1 " if build and build != "cpu" else ""
        how = " --force-reinstall --no-deps" if force else ""
        cmd = f"{cuda}pip install --no-build-isolation{how} {'-e ' if install.get('editable') else ''}{install.get('source') or '.'}"
        return cmd if install.get("source") else cmd + "  (in a torch-segops source checkout)"
    spec, how = f'"torch-segops * {build}_*"' if build else "torch-segops", " --force-reinstall" if force else ""
    for channel in filter(None, (install.get("channel"), f.local_channel)):
        builds = f.channel_builds.get(channel, [] if channel.startswith("file:") else None)  # None: not a folder, not read
        if builds is None or any(b.startswith(f"{build}_") if build else True for b in builds):
            return f"mamba install{how} -c {channel} {spec}"
    local = f.local_channel or "<the file:// channel it prints>"
    return (f"bash tools/main.sh --variant {build or 'cpu'}  (in a torch-segops source checkout: it builds the package "
            f"into the channel {local}), then: mamba install{how} -c {local} {spec}")


def fix_cuda_segops(f: Facts, cuda: str | None = None) -> str:
    build = build_name(cuda or f.torch_cuda_version or SUGGESTED_CUDA)
    source = "TORCH_SEGOPS_WITH_CUDA=1 pip install --no-build-isolation -e .  (from a source checkout)"
    if installed_by(f) == "pip":
        return f"rebuild with CUDA: {segops_fix(f, build)}"
    return f"{segops_fix(f, build)}   or, building from source: {source}"


def check_torch(f: Facts) -> list[Finding]:
    if f.torch_version is None and f.torch_path:  # it imports, but is not a working torch (a stub, a stray folder)
        where = f.torch_path
        return [Finding(ERROR, "torch-broken", f"the torch imported from {where} does not work: {f.torch_error}",
                        f"if {where} is not your torch installation (a folder named torch ahead of it on sys.path), "
                        f"remove or rename it; else reinstall torch: {torch_fix(f, flag=' --force-reinstall')}")]
    if f.torch_version is None:  # "No module named 'torch'": install; anything else: the install is broken
        broken = bool(f.torch_error) and "No module named 'torch'" not in f.torch_error
        return [Finding(ERROR, "torch-missing", f"torch cannot be imported: {f.torch_error or 'not installed'}",
                        torch_fix(f, flag=" --force-reinstall" if broken else ""))]
    if version_at_least(f.torch_version, MIN_TORCH) is False:
        fix = torch_fix(f, flag=" --upgrade", cuda=None if f.in_conda_env else f.torch_cuda_version)
        return [Finding(ERROR, "torch-too-old", f"torch {f.torch_version} is older than {MIN_TORCH}, the oldest torch whose "
                                                "stable ABI torch_segops targets", fix)]
    build = f"cuda {f.torch_cuda_version}" if f.torch_cuda_version else "cpu"
    return [Finding(OK, "torch", f"torch {f.torch_version} ({build} build) >= stable-ABI minimum {MIN_TORCH}")]


def check_library(f: Facts) -> list[Finding]:
    info, out = f.build_info, []
    installed = build_name(build_cuda(f)) if info and (variant(f) == "cpu" or build_cuda(f)) else None
    if not f.library_exists:
        return [Finding(ERROR, "library-missing", f"the compiled library was not found ({f.library_path or 'no path'}): "
                                                  "torch_segops is not built or not installed", segops_fix(f))]
    if f.library_file_problem:  # never handed to a loader
        return [Finding(ERROR, "library-damaged", f"the compiled library cannot be loaded: {f.library_file_problem}",
                        segops_fix(f, installed, force=True))]
    if f.library_error and f.torch_version is None:
        return out  # cannot be loaded without torch; the torch finding says what to do
    if f.library_error:
        hint = None
        if info and variant(f) == "cuda" and not f.torch_cuda_version:
            hint = "this is a CUDA build of torch_segops and torch is a cpu build; see below"
        elif info and version_at_least(f.torch_version, info.get("torch_target") or MIN_TORCH) is False:
            hint = "torch is older than the binary's stable-ABI target; see below"
        out.append(Finding(ERROR, "library-load", f"loading {f.library_path} failed: {f.library_error}" + (f" ({hint})" if hint else ""),
                           None if hint else f"reinstall torch_segops for this torch: {segops_fix(f, installed, force=True)}"))
    if info:
        target = info.get("torch_target") or MIN_TORCH
        if f.torch_version and version_at_least(f.torch_version, target) is False:
            out.append(Finding(ERROR, "torch-below-binary-target", f"this torch_segops binary targets the stable ABI of torch "
                                                                   f"{target}, but torch is {f.torch_version}", torch_fix(f, target, " --upgrade")))
        if not f.library_error:
            archs, cuda = ",".join(info.get("cuda_archs") or []) or "-", info.get("cuda_version") or "-"
            record = (f.install or {}).get("record")
            verified = (f"; sha256 as in {record}" if f.library_sha256 else f"; sha256 not checked: {record} holds none" if record
                        else "; sha256 not checked: no install record (pip RECORD, conda-meta) lists it")
            out.append(Finding(OK, "library", f"torch_segops {info.get('version')} {info.get('variant')} build loaded (CUDA {cuda}, "
                                              f"archs {archs}){verified}"))
    return out


def check_cuda_plans(f: Facts) -> list[Finding]:
    """TORCH_SEGOPS_CUDA_PLANS: an invalid value makes every CUDA reduction raise; a valid one is reported."""
    plans = (f.build_info or {}).get("cuda_plans") if f.build_info_source == "loaded" else None
    env = os.environ.get("TORCH_SEGOPS_CUDA_PLANS")
    fix = "unset TORCH_SEGOPS_CUDA_PLANS, or set it to a subset of short,merge,block holding short or merge (e.g. merge)"
    if plans is None:
        return [Finding(INFO, "cuda-plans", f"TORCH_SEGOPS_CUDA_PLANS={env} (not checked: the library is not loaded)")] if env else []
    if plans.startswith("invalid:"):
        what = plans[len("invalid:"):].strip()
        if variant(f) == "cuda":
            return [Finding(ERROR, "cuda-plans-invalid", f"{what}: every CUDA reduction raises this", fix)]
        return [Finding(WARNING, "cuda-plans-invalid", f"{what} (this cpu build has no CUDA kernels and ignores it)", fix)]
    if plans != "short,merge,block":
        return [Finding(INFO, "cuda-plans", f"CUDA reductions restricted to the plans {plans} (TORCH_SEGOPS_CUDA_PLANS or "
                                            "torch_segops.set_cuda_plans; the default is every plan)")]
    return []


def check_variant(f: Facts) -> list[Finding]:
    if f.build_info is None or f.torch_version is None:
        return []
    built = build_cuda(f) or "(version unknown)"
    if variant(f) == "cpu" and f.gpus and f.torch_cuda_version:
        return [Finding(ERROR, "cpu-segops-with-cuda-torch", f"torch_segops is the cpu build, but this machine has a GPU and torch is a "
                                                             f"CUDA {f.torch_cuda_version} build: CUDA tensors will not be supported", fix_cuda_segops(f))]
    if variant(f) == "cpu" and f.torch_cuda_version:
        return [Finding(INFO, "cpu-segops-no-gpu", "torch_segops is the cpu build; torch is a CUDA build but no GPU was found here "
                                                   "(fine on a login node)")]
    if variant(f) == "cuda" and not f.torch_cuda_version:
        return [Finding(ERROR, "cuda-segops-with-cpu-torch", f"torch_segops is a CUDA {built} build but torch {f.torch_version} is a cpu build",
                        f"{torch_fix(f, cuda=build_cuda(f) or SUGGESTED_CUDA)}   or install the cpu build of torch_segops: {segops_fix(f, 'cpu')}")]
    if variant(f) == "cuda" and cuda_major(f.torch_cuda_version) != cuda_major(build_cuda(f)):
        return [Finding(ERROR, "cuda-major-mismatch", f"torch_segops was built with CUDA {built} but torch uses CUDA "
                                                      f"{f.torch_cuda_version}: different CUDA majors", fix_cuda_segops(f, f.torch_cuda_version))]
    return []


def check_cudatoolkit(f: Facts) -> list[Finding]:
    if not f.cudatoolkit:
        return []
    return [Finding(WARNING, "cudatoolkit", f"{f.conda_prefix or 'the active environment'} has cudatoolkit {f.cudatoolkit}: the "
                                            f"pre-CUDA-12 conda package (CUDA <= {CUDATOOLKIT_LAST}). No pytorch >= 2.10 build uses it; "
                                            "CUDA 12 and 13 come as cuda-version + cuda-* packages",
                    f"conda remove -p {f.conda_prefix or '$CONDA_PREFIX'} cudatoolkit, then install \"cuda-version={SUGGESTED_CUDA}\" and the "
                    f"CUDA build: {fix_cuda_segops(f, SUGGESTED_CUDA)}   (or recreate the environment from environments/cuda-*.yml)")]
