"""Resources per kernel as ptxas reports them (`ptxas -v`, `nvcc --resource-usage`): registers, stack frame,
spills and shared memory, per kernel and architecture. The one parser of that output, used by
tools/check_cuda_build.py (the CUDA build with TORCH_SEGOPS_CUDA_RESOURCE_USAGE=ON) and by
research/gpu_model/model.py (an sm_90 cubin)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass


@dataclass
class KernelResources:
    arch: int
    kernel: str          # mangled as ptxas prints it; resource_usage() demangles it to the kernel's functor
    registers: int
    stack: int           # bytes stack frame per thread (local memory)
    spill_stores: int    # bytes per thread
    spill_loads: int
    smem: int            # bytes of static shared memory per block


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(?:sm|compute)_(\d+)\w?'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(log: str) -> list[KernelResources]:
    """One row per entry function and architecture, in the order ptxas compiled them. The stack line follows
    "Function properties for NAME": it counts for the entry NAME as last compiled; the properties of device
    functions that are not entries (non-inlined callees) are skipped."""
    rows: list[KernelResources] = []
    latest: dict[str, KernelResources] = {}
    cur = props = None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            cur = KernelResources(int(m.group(2)), m.group(1), 0, 0, 0, 0, 0)
            rows.append(cur)
            latest[cur.kernel] = cur
            continue
        m = _PROPERTIES.search(line)
        if m:
            props = latest.get(m.group(1))
            continue
        m = _FRAME.search(line)
        if m:
            if props is not None:
                props.stack, props.spill_stores, props.spill_loads = (int(g) for g in m.groups())
            continue
        if cur is not None:
            m = _REGISTERS.search(line)
            if m:
                cur.registers = int(m.group(1))
            m = _SMEM.search(line)
            if m:
                cur.smem = int(m.group(1))
    return rows


def kernel_functor(demangled: str) -> str | None:
    """The functor type of a demangled torch_segops::cuda::run_kernel<F> / run_block_kernel<F> (None for
    another function)."""
    m = re.match(r"void torch_segops::cuda::run_(?:block_)?kernel<(.*)>\(.*\)$", demangled)
    return m.group(1) if m else None


def demangle(names: list[str]) -> list[str]:
    """c++filt of each name (the names unchanged when c++filt is absent)."""
    filt = shutil.which("c++filt")
    if not filt or not names:
        return list(names)
    return subprocess.run([filt], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()


def resource_usage(log: str) -> list[KernelResources]:
    """parse_ptxas() with each kernel named by its functor, namespaces dropped (the whole demangled name for a
    kernel that is not a run_kernel)."""
    rows = parse_ptxas(log)
    for r, d in zip(rows, demangle([r.kernel for r in rows])):
        r.kernel = re.sub(r"torch_segops::(cuda::)?", "", kernel_functor(d) or d).strip()
    return rows


def resources_markdown(rows: list[KernelResources]) -> str:
    lines = ["| arch | kernel | registers | stack frame (B) | spill stores / loads (B) | shared (B) |",
             "|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r.arch, -r.stack - r.spill_stores, r.kernel)):
        lines.append(f"| sm_{r.arch} | `{r.kernel}` | {r.registers} | {r.stack} | {r.spill_stores} / {r.spill_loads} "
                     f"| {r.smem} |")
    return "\n".join(lines) + "\n"
