#!/usr/bin/env python3
"""Whether the aarch64 CPU kernels' hot loops are vector code: a disassembly check (objdump), like the
Partition SASS check of tools/check_cuda_build.py.

    python tools/check_vector_code.py OBJECT_OR_LIBRARY [--namespace isa_baseline]

For each hot kernel on float inputs (min/max with arg over features and over one feature, the max and the
exp of logsumexp and softmax, the sums over one feature and over features), the functions
of that kernel (the function, the lambdas and clones inside it, the helpers it calls out of line: what the
compiler left of it after inlining) are disassembled and their instructions counted: vector data
processing (an operand vN.4s, .2d, .8h or .16b; loads, stores and moves not counted) against scalar
floating-point compares, selects and arithmetic (fcmp, fcmpe, fcsel, fadd, fmax, ... on s or d registers).
A kernel passes when it has vector data processing and at most `ratio` scalar floating-point instructions
per vector one: 1/2, or 1 for the feature-loop sums, whose one- and two-feature paths are scalar chains by
design. GCC's lowering of 32-byte vector-extension loops (9d7a82b's kernels: fcmpe/fcsel lane by lane, the
vectors kept on the stack) fails; Highway's NEON code passes.

The counts are static (instructions in the code, not executed): run it on an optimised build (-O2/-O3),
where the kernels' helpers are inlined as they ship. Softmax's rows (kernels.cpp's softmax_rows) are not
counted: each of its scalar tails (fewer than 4 elements) inlines a whole scalar exp, which outweighed its
vector loop in a static count (GCC 12, before its groups of 4 vectors: 180 vector, 251 scalar); their vector exp
is exp_nonpos_lanes, which the exp pass's count covers.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass, field

_NS = r"torch_segops::cpu::(?:[\w ()]+::)?"  # our namespaces: isa_<set>, anonymous
_LOAD = _NS + r"ArrayLoad<float> >"
_ROWS = _NS + r"CsrSegments, " + _NS + r"DirectRows<" + _LOAD


@dataclass(frozen=True)
class Kernel:
    name: str
    pattern: str  # a regex searched in each function's demangled name
    ratio: float = 0.5  # scalar floating-point instructions allowed per vector one


HOT = [
    Kernel("min/max with arg, float features (extremum_piece, extremum_piece_lanes, arg_extremum_rows16)",
           rf"extremum_piece\w*<torch_segops::ArgExtremumOp<float, (?:true|false)>, {_LOAD}"),
    Kernel("min/max with arg, one float feature (arg_extrema_segments_f1, segments_f1_pass, first_extreme_row)",
           rf"reduce_chunks<torch_segops::ArgExtremumOp<float, (?:true|false)>, float, {_ROWS}"
           rf"|arg_extrema_segments_f1<(?:true|false), {_LOAD}"
           rf"|segments_f1_pass<\d+, (?:true|false), (?:true|false), {_NS}ArrayLoad<float>, "
           rf"|first_extreme_row<\d+, (?:true|false), (?:true|false), float>"),
    Kernel("max of logsumexp and softmax, float features (extremum_piece)",
           rf"extremum_piece\w*<{_NS}ExtremeValueOp<float, true>, {_LOAD}"),
    Kernel("exp of logsumexp and softmax (exp_pass, exp_nonpos_lanes)",
           rf"exp_pass<float, torch_segops::LogSumExpOp<float>::State, {_NS}ExtremeValueOp<float, true>::State, "
           rf"{_LOAD}"),
    Kernel("sum, one float feature (sum_segments_f1, sum_f1)",
           rf"reduce_chunks<torch_segops::SumOp<float>, float, {_ROWS}"
           rf"|sum_segments_f1<{_LOAD}, {_NS}reduce_whole_segments<torch_segops::SumOp<float>"
           rf"|reduce_piece<torch_segops::SumOp<float>, {_LOAD}|sum_f1<float>|sum_lanes<float>"),
    Kernel("sum, float features (GCC's vectorised feature loops; the 1- and 2-feature chains scalar)",
           rf"reduce_piece_general<torch_segops::SumOp<float>, {_LOAD}", ratio=1.0),
]
VECTOR = re.compile(r"\bv\d+\.(16b|8h|4s|2d)\b")
NOT_DATA = re.compile(r"^(ld|st|mov|dup|ins|umov|smov|prfm)")
SCALAR_FP = re.compile(r"^(fcmpe?|fcsel|fadd|fsub|fmul|fdiv|fmadd|fmsub|fnmadd|fnmsub|fmax\w*|fmin\w*|fccmpe?)$")
SCALAR_REG = re.compile(r"^\s*[sd]\d+\b")


@dataclass
class Count:
    kernel: Kernel
    functions: list = field(default_factory=list)
    vector: int = 0
    scalar_fp: int = 0

    def passes(self) -> bool:
        return self.vector > 0 and self.scalar_fp <= self.kernel.ratio * self.vector

    def line(self) -> str:
        return (f"{'ok  ' if self.passes() else 'FAIL'} {self.kernel.name}: {self.vector} vector data-processing, "
                f"{self.scalar_fp} scalar floating-point instructions (at most {self.kernel.ratio:g} per vector one) "
                f"in {len(self.functions)} functions")


def disassemble(path: str) -> str:
    return subprocess.run(["aarch64-linux-gnu-objdump", "-d", "-C", "--no-show-raw-insn", path], capture_output=True,
                          text=True, check=True).stdout


def count(dis: str, namespace: str | None = None, kernels=HOT) -> list[Count]:
    """Per kernel, its functions' instruction counts; with `namespace`, only functions whose name holds
    ::namespace:: count (one instruction-set object of a library that holds several)."""
    counts = [Count(k) for k in kernels]
    rx = [re.compile(k.pattern) for k in kernels]
    current: list[Count] = []
    for line in dis.splitlines():
        head = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if head:
            name = head.group(1)
            current = [c for c, r in zip(counts, rx) if (namespace is None or f"::{namespace}::" in name)
                       and r.search(name)]
            for c in current:
                c.functions.append(name)
            continue
        if not current:
            continue
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        op, args = parts[1].strip(), parts[2]
        for c in current:
            if VECTOR.search(args) and not NOT_DATA.match(op):
                c.vector += 1
            elif SCALAR_FP.match(op) and SCALAR_REG.match(args):
                c.scalar_fp += 1
    return counts


def problems(path: str, namespace: str | None = None) -> list[str]:
    out = []
    for c in count(disassemble(path), namespace):
        if not c.functions:
            out.append(f"{c.kernel.name}: no function of it{f' in namespace {namespace}' if namespace else ''}")
        elif not c.passes():
            out.append(c.line() + ": not vector code")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", help="an aarch64 object file or shared library")
    ap.add_argument("--namespace", help="count only functions in this namespace (e.g. isa_baseline)")
    ap.add_argument("-v", "--verbose", action="store_true", help="list each kernel's functions")
    args = ap.parse_args(argv)
    counts = count(disassemble(args.path), args.namespace)
    for c in counts:
        print(c.line())
        if args.verbose:
            for f in c.functions:
                print(f"      {f[:200]}")
    return 0 if all(c.functions and c.passes() for c in counts) else 1


if __name__ == "__main__":
    sys.exit(main())
