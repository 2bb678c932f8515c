"""The checks: pure functions ``Facts -> list[Finding]`` (tested by feeding facts), run in order by
``diagnose``. This file holds the install checks (torch, the library, the variant, cudatoolkit);
the GPU and driver checks are in gpu_checks.py."""

from __future__ import annotations

import os
from typing import Callable

from .fixes import _build_cuda, _cuda_tag, _variant, fix_cuda_segops, fix_cuda_torch
from .gpu_checks import check_arch, check_driver, check_gpu_vs_cuda, check_torch_vs_gpu
from .records import (CUDATOOLKIT_LAST, ERROR, INFO, MIN_TORCH, OK, SUGGESTED_CUDA, WARNING, Facts, Finding,
                      cuda_major, version_at_least)


def check_torch(f: Facts) -> list[Finding]:
    if f.torch_version is None:
        # installed but broken (its import raised something other than "No module named 'torch'"): reinstall
        broken = bool(f.torch_error) and "No module named 'torch'" not in f.torch_error
        again = " --force-reinstall" if broken else ""
        fix = f'mamba install{again} "pytorch>={MIN_TORCH}"' if f.in_conda_env else f"pip install{again} 'torch>={MIN_TORCH}'"
        return [Finding(ERROR, "torch-missing", f"torch cannot be imported: {f.torch_error or 'not installed'}", fix)]
    build = f"cuda {f.torch_cuda_version}" if f.torch_cuda_version else "cpu"
    if version_at_least(f.torch_version, MIN_TORCH) is False:
        fix = (
            f'mamba install "pytorch>={MIN_TORCH}"'
            if f.in_conda_env
            else f"pip install --upgrade 'torch>={MIN_TORCH}'" + (f" --index-url https://download.pytorch.org/whl/{_cuda_tag(f.torch_cuda_version)}" if f.torch_cuda_version else "")
        )
        return [
            Finding(
                ERROR,
                "torch-too-old",
                f"torch {f.torch_version} is older than {MIN_TORCH}, the oldest torch whose stable ABI torch_segops targets",
                fix,
            )
        ]
    return [Finding(OK, "torch", f"torch {f.torch_version} ({build} build) >= stable-ABI minimum {MIN_TORCH}")]


def check_library(f: Facts) -> list[Finding]:
    out: list[Finding] = []
    info = f.build_info
    if not f.library_exists:
        fix = "mamba install torch-segops" if f.in_conda_env else "pip install --no-build-isolation .  (or -e . in a source checkout)"
        out.append(Finding(ERROR, "library-missing", f"the compiled library was not found ({f.library_path or 'no path'}): torch_segops is not built or not installed", fix))
        return out
    if f.library_file_problem:  # never handed to the loader: a truncated file would kill it (SIGBUS)
        fix = ("mamba install --force-reinstall torch-segops" if f.in_conda_env
               else "pip install --force-reinstall --no-deps torch-segops  (in a source checkout: pip install --no-build-isolation --force-reinstall .)")
        out.append(Finding(ERROR, "library-damaged", f"the compiled library cannot be loaded: {f.library_file_problem}", fix))
        return out
    if f.library_error and f.torch_version is None:
        return out  # cannot be loaded without torch; "torch-missing" says what to do
    if f.library_error:
        hint = None
        if info and info.get("variant") == "cuda" and not f.torch_cuda_version and f.torch_version:
            hint = "this is a CUDA build of torch_segops and torch is a cpu build; see below"
        elif info and f.torch_version and version_at_least(f.torch_version, info.get("torch_target") or MIN_TORCH) is False:
            hint = "torch is older than the binary's stable-ABI target; see below"
        out.append(
            Finding(
                ERROR,
                "library-load",
                f"loading {f.library_path} failed: {f.library_error}" + (f" ({hint})" if hint else ""),
                None if hint else "reinstall torch_segops for this torch: pip install --no-build-isolation --force-reinstall .  (or mamba install --force-reinstall torch-segops)",
            )
        )
    if info:
        target = info.get("torch_target") or MIN_TORCH
        if f.torch_version and version_at_least(f.torch_version, target) is False:
            out.append(
                Finding(
                    ERROR,
                    "torch-below-binary-target",
                    f"this torch_segops binary targets the stable ABI of torch {target}, but torch is {f.torch_version}",
                    f'mamba install "pytorch>={target}"' if f.in_conda_env else f"pip install --upgrade 'torch>={target}'",
                )
            )
        if not f.library_error:
            archs = ",".join(info.get("cuda_archs") or []) or "-"
            cuda = info.get("cuda_version") or "-"
            out.append(Finding(OK, "library", f"torch_segops {info.get('version')} {info.get('variant')} build loaded (CUDA {cuda}, archs {archs})"))
    return out


