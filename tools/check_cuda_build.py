#!/usr/bin/env python3
"""Compile-and-link check of the CUDA variant without a GPU, and what the built library holds.

    python tools/check_cuda_build.py                       # archs 75-real;90-real, checks, sizes, times
    python tools/check_cuda_build.py --archs default       # the default list of cmake/cuda_architectures.txt
    python tools/check_cuda_build.py --inspect path/_C.so --archs "75-real;90-real"   # no build
    python tools/check_cuda_build.py --compare-compression # also build with --compress-mode=none
    python tools/check_cuda_build.py sizes                 # library size per arch list -> benchmarks/results/

Builds torch_segops with TORCH_SEGOPS_WITH_CUDA=ON against the installed (CPU) torch headers in a
temporary directory (tools/cuda_build.py), then checks the library: every architecture of the configured
list is in the fatbin (SASS for "NN-real", PTX for "NN-virtual", both for "NN"), the fatbin entries are
compressed (both read by cuobjdump, tools/cuda_fatbin.py), and the only undefined symbols are the torch
stable C shim, the CUDA runtime and the C/C++ runtime (tools/cuda_linkage.py). ptxas's resources per kernel
come from the build's log (tools/ptxas_resources.py), the size table from tools/cuda_sizes.py.
Exit status 1 when a check fails, 2 when nvcc is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

if __package__ in (None, ""):  # run as a script (python tools/check_cuda_build.py): the tools package from the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tools.cuda_build import build  # noqa: E402
from tools.cuda_fatbin import check_fatbin, read_fatbin  # noqa: E402
from tools.cuda_linkage import check_needed, check_symbols, needed_libraries  # noqa: E402
from tools.cuda_sizes import SIZE_CONFIGS, library_sizes, sizes_command  # noqa: E402
from tools.cuda_toolchain import CI_ARCHS, REPO, default_archs, find_nvcc, nvcc_version  # noqa: E402
from tools.ptxas_resources import KernelResources, resource_usage, resources_markdown  # noqa: E402


def inspect(path: str, archs: str) -> dict:
    """Everything the checks report about a built library."""
    try:
        entries = read_fatbin(path)
        problems = check_fatbin(path, archs, entries)
    except RuntimeError as e:
        entries, problems = [], [f"fatbin not read: {e}"]
    problems += check_symbols(path) + check_needed(path)
    sizes = library_sizes(path, entries)
    return {
        "library": path,
        "archs": archs,
        "size_bytes": sizes["size_bytes"],
        "fatbin_bytes": sizes["fatbin_bytes"],
        "entries": [e.__dict__ for e in entries],
        "needed": needed_libraries(path),
        "problems": problems,
    }


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", nargs="?", choices=("check", "sizes"), default="check",
                   help="check (default): build and check one arch list; sizes: library size per arch list")
    p.add_argument("--out", help="sizes: the markdown file (default "
                                 "benchmarks/results/cuda-library-size-<date>.md)")
    p.add_argument("--configs", nargs="+", metavar="ARCHS:COMPRESS",
                   help="sizes: what to build, e.g. '90-real:size' 'default:none' (default: "
                        + " ".join(f"'{a}:{c}'" for a, c in SIZE_CONFIGS) + ")")
    p.add_argument("--archs", default=CI_ARCHS,
                   help=f"CMake CUDA architecture list, or 'default' for this nvcc's row (default {CI_ARCHS})")
    p.add_argument("--build-dir", help="build here (kept) instead of a temporary directory")
    p.add_argument("--inspect", metavar="SO", help="only inspect an existing library (no build)")
    p.add_argument("--compare-compression", action="store_true",
                   help="also build with TORCH_SEGOPS_CUDA_COMPRESS=none and report both sizes")
    p.add_argument("--json", metavar="FILE", help="write the report as JSON")
    p.add_argument("--resources", metavar="FILE", help="write ptxas's resources per kernel (registers, stack frame, "
                                                        "spills, shared memory) as a markdown table")
    args = p.parse_args(argv)

    nvcc = find_nvcc()
    if args.command == "sizes":
        if not nvcc:
            print("nvcc not found (set CUDACXX or CUDA_HOME)", file=sys.stderr)
            return 2
        import datetime
        out = args.out or os.path.join(REPO, "benchmarks", "results",
                                       f"cuda-library-size-{datetime.date.today().isoformat()}.md")
        configs = [tuple(c.rsplit(":", 1)) for c in args.configs] if args.configs else SIZE_CONFIGS
        return sizes_command(out, nvcc, configs)
    archs = args.archs
    if archs == "default":
        if not nvcc:
            print("nvcc not found", file=sys.stderr)
            return 2
        archs = default_archs(nvcc_version(nvcc)) or ""
    if args.inspect:
        report = inspect(args.inspect, archs)
    else:
        if not nvcc:
            print("SKIP: nvcc not found (set CUDACXX or CUDA_HOME); nothing was checked", file=sys.stderr)
            return 2
        print(f"nvcc {nvcc_version(nvcc)} ({nvcc}); archs {archs}", flush=True)
        with tempfile.TemporaryDirectory(prefix="segops-cuda-") as tmp:
            bdir = args.build_dir or os.path.join(tmp, "build")
            b = build(bdir, archs, nvcc)
            report = inspect(b.library, archs)
            report.update(configure_s=round(b.configure_s, 1), build_s=round(b.build_s, 1),
                          cuda_compile_s=round(b.cuda_compile_s, 1) if b.cuda_compile_s else None,
                          resources=[r.__dict__ for r in resource_usage(b.log)])
            if args.compare_compression:
                nb = build(os.path.join(tmp, "build-uncompressed"), archs, nvcc,
                           extra=["-DTORCH_SEGOPS_CUDA_COMPRESS=none"])
                sizes = library_sizes(nb.library)
                report["uncompressed_size_bytes"] = sizes["size_bytes"]
                report["uncompressed_fatbin_bytes"] = sizes["fatbin_bytes"]
    print(f"library: {report['library']}  size {_mib(report['size_bytes'])}, fatbin {_mib(report['fatbin_bytes'])}")
    if report.get("resources"):
        res = [KernelResources(**r) for r in report["resources"]]
        local = [r for r in res if r.stack or r.spill_stores or r.spill_loads]
        print(f"ptxas: {len(res)} kernels; {len(local)} use local memory (stack frame / spills, bytes per thread):")
        for r in sorted(local, key=lambda r: (-r.spill_stores, -r.stack, r.arch))[:12]:
            print(f"  sm_{r.arch} {r.kernel[:110]}: {r.registers} regs, stack {r.stack}, spills {r.spill_stores}/{r.spill_loads}")
        if args.resources:
            with open(args.resources, "w") as fh:
                fh.write(resources_markdown(res))
    if "build_s" in report:
        print(f"configure {report['configure_s']} s, build {report['build_s']} s"
              + (f" (CUDA source alone {report['cuda_compile_s']} s)" if report.get("cuda_compile_s") else ""))
    if "uncompressed_size_bytes" in report:
        print(f"without fatbin compression: size {_mib(report['uncompressed_size_bytes'])}, "
              f"fatbin {_mib(report['uncompressed_fatbin_bytes'])}")
    for e in report["entries"]:
        print(f"  {e['kind']:3s} {e['arch']:4d}  {e['uncompressed']:>9d} bytes uncompressed"
              + ("" if e["compressed"] else " (not compressed)"))
    print(f"NEEDED: {', '.join(report['needed'])}")
    for prob in report["problems"]:
        print(f"PROBLEM: {prob}")
    print("OK" if not report["problems"] else f"{len(report['problems'])} problem(s)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    return 0 if not report["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
