#!/usr/bin/env python3
"""Which functions of an x86-64 _C.so hold code beyond the x86-64 baseline (VEX/EVEX, ymm/zmm, mask registers,
BMI, LZCNT, POPCNT, MOVBE), and whether a function the CPU kernel objects share with the rest is one of them.

    python tools/cpu_object_code.py [BUILD_DIR]   # default: the pip build's folder, build/<tag> (its _C.so, objects)

The kernel objects (CMakeLists.txt: kernels.cpp and scatter_kernels.cpp compiled once per target) keep their
own code in an inline namespace per object (isa_avx2::, isa_avx512::, isa_sse4::; cpu/vec_math.h), in the
anonymous namespace of their file (local symbols), or in kernels_<isa>(). The inline functions of the C++
library, torch's and Highway's headers that an object compiles out of line are weak symbols: every object that
uses one emits a copy and the linker keeps one, which the baseline code calls too. It keeps the first copy it
meets; the common sources and the baseline object come first, so the copies kept are baseline code. If that
ever changed (another link order, another linker), a CPU without AVX2 would run AVX code in a shared function
and die with SIGILL: this check fails first. It reads the weak and global functions each object beyond the
baseline defines (nm) and the code the library kept under those names (objdump); exit status 1, and the names,
when one holds an instruction beyond the baseline.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

# Instructions beyond x86-64's baseline (SSE2): AVX/AVX-512 mnemonics (VEX/EVEX: v...), their registers, and
# the scalar extensions the objects' flags enable. Not tzcnt: GCC writes __builtin_ctz as rep bsf, which objdump
# shows as tzcnt and a CPU without BMI runs as bsf (the same result for the nonzero inputs ctz takes).
BEYOND = {"andn", "bextr", "blsi", "blsmsk", "blsr", "bzhi", "mulx", "pdep", "pext", "rorx", "sarx", "shlx", "shrx",
          "lzcnt", "popcnt", "movbe"}
# nm's letters of the functions an object shares with the others (weak, global, unique); lower case t is local
SHARED_KINDS = {"W", "T", "i", "u"}
_FUNC = re.compile(r"^[0-9a-f]+ <(.+)>:$")
_INSN = re.compile(r"^\s+[0-9a-f]+:\s+(\S+)\s*(.*)$")


def beyond_baseline(mnemonic: str, operands: str) -> bool:
    """Whether one instruction (objdump's AT&T syntax) needs more than x86-64's baseline."""
    m = mnemonic.split(".")[0]
    if (m.startswith("v") and m not in ("verr", "verw")) or m in BEYOND:
        return True
    return bool(re.search(r"%[yz]mm\d|%k[0-7]\b", operands))


def functions_beyond_baseline(disassembly: str) -> dict[str, str]:
    """{function: its first instruction beyond the baseline} of `objdump -d -C --no-show-raw-insn` text."""
    found: dict[str, str] = {}
    func = None
    for line in disassembly.splitlines():
        if (f := _FUNC.match(line)) is not None:
            func = f.group(1)
        elif func is not None and func not in found and (i := _INSN.match(line)) is not None:
            if beyond_baseline(i.group(1), i.group(2)):
                found[func] = f"{i.group(1)} {i.group(2)}".strip()
    return found


def shared_functions(obj: str, isa: str) -> set[str]:
    """The functions (mangled names) the object `obj` of kernel set `isa` defines for the linker to share: weak
    or global, outside its own namespace (isa_<isa>, mangled N...isa_avx2...) and its kernels_<isa>()."""
    out = subprocess.run(["nm", "--defined-only", obj], capture_output=True, text=True, check=True).stdout
    own = f"isa_{isa}"
    return {parts[2] for parts in (line.split() for line in out.splitlines())
            if len(parts) == 3 and parts[1] in SHARED_KINDS and own not in parts[2] and f"kernels_{isa}" not in parts[2]}


def kernel_objects(build_dir: Path) -> dict[str, list[str]]:
    """{kernel set: its object files} of the sets beyond the baseline in a CMake build folder."""
    found: dict[str, list[str]] = {}
    for d in sorted(build_dir.glob("CMakeFiles/torch_segops_cpu_*.dir")):
        isa = d.name[len("torch_segops_cpu_"):-len(".dir")]
        if isa != "baseline":
            found[isa] = sorted(str(o) for o in d.rglob("*.o"))
    return found


def disassemble(library: str) -> str:
    return subprocess.run(["objdump", "-d", "--no-show-raw-insn", library], capture_output=True, text=True,
                          check=True).stdout


def check(build_dir: Path) -> tuple[dict[str, str], int, int]:
    """(the shared functions whose kept copy holds code beyond the baseline: {mangled name: instruction}, how
    many shared functions the objects beyond the baseline define, how many functions hold such code)."""
    library = build_dir / "_C.so"
    beyond = functions_beyond_baseline(disassemble(str(library)))
    shared = set()
    for isa, objs in kernel_objects(build_dir).items():
        for obj in objs:
            shared |= shared_functions(obj, isa)
    bad = {}
    for name in shared:
        for part in (name, name + ".cold"):  # GCC's cold part of a function goes with its copy
            if part in beyond:
                bad[part] = beyond[part]
    return bad, len(shared), len(beyond)


def default_build_dir() -> Path:
    dirs = sorted((Path(__file__).resolve().parents[1] / "build").glob("*/CMakeFiles/torch_segops_cpu_baseline.dir"))
    if not dirs:
        raise SystemExit("no pip build folder (build/<tag>) with the CPU kernel objects: run tools/bootstrap.sh")
    return dirs[0].parents[1]


def main(argv: list[str]) -> int:
    build_dir = Path(argv[0]) if argv else default_build_dir()
    bad, shared, beyond = check(build_dir)
    print(f"{build_dir / '_C.so'}: {beyond} functions hold code beyond the x86-64 baseline; the kernel objects beyond "
          f"the baseline share {shared} functions with the rest, {len(bad)} of them kept as such code")
    for name, insn in sorted(bad.items()):
        print(f"  SHARED FUNCTION WITH CODE BEYOND THE BASELINE: {name}: {insn}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
