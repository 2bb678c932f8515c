#!/usr/bin/env python3
"""The distribution matrix: ONE binary per variant, built against the oldest supported torch, tested
in every torch from 2.10 to 2.14.

    python tools/torch_matrix.py                      # all of it (downloads ~6.5 GB once, then cached)
    python tools/torch_matrix.py --versions 2.12.0    # some torch versions only
    python tools/torch_matrix.py --markdown benchmarks/results/torch-matrix-DATE.md

1. Builds the cpu wheel once (`pip wheel`, scikit-build-core) against torch 2.10.0's headers and
   libtorch_cpu with TORCH_SEGOPS_TORCH_TARGET=2.10 (the tree tools/torch_wheels.py unpacks from PyPI's
   2.10.0 wheel), linked with -Wl,--no-undefined.
2. Builds the cuda130 library once, with nvcc 13.0, against the same 2.10 tree (TORCH_SEGOPS_WITH_CUDA=ON,
   CUDA architectures 75-real;90-real as in CI). The torch headers carry no CUDA version: the stable C
   shim the .cu calls (aoti_torch_get_current_cuda_stream) is the same in every build, so a 2.11 cu130
   wheel is not needed to build it; libtorch_cuda.so is linked as the stub of cmake/cuda.cmake (same
   soname, bound at load time to the CUDA torch's own). What ties it to CUDA 13 is libcudart.so.13.
3. For each torch version: downloads PyPI's wheel and its whole dependency closure (nvidia wheels
   included; 2.10.0 is cu128 with the -cu12 wheels, 2.11 to 2.14 are cu130 and share theirs) plus pytest,
   hypothesis and numpy into the kept cache folder (conda_tools.cache_dir()/wheels/torch-cu128|cu130;
   pip's find-links and config are ignored, see tools/torch_wheels.py), makes a fresh venv, installs
   them from that folder only (--no-index), installs the cpu wheel with --no-deps, and runs the op suite
   (tests/api/test_ops*.py, test_autograd.py, test_compile.py, test_errors.py, test_torch_errors.py) against it. Then it points
   torch_segops at the cuda130 library (TORCH_SEGOPS_LIBRARY): in a cu130 torch it must load, say
   variant cuda / CUDA 13.0, and compute segment_sum/softmax on CPU tensors right (with --cuda130-tests
   the whole tests/api/test_ops.py runs again with it); in the cu128
   torch (2.10) the doctor must flag it (exit 1, a CUDA-major finding). The venv is removed afterwards
   (--keep-venvs keeps them).
A progress line per torch version; the result as JSON (--json) and markdown (--markdown). Not run in CI.
No GPU is needed (none is used): CUDA code paths are not exercised here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

if __package__ in (None, ""):  # run as a script (python tools/torch_matrix.py): the tools package from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools import torch_wheels as tw  # noqa: E402
from tools.conda_tools import cache_dir  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
VERSIONS = ["2.10.0", "2.11.0", "2.12.0", "2.13.0", "2.14.0"]
TEST_EXTRAS = ["pytest", "hypothesis", "numpy"]
CUDA_ARCHS = "75-real;90-real"
SUITE_EXTRA = ["tests/api/test_autograd.py", "tests/api/test_compile.py", "tests/api/test_errors.py",
               "tests/api/test_torch_errors.py"]


def log(msg: str) -> None:
    print(f"[torch-matrix] {msg}", flush=True)


run = tw.run_checked


def suite() -> list[str]:
    ops = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests" / "api").glob("test_ops*.py"))
    return ops + [t for t in SUITE_EXTRA if (REPO / t).exists()]


# ---- the two binaries ----------------------------------------------------------------------------

def build_cpu_wheel(tree: Path, work: Path) -> Path:
    dist = work / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    tw.own_build_dir(work / "build-cpu")
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", dist,
         "-C", f"cmake.define.TORCH_SEGOPS_TORCH_DIR={tree}", "-C", "cmake.define.TORCH_SEGOPS_TORCH_TARGET=2.10",
         "-C", "cmake.define.CMAKE_SHARED_LINKER_FLAGS=-Wl,--no-undefined",
         "-C", f"build-dir={work / 'build-cpu'}", REPO], cwd=REPO)
    wheels = sorted(dist.glob("torch_segops-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one wheel in {dist}, found {wheels}")
    return wheels[0]


def build_cuda_library(tree: Path, work: Path, archs: str) -> Path:
    lib, _, _ = tw.build_library(work / "build-cuda130", tree, cuda_archs=archs)
    out = work / "cuda130" / "_C.so"
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(lib, out)
    return out


# ---- one torch version ---------------------------------------------------------------------------

def download_closure(version: str) -> Path:
    """torch==version and its dependencies (+ the test tools) from PyPI into the cache; files already
    there are kept (pip says "File was already downloaded")."""
    dest = tw.wheel_dir(version)
    dest.mkdir(parents=True, exist_ok=True)
    seed = cache_dir() / "wheels" / "cu130"  # offline_channel's 2.13 closure: same files, linked not copied
    if dest.name == "torch-cu130" and seed.is_dir():
        for f in seed.glob("*.whl"):
            if not (dest / f.name).exists():
                os.link(f, dest / f.name)
    run([sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--progress-bar", "off", "--dest", dest,
         f"torch=={version}", *TEST_EXTRAS], env=tw.pip_env())
    return dest


def make_venv(version: str, wheels: Path, segops_wheel: Path, venv: Path) -> Path:
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", venv])
    py = venv / "bin" / "python"
    run([py, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheels, f"torch=={version}", *TEST_EXTRAS],
        env=tw.pip_env())
    run([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", segops_wheel], env=tw.pip_env())
    return py


PROBE = r"""
import json, torch, torch_segops as so
from torch_segops import _library
x = torch.randn(7, 3, dtype=torch.float64)
ptr = torch.tensor([0, 2, 2, 7])
ref = torch.stack([x[0:2].sum(0), x[2:2].sum(0), x[2:7].sum(0)])
print(json.dumps({"torch": torch.__version__, "torch_cuda": torch.version.cuda, "library": _library.library_path(),
                  "build_info": so.build_info(), "sum_ok": bool(torch.allclose(so.segment_sum_csr(x, ptr), ref)),
                  "softmax_ok": bool(torch.allclose(so.segment_softmax_csr(x, ptr)[2:7], torch.softmax(x[2:7], 0)))}))
