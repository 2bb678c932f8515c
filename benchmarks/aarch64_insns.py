#!/usr/bin/env python3
"""aarch64 instructions per element of the CPU kernels, library against plain loops, GCC and clang (issue #39).

    python benchmarks/aarch64_insns.py                          # every case, GCC and clang: a markdown table
    python benchmarks/aarch64_insns.py --quick --compilers gcc  # fewer cases, smaller sizes
    python benchmarks/aarch64_insns.py --cases sum1,max64 --json out.json --markdown out.md

benchmarks/aarch64_insns.cpp (the driver: the library's kernel code called on float arrays, and the same
results as plain scalar loops that the compiler may vectorise; it checks that the two agree) is
cross-compiled at -O3 (the library's flags: -fno-math-errno -fno-trapping-math, SEGOPS_CPU_ISA=baseline,
so Highway's static target is NEON) and linked -static, with Debian's aarch64-linux-gnu-g++ and with
clang++ --target=aarch64-linux-gnu (through the GCC cross toolchain's headers, libraries and linker), and run
under qemu-aarch64 (Debian's qemu-user; -cpu neoverse-n1 unless --cpu says otherwise: it only picks glibc's
memcpy/memset variants).

Counting: qemu-user has no instruction counter (Debian's qemu 7.2 takes TCG plugins, but ships none and
no plugin header). It logs `-d in_asm` (each translation block's guest instructions, once, when it is
translated) and `-d exec` with `nochain` (a line per execution of a block: chained blocks would skip it);
the instructions executed are the sum over executed blocks of their length. The log streams through a pipe
and is never stored. `--method singlestep` counts instead the executed blocks of one instruction each
(`-singlestep`: about 5x more log), the cross-check used in the validation below.

Instructions per element: the driver runs the chosen variant `reps` times after filling its inputs and
before running the other variant and the check, so cost(S) = count(S segments, reps=2) - count(S, reps=1)
is one call of the kernel alone (start-up, allocation, filling, the check cancel), and
ipe = (cost(2 S) - cost(S)) / (elements(2 S) - elements(S)) leaves out the call's fixed cost as well. An
element is one input value (rows x features) for the reductions and softmax, one output value for gather.
Counts are exact and deterministic (fixed seed), so one run per point suffices.

Validation (before the cases, unless --no-validate): segops_tiny_loop, a serial hash of one element per
iteration that is neither unrolled nor vectorised, is disassembled (objdump) and its loop's instructions
counted; the same difference method must give exactly that many per iteration, with both counting methods.

Target (issue #39): each compiler's library code within 1.25x of the best of the four (library and plain,
GCC and clang) per case.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import datetime
import importlib.util
import json
import math
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "benchmarks" / "aarch64_insns.cpp"
KERNELS_CPP = ROOT / "src" / "csrc" / "cpu" / "kernels.cpp"
EXPANSIONS = ("// ---- expansions", "// ---- typed entry points")  # kernels.cpp's section the driver includes

TARGET = 1.25
CXXFLAGS = ["-std=c++17", "-O3", "-fno-math-errno", "-fno-trapping-math", "-DSEGOPS_CPU_ISA=baseline", "-static"]
GCC = "aarch64-linux-gnu-g++"
CLANG_TARGET = "--target=aarch64-linux-gnu"
VARIANTS = ("lib", "plain")


@dataclass(frozen=True)
class Case:
    key: str    # command-line name
    label: str  # table name
    op: str     # the driver's op
    F: int      # features


CASES = [
    Case("sum1", "sum", "sum", 1), Case("sum64", "sum", "sum", 64),
    Case("max1", "max+arg", "max", 1), Case("max16", "max+arg", "max", 16), Case("max64", "max+arg", "max", 64),
    Case("min64", "min+arg", "min", 64),
    Case("lse16", "logsumexp", "lse", 16), Case("lse64", "logsumexp", "lse", 64),
    Case("softmax16", "softmax", "softmax", 16), Case("softmax64", "softmax", "softmax", 64),
    Case("gather1", "gather", "gather", 1), Case("gather64", "gather", "gather", 64),
]
QUICK_CASES = ["sum1", "max64", "lse16", "gather64"]
ELEMENTS, QUICK_ELEMENTS = 16384, 4096  # elements of the smaller size (the larger: twice the segments)


class ToolError(RuntimeError):
    pass


# ---- tools ---------------------------------------------------------------------------------------------

@dataclass
class Tools:
    gcc: str | None
    clang: str | None
    qemu: str | None
    objdump: str | None

    @staticmethod
    def find(clang: str = "clang++") -> "Tools":
        objdump = shutil.which("aarch64-linux-gnu-objdump") or shutil.which("llvm-objdump")
        return Tools(shutil.which(GCC), shutil.which(clang), shutil.which("qemu-aarch64"), objdump)

    def compiler(self, name: str) -> list[str]:
        if name == "gcc":
            if not self.gcc:
                raise ToolError(f"{GCC} not found (Debian: apt-get install g++-aarch64-linux-gnu)")
            return [self.gcc]
        if name == "clang":
            if not self.clang:
                raise ToolError("clang++ not found (Debian: apt-get install clang)")
            return [self.clang, CLANG_TARGET]
        raise ToolError(f"unknown compiler {name!r}: gcc or clang")


def first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    except OSError as e:
        return f"({e})"
    return out.strip().splitlines()[0] if out.strip() else "?"


def torch_include() -> Path:
    """torch's headers (the header-only ones and the stable ABI's declarations), found without importing it."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise ToolError("torch is not importable from this Python: run with the project's venv, "
                        "or pass --torch-include")
    inc = Path(list(spec.submodule_search_locations)[0]) / "include"
    if not (inc / "torch" / "headeronly").is_dir():
        raise ToolError(f"{inc} has no torch/headeronly: a torch >= 2.10 is needed, or pass --torch-include")
    return inc


