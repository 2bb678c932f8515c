"""What the CUDA fatbin of a built library holds, read by NVIDIA's cuobjdump (on PATH, next to nvcc, in
$CUDA_HOME/bin, or the nvidia-cuda-cuobjdump pip wheel that tools/bootstrap.sh installs): the SASS and PTX
entries per architecture, whether each is stored compressed and its size once extracted, the kernels' SASS.
The size of the .nv_fatbin section comes from readelf. Also: which entries a CMake CUDA_ARCHITECTURES list
must produce, and the problems of a library whose entries differ from them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass

if __package__ in (None, ""):  # run as a script: the tools package from the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tools.cuda_toolchain import find_cuobjdump, find_nvcc  # noqa: E402

CUOBJDUMP_MISSING = ("cuobjdump not found (PATH, next to nvcc, $CUDA_HOME/bin, or the nvidia-cuda-cuobjdump pip "
                     "wheel that tools/bootstrap.sh installs): the fatbin cannot be read")


@dataclass
class FatbinEntry:
    kind: str           # "elf" (SASS) or "ptx"
    arch: int           # e.g. 90
    compressed: bool    # stored compressed (cuobjdump's header of the entry says "compressed")
    uncompressed: int   # bytes of the entry as cuobjdump extracts it


def require_cuobjdump() -> str:
    cuobjdump = find_cuobjdump(find_nvcc())
    if cuobjdump is None:
        raise RuntimeError(CUOBJDUMP_MISSING)
    return cuobjdump


def run_cuobjdump(cuobjdump: str, *args: str, cwd: str | None = None) -> str:
    """cuobjdump's output ("" for a file without device code); RuntimeError when it fails otherwise."""
    cp = subprocess.run([cuobjdump, *args], capture_output=True, text=True, cwd=cwd)
    if cp.returncode != 0:
        if "does not contain device code" in cp.stderr:
            return ""
        raise RuntimeError(f"{cuobjdump} {' '.join(args)} failed ({cp.returncode}):\n{cp.stdout[-2000:]}{cp.stderr}")
    return cp.stdout


# cuobjdump --list-elf / --list-ptx lines: "ELF file    1: _C.1.sm_75.cubin", "PTX file    1: _C.3.sm_120.ptx",
# and --extract-elf / --extract-ptx lines: "Extracting ELF file    1: ...", "Extracting PTX file and ptxas
# options    1: _C.1.sm_120.ptx -arch=sm_120". PTX is named sm_NN too (older toolkits wrote compute_NN); the
# a/f suffix (sm_90a) keeps the number.
_LISTING_LINE = re.compile(r"^(?:Extracting )?(ELF|PTX) file(?: and ptxas options)?\s+\d+:\s+"
                           r"(\S*?\.(?:sm|compute)_(\d+)[af]?\.(?:cubin|ptx))(?:\s.*)?$")


def listed_files(text: str) -> list[tuple[str, int, str]]:
    """(kind, arch, file name) of each entry a cuobjdump listing or extraction names, in its order."""
    out = []
    for line in text.splitlines():
        m = _LISTING_LINE.match(line.strip())
        if m:
            out.append(("elf" if m.group(1) == "ELF" else "ptx", int(m.group(3)), m.group(2)))
    return out


def parse_cuobjdump_listing(text: str) -> set[tuple[str, int]]:
    """(kind, arch) pairs of cuobjdump --list-elf and/or --list-ptx output ("elf" = SASS, "ptx")."""
    return {(kind, arch) for kind, arch, _ in listed_files(text)}


def parse_dump_headers(text: str) -> list[tuple[str, int, bool]]:
    """(kind, arch, compressed) of each entry's header ("Fatbin elf code:", "arch = sm_90", ..., "compressed")
    in a cuobjdump dump, in its order."""
    out, cur = [], None
    for line in text.splitlines():
        s = line.strip()
        m = re.match(r"^Fatbin (elf|ptx) code:$", s)
        if m:
            cur = [m.group(1), None, False]
            out.append(cur)
        elif cur is not None and not s and cur[1] is not None:
            cur = None  # the blank line that ends the header
        elif cur is not None:
            m = re.match(r"^arch = (?:sm|compute)_(\d+)[af]?$", s)
            if m:
                cur[1] = int(m.group(1))
            cur[2] = cur[2] or s == "compressed"
    return [tuple(c) for c in out]