"""


def probe(py: Path, env: dict) -> dict:
    cp = subprocess.run([py, "-c", PROBE], capture_output=True, text=True, env=env, cwd="/")
    if cp.returncode != 0:
        return {"error": (cp.stdout + cp.stderr)[-3000:]}
    return json.loads(cp.stdout.strip().splitlines()[-1])


def pytest_run(py: Path, tests: list[str], junit: Path, env: dict) -> dict:
    t0 = time.time()
    cp = subprocess.run([py, "-m", "pytest", *tests, "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"],
                        capture_output=True, text=True, env=env, cwd=REPO)
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    if junit.exists():
        for suite_el in ET.parse(junit).getroot().iter("testsuite"):
            tests_n = int(suite_el.get("tests", 0))
            f, e, s = (int(suite_el.get(k, 0)) for k in ("failures", "errors", "skipped"))
            counts["failed"] += f
            counts["errors"] += e
            counts["skipped"] += s
            counts["passed"] += tests_n - f - e - s
    header = [ln for ln in cp.stdout.splitlines() if ln.startswith(("torch ", "torch_segops "))]
    return {**counts, "seconds": round(time.time() - t0, 1), "returncode": cp.returncode, "header": header,
            "tail": cp.stdout[-3000:] if cp.returncode else cp.stdout.strip().splitlines()[-1:]}


def doctor(py: Path, env: dict) -> dict:
    cp = subprocess.run([py, "-m", "torch_segops.doctor", "--json"], capture_output=True, text=True, env=env, cwd="/")
    try:
        report = json.loads(cp.stdout)
    except json.JSONDecodeError:
        return {"returncode": cp.returncode, "error": (cp.stdout + cp.stderr)[-3000:]}
    errors = [f"{x['code']}: {x['message']}" for x in report["findings"] if x.get("severity") == "error"]
    return {"returncode": cp.returncode, "ok": report.get("ok"), "errors": errors}


def one_version(version: str, segops_wheel: Path, cuda_lib: Path | None, work: Path, keep: bool,
                cuda_tests: bool = False) -> dict:
    res: dict = {"version": version}
    t0 = time.time()
    wheels = download_closure(version)
    res["download_s"] = round(time.time() - t0, 1)
    t1 = time.time()
    venv = work / f"venv-{version}"
    py = make_venv(version, wheels, segops_wheel, venv)
    res["install_s"] = round(time.time() - t1, 1)
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_SEGOPS_LIBRARY", "PYTHONPATH")}
    try:
        res["probe_cpu"] = probe(py, env)
        res["tests_cpu"] = pytest_run(py, suite(), work / f"junit-{version}-cpu.xml", env)
        if cuda_lib is not None:
            cenv = dict(env, TORCH_SEGOPS_LIBRARY=str(cuda_lib))
            res["probe_cuda130"] = probe(py, cenv)
            torch_cuda = (res["probe_cpu"].get("torch_cuda") or "")
            if torch_cuda.startswith("13.") and cuda_tests:
                tests = [t for t in suite() if "test_ops" in t]
                res["tests_cuda130"] = pytest_run(py, tests, work / f"junit-{version}-cuda130.xml", cenv)
            res["doctor_cuda130"] = doctor(py, cenv)
    finally:
        if not keep:
            shutil.rmtree(venv, ignore_errors=True)
    res["seconds"] = round(time.time() - t0, 1)
    return res


def verdict(r: dict) -> tuple[bool, str]:
    """(passed, why) of one version's result."""
    p, t = r.get("probe_cpu", {}), r.get("tests_cpu", {})
    if "error" in p:
        return False, "cpu library does not load"
    if not (p.get("sum_ok") and p.get("softmax_ok")) or t.get("returncode") != 0 or t.get("failed") or t.get("errors"):
        return False, "cpu tests fail"
    if "probe_cuda130" not in r:
        return True, "cpu ok (cuda130 not checked)"
    cuda_torch = (p.get("torch_cuda") or "").startswith("13.")
    c, d = r["probe_cuda130"], r.get("doctor_cuda130", {})
    if cuda_torch:
        ok = ("error" not in c and c["build_info"].get("variant") == "cuda" and c["build_info"].get("cuda_version") == "13.0"
              and c.get("sum_ok") and c.get("softmax_ok") and r.get("tests_cuda130", {}).get("returncode", 0) == 0)
        what = "passes the CPU op tests" if "tests_cuda130" in r else "computes segment_sum/softmax on CPU right"
        return ok, f"cuda130 library loads and {what}" if ok else "cuda130 library fails in a cu130 torch"
    flagged = d.get("returncode") == 1 and any(e.startswith("cuda-major-mismatch") for e in d.get("errors", []))
    return flagged, ("doctor flags the cuda130 library in this CUDA 12 torch (cuda-major-mismatch)" if flagged
                     else "doctor did not flag cuda130")