ALL_CUDA_PLANS = "short,merge,block"


def check_cuda_plans(f: Facts) -> list[Finding]:
    """TORCH_SEGOPS_CUDA_PLANS: an invalid value makes every CUDA reduction raise; a valid one is reported."""
    plans = (f.build_info or {}).get("cuda_plans") if f.build_info_source == "loaded" else None
    env = os.environ.get("TORCH_SEGOPS_CUDA_PLANS")
    fix = "unset TORCH_SEGOPS_CUDA_PLANS, or set it to a subset of short,merge,block holding short or merge (e.g. merge)"
    if plans is None:
        return [Finding(INFO, "cuda-plans", f"TORCH_SEGOPS_CUDA_PLANS={env} (not checked: the library is not loaded)")] if env else []
    if plans.startswith("invalid:"):
        what = plans[len("invalid:"):].strip()
        if _variant(f) == "cuda":
            return [Finding(ERROR, "cuda-plans-invalid", f"{what}: every CUDA reduction raises this", fix)]
        return [Finding(WARNING, "cuda-plans-invalid", f"{what} (this cpu build has no CUDA kernels and ignores it)", fix)]
    if plans != ALL_CUDA_PLANS:
        return [Finding(INFO, "cuda-plans", f"CUDA reductions restricted to the plans {plans} (TORCH_SEGOPS_CUDA_PLANS or "
                                            "torch_segops.set_cuda_plans; the default is every plan)")]
    return []


def check_variant(f: Facts) -> list[Finding]:
    variant, info = _variant(f), f.build_info
    if info is None or f.torch_version is None:
        return []
    out: list[Finding] = []
    if variant == "cpu" and f.gpus and f.torch_cuda_version:
        out.append(
            Finding(
                ERROR,
                "cpu-segops-with-cuda-torch",
                f"torch_segops is the cpu build, but this machine has a GPU and torch is a CUDA {f.torch_cuda_version} build: CUDA tensors will not be supported",
                fix_cuda_segops(f),
            )
        )
    elif variant == "cpu" and f.torch_cuda_version and not f.gpus:
        out.append(Finding(INFO, "cpu-segops-no-gpu", "torch_segops is the cpu build; torch is a CUDA build but no GPU was found here (fine on a login node)"))
    if variant == "cuda":
        if not f.torch_cuda_version:
            out.append(
                Finding(
                    ERROR,
                    "cuda-segops-with-cpu-torch",
                    f"torch_segops is a CUDA {_build_cuda(f) or '(version unknown)'} build but torch {f.torch_version} is a cpu build",
                    fix_cuda_torch(f, _build_cuda(f) or SUGGESTED_CUDA) + "   or install the cpu build of torch_segops",
                )
            )
        elif cuda_major(f.torch_cuda_version) != cuda_major(_build_cuda(f)):
            out.append(
                Finding(
                    ERROR,
                    "cuda-major-mismatch",
                    f"torch_segops was built with CUDA {_build_cuda(f) or '(version unknown)'} but torch uses CUDA {f.torch_cuda_version}: different CUDA majors",
                    fix_cuda_segops(f, f.torch_cuda_version),
                )
            )
    return out


def check_cudatoolkit(f: Facts) -> list[Finding]:
    if not f.cudatoolkit:
        return []
    prefix = f.conda_prefix or "the active environment"
    return [
        Finding(
            WARNING,
            "cudatoolkit",
            f"{prefix} has cudatoolkit {f.cudatoolkit}: the pre-CUDA-12 conda package (CUDA <= {CUDATOOLKIT_LAST}). "
            "No pytorch >= 2.10 build uses it; CUDA 12 and 13 come as cuda-version + cuda-* packages",
            f"conda remove -p {f.conda_prefix or '$CONDA_PREFIX'} cudatoolkit, then install the CUDA build with its "
            f"toolkit version: conda install -c conda-forge torch-segops \"cuda-version={SUGGESTED_CUDA}\" "
            "(or recreate the environment from environments/cuda-*.yml)",
        )
    ]


CHECKS: list[Callable[[Facts], list[Finding]]] = [check_torch, check_library, check_torch_vs_gpu, check_driver, check_variant, check_gpu_vs_cuda, check_arch, check_cudatoolkit,
                                                   check_cuda_plans]


def diagnose(f: Facts) -> list[Finding]:
    findings: list[Finding] = []
    for check in CHECKS:
        findings.extend(check(f))
    return findings


def has_errors(findings: list[Finding]) -> bool:
    return any(x.severity == ERROR for x in findings)
