"""The size of the CUDA library per architecture list (`python tools/check_cuda_build.py sizes`): builds each
(arch list, fatbin compression) and writes a markdown table (benchmarks/results/) of the library's, its
.nv_fatbin section's and its entries' bytes and the build times."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

if __package__ in (None, ""):  # run as a script: the tools package from the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tools.cuda_build import build, build_jobs  # noqa: E402
from tools.cuda_fatbin import FatbinEntry, fatbin_bytes, read_fatbin  # noqa: E402
from tools.cuda_toolchain import CI_ARCHS, REPO, default_archs, nvcc_full_version, nvcc_version  # noqa: E402

# (arch list or "default", TORCH_SEGOPS_CUDA_COMPRESS), cheapest first so that a cut-short run still reports.
SIZE_CONFIGS = [("90-real", "size"), (CI_ARCHS, "size"), (CI_ARCHS, "none"), ("default", "size"), ("default", "none")]


def library_sizes(path: str, entries: list[FatbinEntry] | None = None) -> dict:
    """Bytes of the library, of its .nv_fatbin section (the entries as stored), and of the fatbin entries
    uncompressed (read here unless `entries` are given)."""
    entries = read_fatbin(path) if entries is None else entries
    return {"size_bytes": os.path.getsize(path), "fatbin_bytes": fatbin_bytes(path), "entries": len(entries),
            "uncompressed_bytes": sum(e.uncompressed for e in entries)}


def torch_headers_version() -> str:
    """Version of the torch headers the build uses (torch/headeronly/version.h of the installed torch)."""
    import importlib.util
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "not found"
    path = os.path.join(list(spec.submodule_search_locations)[0], "include", "torch", "headeronly", "version.h")
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError:
        return "not found"
    parts = [re.search(rf"#define TORCH_VERSION_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else "unknown"


def git_commit() -> str:
    """Short HEAD commit, with "+ uncommitted changes" when src/ or cmake/ differ from it."""
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "src", "cmake", "CMakeLists.txt"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" + uncommitted changes" if dirty else "")


def _kib_mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.0f} KiB ({n / 2**20:.2f} MiB)"


def sizes_markdown(meta: dict, rows: list[dict]) -> str:
    """The size table. rows: {archs, compress, and either the library_sizes() keys plus build_s and
    cuda_compile_s, or note (why it was not measured)}."""
    lines = [
        f"# CUDA library size per architecture list ({meta['date']})",
        "",
        f"`python tools/check_cuda_build.py sizes` on {meta['machine']}; nvcc {meta['nvcc']}, torch headers "
        f"{meta['torch']}, commit {meta['commit']}. Builds of `_C.so` (CPU + CUDA sources, Release) with "
        f"{meta['jobs']} build job(s) and `nvcc --threads={meta['jobs']}`; the build time is the whole "
        "`cmake --build` (the CUDA source alone in brackets), not counting configure. Sizes: the library "
        "file, its `.nv_fatbin` section (the SASS/PTX entries as stored), and the entries after decompression.",
        "",
        "| arch list | fatbin compression | library | .nv_fatbin | entries (uncompressed) | build time |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        head = f"| `{r['archs']}` | {r['compress']} |"
        if "note" in r:
            lines.append(f"{head} {r['note']} | | | |")
            continue
        cu = f" ({r['cuda_compile_s']:.0f} s)" if r.get("cuda_compile_s") else ""
        lines.append(f"{head} {_kib_mib(r['size_bytes'])} | {_kib_mib(r['fatbin_bytes'])} | "
                     f"{r['entries']} ({r['uncompressed_bytes'] / 1024:,.0f} KiB)"
                     f" | {r['build_s']:.0f} s{cu} |")
    lines += ["", *meta.get("notes", [])]
    return "\n".join(lines).rstrip() + "\n"


def sizes_command(out_path: str, nvcc: str, configs: list[tuple[str, str]]) -> int:
    """Builds the CUDA library for each (archs, compression) and writes the table to out_path, rewritten
    after every build so that a run cut short keeps what it measured."""
    import datetime
    import platform
    version = nvcc_version(nvcc)
    meta = {"date": datetime.date.today().isoformat(), "nvcc": f"{nvcc_full_version(nvcc)} ({nvcc})",
            "torch": torch_headers_version(), "commit": git_commit(), "jobs": build_jobs(),
            "machine": f"{platform.machine()} Linux, {os.cpu_count()} CPUs (no GPU needed)",
            "notes": [f"`default` = the row of `cmake/cuda_architectures.txt` for nvcc {version}: "
                      f"`{default_archs(version)}`."]}
    rows = [{"archs": default_archs(version) if a == "default" else a, "compress": c,
             "note": "not measured (run cut short)"} for a, c in configs]
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    for i, row in enumerate(rows):
        print(f"[{i + 1}/{len(rows)}] archs {row['archs']}, compression {row['compress']}", flush=True)
        with tempfile.TemporaryDirectory(prefix="segops-cuda-size-") as tmp:
            try:
                b = build(os.path.join(tmp, "build"), row["archs"], nvcc,
                          extra=[f"-DTORCH_SEGOPS_CUDA_COMPRESS={row['compress']}"])
            except RuntimeError as e:
                row["note"] = "build failed"
                print(str(e)[-3000:], file=sys.stderr)
            else:
                del row["note"]
                row.update(library_sizes(b.library), build_s=b.build_s, cuda_compile_s=b.cuda_compile_s)
                print(f"  {_kib_mib(row['size_bytes'])}, build {b.build_s:.0f} s", flush=True)
        with open(out_path, "w") as fh:
            fh.write(sizes_markdown(meta, rows))
    print(f"wrote {out_path}")
    return 0 if all("note" not in r for r in rows) else 1