def progress_line(i: int, n: int, r: dict) -> str:
    p, t = r.get("probe_cpu", {}), r.get("tests_cpu", {})
    line = (f"[{i}/{n}] torch {p.get('torch', r['version'])}: cpu wheel {t.get('passed', 0)} passed, "
            f"{t.get('failed', 0) + t.get('errors', 0)} failed, {t.get('skipped', 0)} skipped ({t.get('seconds', 0):.0f} s)")
    if "tests_cuda130" in r:
        c = r["tests_cuda130"]
        line += f"; cuda130 library: {c['passed']} passed, {c['failed'] + c['errors']} failed ({c['seconds']:.0f} s)"
    elif "probe_cuda130" in r and "build_info" in r["probe_cuda130"] and (p.get("torch_cuda") or "").startswith("13."):
        c = r["probe_cuda130"]
        line += (f"; cuda130 library: loads, variant {c['build_info'].get('variant')} CUDA "
                 f"{c['build_info'].get('cuda_version')}, CPU sum/softmax {'ok' if c['sum_ok'] and c['softmax_ok'] else 'WRONG'}")
    elif "doctor_cuda130" in r:
        line += f"; cuda130 library: doctor exit {r['doctor_cuda130'].get('returncode')}"
    ok, why = verdict(r)
    return line + f"; download {r['download_s']:.0f} s, venv {r['install_s']:.0f} s -> {'PASS' if ok else 'FAIL'} ({why})"