def read_fatbin(path: str, cuobjdump: str | None = None) -> list[FatbinEntry]:
    """The entries of a library's fatbin (empty list if it has none): kind, arch and compression from the
    headers of cuobjdump's resource dump, sizes of the files its extraction writes, matched in order."""
    cuobjdump = cuobjdump or require_cuobjdump()
    headers = parse_dump_headers(run_cuobjdump(cuobjdump, "--dump-resource-usage", path))
    with tempfile.TemporaryDirectory(prefix="segops-fatbin-") as tmp:
        files = listed_files(run_cuobjdump(cuobjdump, "--extract-elf", "all", "--extract-ptx", "all",
                                           os.path.abspath(path), cwd=tmp))
        sizes = {name: os.path.getsize(os.path.join(tmp, name)) for _, _, name in files}
    for kind in ("elf", "ptx"):
        h, f = ([a for k, a, _ in rows if k == kind] for rows in (headers, files))
        if h != f:
            raise RuntimeError(f"cuobjdump's dump and extraction of {path} disagree on the {kind} entries: "
                               f"{h} / {f}")
    names = {kind: iter([name for k, _, name in files if k == kind]) for kind in ("elf", "ptx")}
    return [FatbinEntry(kind, arch, compressed, sizes[next(names[kind])]) for kind, arch, compressed in headers]


def fatbin_bytes(path: str) -> int:
    """Size of the library's .nv_fatbin section (readelf; 0 without one)."""
    out = subprocess.run(["readelf", "-S", "-W", path], capture_output=True, text=True, check=True).stdout
    m = re.search(r"^\s*\[\s*\d+\]\s+\.nv_fatbin\s+\S+\s+[0-9a-f]+\s+[0-9a-f]+\s+([0-9a-f]+)\s", out, re.M)
    return int(m.group(1), 16) if m else 0


def expected_entries(archs: str) -> set[tuple[str, int]]:
    """(kind, arch) pairs a CMake CUDA_ARCHITECTURES list must produce."""
    want = set()
    for a in [x for x in re.split(r"[;,]", archs) if x]:
        m = re.match(r"^(\d+)[af]?(?:-(real|virtual))?$", a)
        if not m:
            raise ValueError(f"cannot check CUDA architecture entry {a!r}")
        num, what = int(m.group(1)), m.group(2)
        if what in (None, "real"):
            want.add(("elf", num))
        if what in (None, "virtual"):
            want.add(("ptx", num))
    return want


def _entry_name(kind: str, arch: int) -> str:
    return f"SASS sm_{arch}" if kind == "elf" else f"PTX compute_{arch}"


def compare_entries(have: set[tuple[str, int]], archs: str, source: str) -> list[str]:
    """Problems of a library whose fatbin holds `have` (from `source`) for the CMake arch list `archs`: every
    configured SASS/PTX must be there, and nothing else. Empty list: it matches."""
    want = expected_entries(archs)
    problems = [f"{source}: missing {_entry_name(k, a)} (configured: {archs})" for k, a in sorted(want - have)]
    problems += [f"{source}: unexpected {_entry_name(k, a)} (configured: {archs})" for k, a in sorted(have - want)]
    return problems


def check_fatbin(path: str, archs: str, entries: list[FatbinEntry] | None = None) -> list[str]:
    """Problems of the library's fatbin (read here unless `entries` are given): every configured SASS/PTX
    present, nothing else, every entry compressed."""
    if entries is None:
        try:
            entries = read_fatbin(path)
        except RuntimeError as e:
            return [f"fatbin not read: {e}"]
    if not entries:
        return [f"{path} holds no CUDA fatbin (.nv_fatbin section missing or empty)"]
    problems = compare_entries({(e.kind, e.arch) for e in entries}, archs, "fatbin")
    problems += [f"{_entry_name(e.kind, e.arch)} is not compressed" for e in entries if not e.compressed]
    return problems


def cuobjdump_sass(cuobjdump: str, path: str, arch: int) -> dict[str, str]:
    """The SASS of every kernel of `path` for sm_`arch`: mangled name -> disassembly. cuobjdump runs nvdisasm,
    which the nvidia-cuda-nvdisasm wheel puts next to the wheel's cuobjdump (tools/bootstrap.sh)."""
    tools = os.path.dirname(cuobjdump)
    env = dict(os.environ, PATH=tools + os.pathsep + os.environ.get("PATH", ""))
    if os.path.exists(os.path.join(tools, "nvdisasm")):
        env["NVDISASM_PATH"] = tools
    cp = subprocess.run([cuobjdump, "-sass", "-arch", f"sm_{arch}", path], capture_output=True, text=True, env=env)
    if cp.returncode != 0:
        raise RuntimeError(f"{cuobjdump} -sass {path} failed ({cp.returncode}): {cp.stderr[-2000:]}")
    parts = re.split(r"\n\s*Function : ", cp.stdout)[1:]
    return {p.split("\n", 1)[0].strip(): p for p in parts}
