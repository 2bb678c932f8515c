"""Diagnose a torch-segops installation: ``python -m torch_segops.doctor [--json]``.

The doctor reports what a user needs to fix an install: the torch_segops binary (variant, CUDA version, GPU
architectures, whether it is the file its installer recorded), the torch build, the GPUs and the NVIDIA driver,
and every mismatch between them with the command that fixes it. Exit status 0: no problem found; 1: an error.

One seam per module: ``records`` (Facts, GPU, Finding, the constants copied from ``data/compat.yaml``),
``install`` (pip's RECORD, conda's conda-meta, the channels), ``probes`` (``gather_facts()``: the machine into a
Facts record, never raising), ``child`` (the process that imports torch and loads the library: a damaged one
kills it, not the doctor), ``checks`` (pure functions ``Facts -> list[Finding]``, tested by
feeding facts), ``report`` (``diagnose``, the text report, the command line). The doctor never loads the library
in its own process, and checks its sha256 against the install record before the child does; ``import
torch_segops`` checks only the ELF headers (hashing a CUDA build's library costs about 0.5 s per import).
"""

from __future__ import annotations

from .probes import gather_facts
from .records import ERROR, GPU, INFO, OK, WARNING, Facts, Finding
from .report import CHECKS, diagnose, has_errors, main, render

__all__ = ["CHECKS", "ERROR", "Facts", "Finding", "GPU", "INFO", "OK", "WARNING", "diagnose", "gather_facts", "has_errors",
           "main", "render"]