# ---- report --------------------------------------------------------------------------------------

def markdown(meta: dict, results: list[dict]) -> str:
    out = ["# Distribution matrix: one binary per variant, torch 2.10 to 2.14", ""]
    out += [f"- {k}: {v}" for k, v in meta.items()]
    out += ["", "cpu wheel = the one wheel built above, installed with `--no-deps`; suite = "
            f"{', '.join('`' + s + '`' for s in meta['suite'])}. cuda130 = the one CUDA 13.0 library (via "
            "`TORCH_SEGOPS_LIBRARY`): in a cu130 torch it must load, say variant cuda / CUDA 13.0, and pass `tests/api/test_ops.py` (CPU tensors; "
            "no GPU here; with --cuda130-tests) or at least compute segment_sum/softmax on CPU tensors right, in the "
            "cu128 torch the doctor must flag it.", "",
            "| torch | torch CUDA | cpu wheel: passed | failed | skipped | tests s | cuda130 library | verdict |",
            "|---|---|---|---|---|---|---|---|"]
    for r in results:
        p, t = r.get("probe_cpu", {}), r.get("tests_cpu", {})
        bi = r.get("probe_cuda130", {}).get("build_info", {})
        if "tests_cuda130" in r:
            c = r["tests_cuda130"]
            cuda = (f"loads ({bi.get('variant')}, CUDA {bi.get('cuda_version')}); test_ops: {c['passed']} passed, "
                    f"{c['failed'] + c['errors']} failed, {c['skipped']} skipped")
        elif (p.get("torch_cuda") or "").startswith("13.") and bi:
            c = r["probe_cuda130"]
            cuda = (f"loads ({bi.get('variant')}, CUDA {bi.get('cuda_version')}); CPU segment_sum/softmax "
                    f"{'right' if c.get('sum_ok') and c.get('softmax_ok') else 'WRONG'}")
        elif "doctor_cuda130" in r:
            d = r["doctor_cuda130"]
            loads = ("it still loads here (libcudart.so.13 found on the loader path)" if bi
                     else "it does not load (no libcudart.so.13)")
            cuda = (f"{loads}; doctor exit {d.get('returncode')}: "
                    + "; ".join(e[:200] for e in d.get("errors", [])).replace("|", "/"))
        else:
            cuda = "not checked"
        ok, why = verdict(r)
        out.append(f"| {p.get('torch', r['version'])} | {p.get('torch_cuda')} | {t.get('passed')} | "
                   f"{t.get('failed', 0) + t.get('errors', 0)} | {t.get('skipped')} | {t.get('seconds')} | {cuda} | "
                   f"{'PASS' if ok else 'FAIL'}: {why} |")
    out += ["", "Per version: download (closure into the cache; seconds include pip's index queries), fresh "
            "venv install from the cache, tests.", "",
            "| torch | download s | venv s | total s |", "|---|---|---|---|"]
    out += [f"| {r['version']} | {r['download_s']} | {r['install_s']} | {r['seconds']} |" for r in results]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--versions", nargs="+", default=VERSIONS)
    ap.add_argument("--work", type=Path, default=cache_dir() / "torch-matrix", help="builds and venvs (kept)")
    ap.add_argument("--cuda-archs", default=CUDA_ARCHS, help="of the cuda130 library ('' to skip it)")
    ap.add_argument("--keep-venvs", action="store_true")
    ap.add_argument("--cuda130-tests", action="store_true",
                    help="also run tests/api/test_ops.py with the cuda130 library in each cu130 torch (default: a probe)")
    ap.add_argument("--report", nargs="*", metavar="VERSION",
                    help="no builds or runs: render --markdown/--json from the results kept in WORK/results")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args(argv)
    t0 = time.time()
    args.work.mkdir(parents=True, exist_ok=True)
    kept = args.work / "results"
    kept.mkdir(exist_ok=True)
    if args.report is not None:
        results = [json.loads((kept / f"{v}.json").read_text()) for v in (args.report or VERSIONS)
                   if (kept / f"{v}.json").exists()]
        meta = json.loads((kept / "meta.json").read_text())
        meta["total time"] = f"{sum(r['seconds'] for r in results):.0f} s (per-version runs) + builds"
        return write_report(args, meta, results)
    tree = tw.oldest_torch_dir()
    log(f"torch {tw.OLDEST} build tree: {tree}")
    tb = time.time()
    wheel = build_cpu_wheel(tree, args.work)
    log(f"cpu wheel {wheel.name} built against torch {tw.OLDEST} in {time.time() - tb:.0f} s")
    cuda_lib = None
    if args.cuda_archs:
        tb = time.time()
        cuda_lib = build_cuda_library(tree, args.work, args.cuda_archs)
        log(f"cuda130 library ({args.cuda_archs}) built against torch {tw.OLDEST} in {time.time() - tb:.0f} s")
    build_s = round(time.time() - t0)
    results = []
    for i, v in enumerate(args.versions, 1):
        try:
            r = one_version(v, wheel, cuda_lib, args.work, args.keep_venvs, args.cuda130_tests)
        except Exception as e:  # a version that cannot even be set up is a failed row, not the end
            r = {"version": v, "download_s": 0, "install_s": 0, "seconds": 0, "setup_error": str(e)[-3000:]}
            log(f"[{i}/{len(args.versions)}] torch {v}: setup failed: {str(e)[-500:]}")
        else:
            log(progress_line(i, len(args.versions), r))
            (kept / f"{v}.json").write_text(json.dumps(r, indent=2))
        results.append(r)
    sha = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    meta = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPUs, no GPU",
            "python": platform.python_version(), "commit": sha + ("+dirty" if dirty else ""),
            "built against": f"torch {tw.OLDEST} headers + libtorch_cpu (PyPI wheel), TORCH_SEGOPS_TORCH_TARGET=2.10",
            "cpu wheel": wheel.name, "cuda130 library": f"nvcc {args.cuda_archs}" if cuda_lib else "not built",
            "suite": suite(), "total time": f"{time.time() - t0:.0f} s",
            "command": "python tools/torch_matrix.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    meta["build s"] = build_s
    (kept / "meta.json").write_text(json.dumps(meta, indent=2))
    return write_report(args, meta, results)


def write_report(args, meta: dict, results: list[dict]) -> int:
    passed = [verdict(r)[0] if "setup_error" not in r else False for r in results]
    log(f"{sum(passed)}/{len(results)} torch versions pass")
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    if args.markdown:
        args.markdown.write_text(markdown(meta, [r for r in results if "setup_error" not in r]))
        log(f"wrote {args.markdown}")
    return 0 if all(passed) else 1


if __name__ == "__main__":
    sys.exit(main())
