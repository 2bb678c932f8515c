"""Diagnose a torch-segops installation: ``python -m torch_segops.doctor [--json]``.

The doctor reports what a user needs to fix an install: the torch_segops binary that is installed
(variant, CUDA version, GPU architectures), the torch build, the GPUs and the NVIDIA driver, and
every mismatch between them with the concrete command that fixes it. Exit status 0 means no
problem was found, 1 means at least one error.

Structure, one seam per module: ``records`` (Facts, GPU, Finding, the compatibility constants
copied from ``data/compat.yaml``), ``probes`` (``gather_facts()`` reads the machine into a Facts
record, never raising: each probe records its own failure), ``checks`` and ``gpu_checks`` (pure
functions ``Facts -> list[Finding]``, tested by feeding facts; ``archs`` and ``fixes`` are their
helpers), ``files`` (reading files that may be FIFOs, devices or truncated shared objects; also used
by the library loader), ``report`` (the text report and the command line). Everything is re-exported here. The
doctor must work when the compiled library does not load, so nothing in it imports torch or
``torch_segops._library`` at module level.
"""

from __future__ import annotations

from .archs import ArchEntry, arch_support, parse_arch
from .checks import CHECKS, check_cudatoolkit, check_library, check_torch, check_variant, diagnose, has_errors
from .files import NotARegularFile, elf_problem, find_in_file, read_regular
from .fixes import fix_cuda_segops, fix_cuda_torch
from .gpu_checks import check_arch, check_driver, check_gpu_vs_cuda, check_torch_vs_gpu
from .probes import (describe_torch_import_error, find_cudatoolkit, gather_facts, parse_nvidia_smi, parse_nvrm_version,
                     read_build_info_from_file)
from .records import (CUDATOOLKIT, CUDATOOLKIT_LAST, ERROR, GPU, INFO, MIN_DRIVER_LINUX, MIN_TORCH, OK, OLDEST_ARCH,
                      SUGGESTED_CUDA, WARNING, Facts, Finding, cuda_major, parse_version, version_at_least)
from .report import main, render

__all__ = [
    "ArchEntry", "CHECKS", "CUDATOOLKIT", "CUDATOOLKIT_LAST", "ERROR", "Facts", "Finding", "GPU", "INFO",
    "MIN_DRIVER_LINUX", "MIN_TORCH", "OK", "OLDEST_ARCH", "SUGGESTED_CUDA", "WARNING", "arch_support",
    "check_arch", "check_cudatoolkit", "check_driver", "check_gpu_vs_cuda", "check_library", "check_torch",
    "check_torch_vs_gpu", "check_variant", "cuda_major", "describe_torch_import_error", "diagnose", "elf_problem",
    "find_cudatoolkit", "find_in_file", "fix_cuda_segops", "fix_cuda_torch", "gather_facts", "has_errors", "main",
    "NotARegularFile", "parse_arch", "parse_nvidia_smi", "parse_nvrm_version", "parse_version", "read_build_info_from_file",
    "read_regular", "render", "version_at_least",
]