def hwy_include(given: str | None = None) -> Path:
    """The folder holding hwy/highway.h. Highway's headers do not depend on the architecture, so the host's
    (Debian's libhwy-dev) serve the aarch64 compile; only hwy/ is put on the include path (never /usr/include)."""
    dirs = [given] if given else [os.environ.get("CONDA_PREFIX", "") + "/include", "/usr/include", "/usr/local/include"]
    for d in dirs:
        if d and (Path(d) / "hwy" / "highway.h").is_file():
            return Path(d)
    raise ToolError("Google Highway's headers (hwy/highway.h) not found (Debian: apt-get install libhwy-dev), "
                    "or pass --hwy-include")


def hwy_version(inc: Path) -> str:
    text = (inc / "hwy" / "highway.h").read_text()
    parts = [re.search(rf"#define HWY_{k} (\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else "?"


# ---- build ---------------------------------------------------------------------------------------------

def write_expansions(build_dir: Path) -> None:
    """kernels.cpp's expansions (expand_csr_rows, expand_csr, softmax_rows: its anonymous namespace, next to code
    that needs the torch stable ABI) into kernels_expansions.inc, which the driver includes."""
    text = KERNELS_CPP.read_text()
    a, b = text.find(EXPANSIONS[0]), text.find(EXPANSIONS[1])
    if a < 0 or b < a:
        raise ToolError(f"{KERNELS_CPP.relative_to(ROOT)} no longer has the section between {EXPANSIONS[0]!r} and "
                        f"{EXPANSIONS[1]!r} that benchmarks/aarch64_insns.cpp includes (gather and softmax): "
                        "update EXPANSIONS in benchmarks/aarch64_insns.py and the driver")
    (build_dir / "kernels_expansions.inc").write_text(f"// copied from {KERNELS_CPP.relative_to(ROOT)} by "
                                                      f"benchmarks/aarch64_insns.py\n" + text[a:b])


def build(tools: Tools, compiler: str, build_dir: Path, torch_inc: Path, hwy_inc: Path) -> tuple[Path, list[str]]:
    """Cross-compiles the driver with `compiler` (gcc, clang); returns the binary and its command."""
    build_dir.mkdir(parents=True, exist_ok=True)
    write_expansions(build_dir)
    inc = build_dir / "include"
    inc.mkdir(exist_ok=True)
    link = inc / "hwy"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(hwy_inc / "hwy")
    out = build_dir / f"aarch64_insns_{compiler}"
    cmd = tools.compiler(compiler) + CXXFLAGS + [f"-I{ROOT / 'src' / 'csrc'}", f"-I{inc}", f"-I{build_dir}",
                                                   f"-I{torch_inc}", str(DRIVER), "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise ToolError(f"the {compiler} build failed ({shlex.join(cmd)}):\n{r.stderr[-4000:]}")
    return out, cmd


# ---- counting ------------------------------------------------------------------------------------------

_IN_BLOCK = re.compile(rb"^IN: ?([^\n]*)\n((?:0x[0-9a-f]+:[^\n]*\n)+)", re.M)


@dataclass
class Count:
    total: int                                      # instructions executed
    stdout: str
    blocks: dict = field(default_factory=dict)      # method "tb": block pc -> executions
    listing: dict = field(default_factory=dict)     # method "tb": block pc -> (symbol, its in_asm lines)


def count_instructions(qemu: str, binary: Path, args: list[str], cpu: str = "neoverse-n1",
                       method: str = "tb") -> Count:
    """Guest instructions executed by `binary args` under qemu-aarch64, and the program's stdout.

    method "tb": -d in_asm,exec,nochain; each executed block's length from its in_asm listing.
    method "singlestep": -singlestep -d exec,nochain; one line per executed instruction."""
    items = "in_asm,exec,nochain" if method == "tb" else "exec,nochain"
    rfd, wfd = os.pipe()
    cmd = [qemu, "-cpu", cpu] + (["-singlestep"] if method == "singlestep" else []) + \
          ["-d", items, "-D", f"/dev/fd/{wfd}", str(binary), *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, pass_fds=(wfd,))
        finally:
            os.close(wfd)
        execs: collections.Counter = collections.Counter()  # "Trace" line -> executions
        listing: dict[int, tuple[bytes, bytes]] = {}
        conflicts: set[int] = set()
        singles = 0

        def take(part: bytes) -> None:
            nonlocal singles
            if method == "singlestep":
                singles += part.count(b"Trace ")
                return
            for m in _IN_BLOCK.finditer(part):
                body = m.group(2)
                pc = int(body[2:body.index(b":")], 16)
                if pc in listing and listing[pc][1].count(b"\n") != body.count(b"\n"):
                    conflicts.add(pc)
                listing[pc] = (m.group(1), body)
            execs.update(part.split(b"\n"))

        carry = b""
        with os.fdopen(rfd, "rb", buffering=0) as log:
            while chunk := log.read(1 << 22):
                buf = carry + chunk
                cut = buf.rfind(b"\nTrace ")  # an in_asm block is always followed by a Trace line
                if cut < 0:
                    carry = buf
                    continue
                take(buf[:cut + 1])
                carry = buf[cut + 1:]
        take(carry)
        rc = proc.wait()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if rc != 0:
        raise ToolError(f"{shlex.join(cmd)} exited with {rc}:\n{stdout[-2000:]}{stderr[-2000:]}")
    if method == "singlestep":
        return Count(singles, stdout)
    if conflicts:
        raise ToolError(f"blocks at {', '.join(hex(pc) for pc in sorted(conflicts)[:5])} were translated again with "
                        "another length: rerun with --method singlestep")
    blocks: collections.Counter = collections.Counter()
    for line, k in execs.items():
        if line.startswith(b"Trace "):
            blocks[int(line.split(b"[", 1)[1].split(b"/")[1], 16)] += k
    missing = [pc for pc in blocks if pc not in listing]
    if missing:
        raise ToolError(f"executed block at {missing[0]:#x} has no in_asm listing")
    total = sum(k * listing[pc][1].count(b"\n") for pc, k in blocks.items())
    return Count(total, stdout, dict(blocks), {pc: (listing[pc][0].decode(errors="replace"),
                                                    listing[pc][1].decode(errors="replace").splitlines())
                                               for pc in blocks})


def per_element(qemu: str, binary: Path, op: str, variant: str, S: int, L: int, F: int, cpu: str,
                method: str = "tb") -> tuple[float, dict]:
    """Instructions per element of one variant by the two-size, two-reps difference; checks the driver's 'ok'."""
    counts = {}
    for s in (S, 2 * S):
        for reps in (1, 2):
            c = count_instructions(qemu, binary, [op, variant, str(s), str(L), str(F), str(reps)], cpu, method)
            if not c.stdout.rstrip().endswith(" ok"):
                raise ToolError(f"driver output without 'ok': {c.stdout!r}")
            counts[(s, reps)] = c.total
    cost1, cost2 = counts[(S, 2)] - counts[(S, 1)], counts[(2 * S, 2)] - counts[(2 * S, 1)]
    elements = S * L * F  # the larger size has S more segments
    ipe = (cost2 - cost1) / elements
    return ipe, {"counts": {f"S={s},reps={r}": n for (s, r), n in counts.items()}, "call_S": cost1,
                 "call_2S": cost2, "elements_per_S": elements}


def profile(qemu: str, binary: Path, op: str, variant: str, S: int, L: int, F: int, cpu: str, top: int = 8) -> str:
    """Where one call's instructions go: the blocks that one more rep executes (count(reps=2) - count(reps=1) per
    block), the heaviest first, with their instructions per element and their in_asm listing."""
    runs = [count_instructions(qemu, binary, [op, variant, str(S), str(L), str(F), str(r)], cpu) for r in (1, 2)]
    elements = S * L * F
    per_block = {pc: (runs[1].blocks[pc] - runs[0].blocks.get(pc, 0)) * len(runs[1].listing[pc][1])
                 for pc in runs[1].blocks}
    total = sum(per_block.values())
    lines = [f"{op} {variant} S={S} L={L} F={F}: {total / elements:.3f} instructions per element in one call "
             f"(with its fixed cost); the {top} heaviest blocks:"]
    for pc, n in sorted(per_block.items(), key=lambda kv: -kv[1])[:top]:
        sym, body = runs[1].listing[pc]
        execs = runs[1].blocks[pc] - runs[0].blocks.get(pc, 0)
        lines.append(f"\n{pc:#x} {sym}: {n / elements:.3f} per element ({100 * n / total:.0f}%), "
                     f"{len(body)} instructions x {execs} executions")
        lines += ["    " + b for b in body]
    return "\n".join(lines)


# ---- validation: a loop of known length ----------------------------------------------------------------

BRANCHES = re.compile(r"^(b\.\w+|cbn?z|tbn?z)$")


def disassemble(objdump: str, binary: Path, symbol: str) -> list[tuple[int, str, str]]:
    """(address, mnemonic, operands) of `symbol`'s instructions."""
    r = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(binary)], capture_output=True, text=True, check=True)
    m = re.search(rf"^[0-9a-f]+ <{re.escape(symbol)}>:\n(.*?)(?:\n\n|\Z)", r.stdout, re.M | re.S)
    if not m:
        raise ToolError(f"{symbol} not found in the disassembly of {binary}")
    insns = []
    for line in m.group(1).splitlines():
        f = line.strip().split(None, 2)
        if len(f) >= 2 and f[0].endswith(":"):
            insns.append((int(f[0][:-1], 16), f[1], f[2] if len(f) > 2 else ""))
    return insns


def loop_length(insns: list[tuple[int, str, str]]) -> tuple[int, list[str]]:
    """The instructions of the function's one loop: from a backward conditional branch's target to the branch."""
    start, end = insns[0][0], insns[-1][0]
    loops = []
    for addr, mnem, ops in insns:
        if BRANCHES.match(mnem):
            target = int(ops.split(",")[-1].split()[0], 16)
            if start <= target <= addr:
                loops.append((target, addr))
    if len(loops) != 1:
        raise ToolError(f"expected one backward branch, found {len(loops)} ({start:#x}..{end:#x})")
    lo, hi = loops[0]
    body = [f"{m} {o}".strip() for a, m, o in insns if lo <= a <= hi]
    return len(body), body


def validate(tools: Tools, binary: Path, cpu: str, n: int = 2000) -> dict:
    """segops_tiny_loop's instructions per iteration, measured both ways, against its disassembly."""
    length, body = loop_length(disassemble(tools.objdump, binary, "segops_tiny_loop"))
    got = {}
    for method in ("tb", "singlestep"):
        c = {}
        for size in (n, 2 * n):
            for reps in (1, 2):
                run = ["tiny", "lib", str(size), "0", "1", str(reps)]
                c[(size, reps)] = count_instructions(tools.qemu, binary, run, cpu, method).total
        got[method] = ((c[(2 * n, 2)] - c[(2 * n, 1)]) - (c[(n, 2)] - c[(n, 1)])) / n
    ok = all(v == length for v in got.values())
    return {"loop": body, "disassembly": length, "measured": got, "ok": ok}


# ---- the cases -----------------------------------------------------------------------------------------

@dataclass
class Measured:
    case: Case
    L: int
    S: int
    ipe: dict = field(default_factory=dict)     # (variant, compiler) -> instructions per element
    detail: dict = field(default_factory=dict)  # the raw counts

    def best(self) -> float:
        return min(self.ipe.values())

    def ratios(self, compilers: list[str]) -> dict:
        b = self.best()
        return {c: self.ipe[("lib", c)] / b for c in compilers if ("lib", c) in self.ipe}

    def meets(self, compilers: list[str]) -> bool:
        return all(r <= TARGET for r in self.ratios(compilers).values())


def segments_for(elements: int, L: int, F: int) -> int:
    return max(1, math.ceil(elements / (L * F)))


def measure_cases(tools: Tools, binaries: dict, cases: list[Case], L: int, elements: int, cpu: str, method: str,
                  jobs: int = 1, log=None) -> list[Measured]:
    results = [Measured(c, L, segments_for(elements, L, c.F)) for c in cases]
    work = [(m, v, comp) for m in results for comp in binaries for v in VARIANTS]

    def one(item):
        m, v, comp = item
        return item, per_element(tools.qemu, binaries[comp], m.case.op, v, m.S, L, m.case.F, cpu, method)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for (m, v, comp), (ipe, detail) in pool.map(one, work):
            if not (math.isfinite(ipe) and ipe > 0):
                raise ToolError(f"{m.case.key} {v} {comp}: instructions per element {ipe} (counts {detail})")
            m.ipe[(v, comp)] = ipe
            m.detail[f"{v}/{comp}"] = detail
            if log:
                log(f"{m.case.key:10} {v:5} {comp:5} {ipe:8.3f} instructions per element")
    return results


def table(results: list[Measured], compilers: list[str]) -> str:
    cols = [f"{v} {c}" for v in VARIANTS for c in compilers]
    head = ["case", "F", "rows/segment"] + cols + [f"lib {c} / best" for c in compilers] + [f"within {TARGET}x"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in results:
        best = m.best()
        vals = []
        for v in VARIANTS:
            for c in compilers:
                x = m.ipe[(v, c)]
                vals.append(f"**{x:.2f}**" if x == best else f"{x:.2f}")
        ratios = m.ratios(compilers)
        lines.append("| " + " | ".join([m.case.label, str(m.case.F), str(m.L)] + vals +
                                        [f"{ratios[c]:.2f}" for c in compilers] +
                                        ["yes" if m.meets(compilers) else "**no**"]) + " |")
    return "\n".join(lines)


def environment(tools: Tools, compilers: list[str], hwy_inc: Path, cpu: str) -> dict:
    env = {"date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {platform.node()}",
           "cpu_model": _cpu_model(), "highway": f"{hwy_version(hwy_inc)} ({hwy_inc / 'hwy'})",
           "qemu": first_line([tools.qemu, "--version"]) if tools.qemu else None, "qemu_cpu": cpu}
    if "gcc" in compilers:
        env["gcc"] = first_line([tools.gcc, "--version"])
    if "clang" in compilers:
        env["clang"] = first_line([tools.clang, "--version"])
    return env


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"cases {','.join(QUICK_CASES)} at {QUICK_ELEMENTS} elements")
    ap.add_argument("--compilers", default="gcc,clang", help="gcc, clang or both (default)")
    ap.add_argument("--cases", help=f"comma-separated, of: {','.join(c.key for c in CASES)}")
    ap.add_argument("--rows", type=int, default=10, help="rows per segment (default 10)")
    ap.add_argument("--elements", type=int,
                    help=f"elements of the smaller size (default {ELEMENTS}; quick {QUICK_ELEMENTS})")
    ap.add_argument("--cpu", default="neoverse-n1", help="qemu's -cpu (default neoverse-n1)")
    ap.add_argument("--method", choices=["tb", "singlestep"], default="tb", help="how qemu counts (see above)")
    ap.add_argument("--jobs", type=int, default=1, help="qemu runs at a time (default 1)")
    ap.add_argument("--build-dir", help="where the binaries go (kept; default a temporary folder)")
    ap.add_argument("--torch-include", help="torch's include folder (default: the importable torch's)")
    ap.add_argument("--hwy-include", help="the folder holding hwy/highway.h")
    ap.add_argument("--clang", default="clang++", help="the clang++ to use")
    ap.add_argument("--no-validate", action="store_true", help="skip the tiny loop's check of the counting")
    ap.add_argument("--profile", metavar="CASE:VARIANT:COMPILER",
                    help="instead of the table: one variant's heaviest blocks (e.g. max1:lib:gcc), at the smaller size")
    ap.add_argument("--json", help="write the results as JSON here")
    ap.add_argument("--markdown", help="write the environment, the command and the table here")
    args = ap.parse_args(argv)

    compilers = [c for c in args.compilers.split(",") if c]
    keys = args.cases.split(",") if args.cases else QUICK_CASES if args.quick else [c.key for c in CASES]
    by_key = {c.key: c for c in CASES}
    if args.profile:
        parts = args.profile.split(":")
        if len(parts) != 3 or parts[0] not in by_key or parts[1] not in VARIANTS or parts[2] not in ("gcc", "clang"):
            ap.error(f"--profile {args.profile}: CASE:VARIANT:COMPILER, with CASE one of {', '.join(by_key)}, "
                     "VARIANT lib or plain, COMPILER gcc or clang")
        compilers = [parts[2]]
    unknown = [k for k in keys if k not in by_key]
    if unknown:
        ap.error(f"unknown cases {unknown}: {', '.join(by_key)}")
    elements = args.elements or (QUICK_ELEMENTS if args.quick else ELEMENTS)
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731

    tools = Tools.find(args.clang)
    if not tools.qemu:
        raise ToolError("qemu-aarch64 not found (Debian: apt-get install qemu-user)")
    if not tools.objdump:
        raise ToolError("no aarch64 objdump (aarch64-linux-gnu-objdump or llvm-objdump)")
    torch_inc = Path(args.torch_include) if args.torch_include else torch_include()
    hwy_inc = hwy_include(args.hwy_include)

    tmp = None if args.build_dir else tempfile.TemporaryDirectory(prefix="aarch64_insns_")
    build_dir = Path(args.build_dir or tmp.name)
    try:
        binaries, commands = {}, {}
        for comp in compilers:  # one compile at a time
            log(f"building with {comp} ...")
            binaries[comp], commands[comp] = build(tools, comp, build_dir, torch_inc, hwy_inc)
        if args.profile:
            key, variant, comp = args.profile.split(":")
            c = by_key[key]
            print(profile(tools.qemu, binaries[comp], c.op, variant, segments_for(elements, args.rows, c.F), args.rows,
                          c.F, args.cpu))
            return 0
        validation = {}
        if not args.no_validate:
            for comp, binary in binaries.items():
                validation[comp] = v = validate(tools, binary, args.cpu)
                log(f"validation ({comp}): segops_tiny_loop's loop has {v['disassembly']} instructions "
                    f"({'; '.join(v['loop'])}); measured per iteration: {v['measured']}")
                if not v["ok"]:
                    raise ToolError(f"the counting method failed its check on {comp}'s tiny loop: {v}")
        results = measure_cases(tools, binaries, [by_key[k] for k in keys], args.rows, elements, args.cpu,
                                args.method, args.jobs, log)
    finally:
        if tmp is not None:
            tmp.cleanup()

    env = environment(tools, compilers, hwy_inc, args.cpu)
    command = "python benchmarks/aarch64_insns.py" + ("" if argv is None and len(sys.argv) == 1 else
                                                      " " + shlex.join(sys.argv[1:] if argv is None else argv))
    md = table(results, compilers)
    print(md)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "environment": env, "command": command, "build": {c: shlex.join(v) for c, v in commands.items()},
            "method": args.method, "elements": elements, "validation": validation,
            "results": [{"case": m.case.key, "label": m.case.label, "F": m.case.F, "rows": m.L, "segments": m.S,
                         "ipe": {f"{v}/{c}": x for (v, c), x in m.ipe.items()},
                         "lib_over_best": m.ratios(compilers), "meets": m.meets(compilers), "detail": m.detail}
                        for m in results]}, indent=1) + "\n")
    if args.markdown:
        head = [f"- {k}: {v}" for k, v in env.items()]
        head.append(f"- command: `{command}`")
        head += [f"- build ({c}, paths under the repository shown relative to it): "
                 f"`{shlex.join(v).replace(str(ROOT) + '/', '')}`" for c, v in commands.items()]
        head.append(f"- counting: `{args.method}`; segments S = elements / (rows x F) and 2 S, reps 1 and 2, "
                    f"{elements} elements at the smaller size")
        for c, v in validation.items():
            head.append(f"- validation ({c}): tiny loop of {v['disassembly']} instructions in the disassembly, "
                        f"measured {v['measured']}")
        Path(args.markdown).write_text("\n".join(head) + "\n\nInstructions per element (bold: the best of the row)\n\n"
                                       + md + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ToolError as e:
        print(f"aarch64_insns: {e}", file=sys.stderr)
        sys.exit(1)
