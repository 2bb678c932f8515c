"""Diagnose a torch-segops installation: ``python -m torch_segops.doctor [--json]``, exit status 0: no problem found;
1: an error. Here: the text report (``render``) and the command line (``main``); docs/design.md lists the modules."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from .checks import CHECKS, diagnose
from .probes import gather_facts
from .records import ERROR, GPU, INFO, OK, WARNING, Facts, Finding

__all__ = ["CHECKS", "ERROR", "Facts", "Finding", "GPU", "INFO", "OK", "WARNING", "diagnose", "gather_facts", "has_errors",
           "main", "render"]
TAGS = {ERROR: "ERROR", WARNING: "WARN ", OK: "ok   ", INFO: "info "}


def has_errors(findings: list[Finding]) -> bool:
    return any(x.severity == ERROR for x in findings)


def render(f: Facts, findings: list[Finding]) -> str:
    info, lines = f.build_info or {}, ["torch-segops doctor", ""]
    if info:
        src = "" if f.build_info_source == "loaded" else "  (read from the file, not loaded)"
        lines.append(f"  torch_segops  {info.get('version')}  variant={info.get('variant')}  CUDA={info.get('cuda_version') or '-'}  archs={';'.join(info.get('cuda_archs') or []) or '-'}{src}")
        lines.append(f"                built against torch headers {info.get('torch_headers') or '?'}, stable-ABI target {info.get('torch_target') or '?'}, compiler {info.get('cxx_compiler') or '?'}")
        lines += [f"                CUDA reduction plans {info['cuda_plans']}"] if info.get("cuda_plans") else []
    else:
        lines.append(f"  torch_segops  {f.package_version or '?'} (no build info)")
    lines.append(f"                library {f.library_path or '-'}")
    if f.install:
        lines.append(f"                installed by {f.install['kind']}: {f.install['record']}" + (f", from {f.install['channel']}" if f.install.get("channel") else ""))
    lines.append(f"  torch         {f.torch_version}  build={'cuda ' + f.torch_cuda_version if f.torch_cuda_version else 'cpu'}" + (f"  cuda available={f.torch_cuda_available}" if f.torch_cuda_version else "")
                 if f.torch_version else f"  torch         {'not working' if f.torch_path else 'not importable'} ({f.torch_error})")
    lines.append(f"  python        {f.python}  ({'conda env' if f.in_conda_env else 'not a conda env'}: {sys.prefix})")
    lines += [f"  GPU {g.index}         {g.name}  compute capability {'%d.%d' % tuple(g.capability) if g.capability else '?'}" for g in f.gpus] or [
        f"  GPU           none found{' (' + f.gpu_probe_error + ')' if f.gpu_probe_error else ''}"]
    if f.driver_version or f.driver_cuda_version:
        lines.append(f"  driver        {f.driver_version or '?'}  (supports CUDA {f.driver_cuda_version or '?'})")
    lines += [""] + [f"  [{TAGS.get(x.severity, x.severity)}] {x.message}" + (f"\n          fix: {x.fix}" if x.fix else "") for x in findings]
    n_err, n_warn = (sum(x.severity == s for x in findings) for s in (ERROR, WARNING))
    return "\n".join(lines + ["", "no problems found" if not n_err and not n_warn else f"{n_err} error(s), {n_warn} warning(s)"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="torch-segops-doctor", description="Diagnose a torch-segops installation.")
    p.add_argument("--json", action="store_true", help="print facts and findings as JSON")
    args = p.parse_args(argv)
    facts = gather_facts()
    findings = diagnose(facts)
    if args.json:
        print(json.dumps({"ok": not has_errors(findings), "facts": facts.to_dict(), "findings": [dataclasses.asdict(x) for x in findings]}, indent=2))
    else:
        print(render(facts, findings))
    return 1 if has_errors(findings) else 0
