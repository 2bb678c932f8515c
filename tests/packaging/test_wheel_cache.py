"""The kept CUDA wheel folder (tools/offline_channel.py, download_cuda_wheels): the stand-in channel is built
from exactly the files of one pip resolution, whatever else the folder holds.

No download: `pip download` is replaced by a fake that "resolves" to tiny wheels made here (a torch that
says it is a CUDA 13.0 build, filelock, nvidia-cuda-runtime) and prints what pip prints. Everything after
it is real: pip installs the wheels into a staging prefix, rattler-build packages them, the channel is
indexed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
from tools import conda_tools as ct  # noqa: E402

ct.require_tools()
from tools import offline_channel as oc  # noqa: E402


def make_wheel(folder: Path, name: str, version: str, files: dict[str, str], requires: list[str] = ()) -> Path:
    """A pure-Python wheel with METADATA, WHEEL and RECORD."""
    dist = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    members = {**files, f"{dist}/METADATA": meta,
               f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    members[f"{dist}/RECORD"] = "".join(f"{m},,\n" for m in members) + f"{dist}/RECORD,,\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for m, text in members.items():
            z.writestr(m, text)
    return path


RESOLUTION = {  # what the fake pip resolves torch==2.13.0 to today
    "torch": ("2.13.0", {"torch/__init__.py": "", "torch/version.py": "__version__ = '2.13.0+cu130'\ncuda = '13.0'\n"},
              ["filelock", "nvidia-cuda-runtime==13.0.96"]),
    "filelock": ("4.3.1", {"filelock/__init__.py": "VERSION = '4.3.1'\n"}, []),
    "nvidia_cuda_runtime": ("13.0.96", {"nvidia/cuda_runtime/README": "stand-in\n"}, []),
}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache folder whose cu130 wheel folder already holds an earlier resolution's filelock 4.2.12 (and
    torch), and a fake `pip download` that saves today's resolution next to it."""
    monkeypatch.setenv("TORCH_SEGOPS_CACHE", str(tmp_path / "cache"))
    dest = tmp_path / "cache" / "wheels" / "cu130"
    dest.mkdir(parents=True)
    make_wheel(dest, "filelock", "4.2.12", {"filelock/__init__.py": "VERSION = '4.2.12'\n"})
    name, (version, files, requires) = "torch", RESOLUTION["torch"]
    make_wheel(dest, name, version, files, requires)
    real_run = oc.run
    calls = []

    def fake_run(cmd, **kw):
        if cmd[1:4] == ["-m", "pip", "download"]:
            calls.append(cmd)
            out = Path(cmd[cmd.index("--dest") + 1])
            lines = []
            for n, (v, f, r) in RESOLUTION.items():
                wheel = out / f"{n}-{v}-py3-none-any.whl"
                if wheel.exists():
                    lines.append(f"  File was already downloaded {wheel}")  # indented, as pip prints it
                else:
                    make_wheel(out, n, v, f, r)
                    lines.append(f"Saved {wheel}")
            return subprocess.CompletedProcess(cmd, 0, "Collecting torch==2.13.0\n" + "\n".join(lines)
                                               + "\nSuccessfully downloaded filelock nvidia-cuda-runtime torch\n", "")
        return real_run(cmd, **kw)

    monkeypatch.setattr(oc, "run", fake_run)
    return dest, calls


def test_only_the_resolved_files_are_used(cache):
    dest, calls = cache
    wheels = oc.download_cuda_wheels("13.0")
    assert len(calls) == 1
    assert [w.name for w in wheels] == ["filelock-4.3.1-py3-none-any.whl",
                                        "nvidia_cuda_runtime-13.0.96-py3-none-any.whl", "torch-2.13.0-py3-none-any.whl"]
    assert (dest / "filelock-4.2.12-py3-none-any.whl").exists()  # still there, not used
    manifest = json.loads((dest / "resolution-torch_2.13.0.json").read_text())
    assert manifest == {"spec": "torch==2.13.0", "wheels": [w.name for w in wheels]}


def test_cuda_channel_builds_from_a_folder_with_two_resolutions(cache, tmp_path):
    """The failure of the issue: with filelock 4.2.12 and 4.3.1 both in the folder, the channel build
    installed both and pip stopped (ResolutionImpossible). Now it packages 4.3.1 only."""
    base = tmp_path / "cache" / "offline-channel"
    base.mkdir(parents=True)
    (base / "STANDIN-CHANNEL.json").write_text(json.dumps({"fingerprint": "test", "packages": []}))
    channel = oc.ensure_cuda_channel("13.0", base)
    stamp = json.loads((channel / "STANDIN-CHANNEL.json").read_text())
    made = sorted(stamp["packages"])
    assert [p for p in made if p.startswith("filelock-")] == ["filelock-4.3.1-standin_0"], made
    assert any(p.startswith("pytorch-2.13.0-cuda130_standin_0") for p in made), made
    assert {"cuda-cudart-13.0.96-standin_0", "cuda-cudart-dev-13.0.96-standin_0"} <= set(made), made
    repodata = json.loads((channel / oc.SUBDIR / "repodata.json").read_text())
    files = [*repodata.get("packages", {}), *repodata.get("packages.conda", {})]
    assert [f for f in files if f.startswith("filelock-")] == ["filelock-4.3.1-standin_0.conda"], files


def test_resolution_wheels_rejects_bad_pip_output(tmp_path):
    make_wheel(tmp_path, "filelock", "4.2.12", {})
    make_wheel(tmp_path, "filelock", "4.3.1", {})
    with pytest.raises(oc.ChannelError, match="named no wheel"):
        oc.resolution_wheels("ERROR: No matching distribution found for torch==9\n", tmp_path)
    with pytest.raises(oc.ChannelError, match="not in"):
        oc.resolution_wheels(f"Saved {tmp_path}/torch-2.13.0-py3-none-any.whl\n", tmp_path)
    with pytest.raises(oc.ChannelError, match="two wheels of filelock"):
        oc.resolution_wheels(f"Saved {tmp_path}/filelock-4.3.1-py3-none-any.whl\n"
                             f"  File was already downloaded {tmp_path}/filelock-4.2.12-py3-none-any.whl\n", tmp_path)


def test_resolution_wheels_reads_real_pip_output(tmp_path):
    """The parser against pip's own words, not the fake's: a first `pip download` saves the wheels, a second
    finds them already there (pip indents that line). Offline: --no-index from a local folder."""
    links, dest = tmp_path / "links", tmp_path / "dest"
    links.mkdir()
    make_wheel(links, "segops_probe_dep", "1.0", {"segops_probe_dep/__init__.py": ""})
    make_wheel(links, "segops_probe", "2.0", {"segops_probe/__init__.py": ""}, ["segops_probe_dep"])
    cmd = [sys.executable, "-m", "pip", "download", "--isolated", "--no-index", "--find-links", str(links),
           "--dest", str(dest), "segops_probe==2.0"]
    want = [dest / "segops_probe-2.0-py3-none-any.whl", dest / "segops_probe_dep-1.0-py3-none-any.whl"]
    first = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert oc.resolution_wheels(first, dest) == want, first
    second = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "already downloaded" in second, second
    assert oc.resolution_wheels(second, dest) == want, second
