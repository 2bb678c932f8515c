"""How a stand-in conda package of tools/offline_channel.py is made (rattler-build's assemble_package): from a
few text files (activation scripts, markers, run_exports), or from PyPI wheels installed into a staging
prefix and packaged under their conda names with ``.dist-info`` intact and their Requires-Dist lines as
conda dependencies."""

from __future__ import annotations

import email.parser
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

SUBDIR = "linux-64"
STANDIN = "standin"
# PyPI name -> conda name where they differ.
CONDA_NAME = {"torch": "pytorch"}

SCRIPT_HEAD = (
    "#!/bin/sh\n"
    "'''exec' \"$(dirname -- \"$(readlink -f -- \"$0\")\")/python\" \"$0\" \"$@\"\n"
    "' '''\n"
)  # a shebang that is valid sh and Python: console scripts run the env's python wherever it lives


class ChannelError(RuntimeError):
    """A stand-in could not be made; the message says what is missing."""


def log(msg: str) -> None:
    print(f"[offline-channel] {msg}", flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, text=True, capture_output=True, **kw)
    if res.returncode != 0:
        raise ChannelError(f"command failed ({res.returncode}): {' '.join(cmd)}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return res


def rattler_modules():
    try:
        import rattler
        import rattler_build
    except ImportError as e:
        raise ChannelError(
            f"{e.name} is not installed. Install the pinned tools first:\n"
            "  python -m pip install py-rattler==0.28.0 py-rattler-build==0.73.0"
        ) from e
    return rattler, rattler_build


class Builder:
    def __init__(self, channel: Path, work: Path):
        _, self.rb = rattler_modules()
        self.channel = channel
        self.out = channel / SUBDIR
        self.work = work
        self.made: list[str] = []

    def package(self, name, version, build, *, files=None, files_dir=None, depends=(), constrains=(),
                summary="", noarch=None):
        out = self.out if noarch is None else self.channel / "noarch"
        res = self.rb.assemble_package(
            name=name, version=version, target_platform="noarch" if noarch else SUBDIR,
            build_string=build, output_dir=out, files=files, files_dir=files_dir,
            depends=list(depends), constrains=list(constrains), noarch=noarch,
            summary=f"OFFLINE STAND-IN, not a conda-forge package: {summary}",
            license="LicenseRef-standin", compression_level=1, detect_prefix=False)
        self.made.append(res.identifier)
        return res

    def stage(self, name: str) -> Path:
        d = self.work / "stage" / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        return d

    def file_package(self, name, version, build, files: dict[str, str], run_exports: dict | None = None, **kw):
        """A package made of small text files (activation scripts, markers); ``run_exports`` as in
        conda's info/run_exports.json ({"strong": [...], "weak": [...]})."""
        d = self.stage(name)
        if run_exports:
            files = {**files, "info/run_exports.json": json.dumps(run_exports)}
        for rel, text in files.items():
            p = d / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            if rel.endswith(".sh"):
                p.chmod(0o755)
        return self.package(name, version, build, files_dir=d, **kw)


def py_tag() -> tuple[str, str]:
    v = sys.version_info
    return f"{v.major}.{v.minor}", f"python{v.major}.{v.minor}"


def conda_name(pypi_name: str) -> str:
    n = re.sub(r"[-_.]+", "-", pypi_name).lower()
    return CONDA_NAME.get(n, n)


def conda_depends(requires: list[str], extras_of: dict[str, list[str]] | None = None) -> list[str]:
    """conda run requirements from a wheel's Requires-Dist lines. A requirement with extras
    (``cuda-toolkit[cublas]``) also brings what the target's METADATA lists behind ``extra == "cublas"``
    (``extras_of``: conda name -> that package's Requires-Dist lines): conda has no extras."""
    from packaging.requirements import Requirement
    rattler, _ = rattler_modules()
    deps = []

    def add(req):
        spec = ",".join(str(s) for s in req.specifier).replace("~=", ">=").replace("===", "==")
        name = conda_name(req.name)
        if spec:
            try:
                rattler.VersionSpec(spec)
                deps.append(f"{name} {spec}")
                return
            except Exception:
                pass
        deps.append(name)

    for line in requires:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        add(req)
        for extra in sorted(req.extras):
            for sub in (extras_of or {}).get(conda_name(req.name), []):
                r2 = Requirement(sub)
                if r2.marker is not None and r2.marker.evaluate({"extra": extra}) \
                        and not r2.marker.evaluate({"extra": ""}):
                    add(r2)
    return sorted(set(deps))


def relocatable_script(path: Path) -> None:
    text = path.read_text()
    if text.startswith("#!"):
        path.write_text(SCRIPT_HEAD + text.split("\n", 1)[1])


def repack_wheels(b: Builder, wheels: list[Path], *, skip: set[str] = frozenset(), pytorch_build: str,
                  pytorch_depends: tuple[str, ...] = ()) -> dict[str, str]:
    """Each wheel installed into a staging prefix and packaged as a conda package of the same name
    (``.dist-info`` intact); returns {conda name: version} of what was made. ``skip``: conda names
    another channel already provides."""
    _, pyname = py_tag()
    log(f"installing {len(wheels)} wheels into a staging prefix (no pyc, no dependency resolution)")
    prefix = b.stage("site")
    run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--ignore-installed",
         "--no-index", "--no-warn-script-location", "--prefix", str(prefix), *sorted(str(w) for w in wheels)])
    sp = prefix / "lib" / pyname / "site-packages"
    major, minor = sys.version_info[:2]
    python_pin = f"python >={major}.{minor},<{major}.{minor + 1}.0a0"  # files live in lib/pythonX.Y
    parser = email.parser.Parser()
    metas = {}
    for dist in sorted(sp.glob("*.dist-info")):
        meta = parser.parsestr((dist / "METADATA").read_text(encoding="utf-8"))
        metas[conda_name(meta["Name"])] = (dist, meta)
    extras_of = {n: m.get_all("Requires-Dist") or [] for n, (_, m) in metas.items()}
    made = {}
    for cname, (dist, meta) in metas.items():
        if cname in skip:
            continue
        name, version = meta["Name"], meta["Version"]
        (dist / "direct_url.json").unlink(missing_ok=True)
        record = dist / "RECORD"
        rows = [r for r in record.read_text().splitlines() if r and not r.split(",")[0].endswith("direct_url.json")]
        record.write_text("\n".join(rows) + "\n")
        files = []
        for row in rows:
            rel = row.rsplit(",", 2)[0]
            src = (sp / rel).resolve()
            if not src.is_file() or "__pycache__" in rel:
                continue
            dest = src.relative_to(prefix.resolve())
            if dest.parts[0] == "bin":
                relocatable_script(src)
            files.append(b.rb.FileEntry.from_paths(src, dest))
        depends = [python_pin] + conda_depends(meta.get_all("Requires-Dist") or [], extras_of)
        public = version.split("+")[0]
        build = f"{STANDIN}_0"
        if cname == "pytorch":
            build, depends = pytorch_build, depends + list(pytorch_depends)
        b.package(cname, public, build, files=files, depends=depends,
                  summary=f"{name} {version} repackaged from its PyPI wheel")
        made[cname] = public
        log(f"  {cname} {public} {build} ({len(files)} files)")
    shutil.rmtree(prefix, ignore_errors=True)
    return made


def activation(name: str, exports: dict[str, str]) -> dict[str, str]:
    lines = [f"# {name}: offline stand-in, points at tools installed on this machine"]
    lines += [f'export {k}="{v}"' for k, v in exports.items()]
    return {f"etc/conda/activate.d/activate-{name}.sh": "\n".join(lines) + "\n"}
