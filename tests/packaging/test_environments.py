"""The environment files, the conda variant config and the doctor agree with data/compat.yaml, and the
table agrees with the CUDA toolkits themselves (nvcc's crt/host_config.h, ptxas' architecture list).

Needs: pyyaml, py-rattler (conda MatchSpec parsing). The CUDA 12.9 checks download the
nvidia-cuda-nvcc-cu12==12.9.86 wheel from PyPI once into a cache directory
($TORCH_SEGOPS_CACHE, default ~/.cache/torch-segops) and skip, saying why, when they cannot.
The CUDA 13.0 checks use the local toolkit (/usr/local/cuda or $CUDA_HOME) when it is 13.0.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from doctor_module import load_doctor

from tools import cuda_old_archs, cuda_toolchain

yaml = pytest.importorskip("yaml", reason="pyyaml is needed to read environments/*.yml and data/compat.yaml")

ROOT = Path(__file__).resolve().parents[2]
ENV_DIR = ROOT / "environments"
COMPAT = ROOT / "data" / "compat.yaml"
CBC = ROOT / "conda_build_config.yaml"


# ------------------------------------------------------------------------------------------------
# loading
# ------------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def compat() -> dict:
    return yaml.safe_load(COMPAT.read_text())


def cuda_row(version: str) -> dict:
    rows = [r for r in compat()["cuda"] if r["version"] == version]
    assert len(rows) == 1, f"data/compat.yaml has {len(rows)} rows for CUDA {version}"
    return rows[0]


def env_files() -> list[Path]:
    return sorted(ENV_DIR.glob("*.yml"))


@lru_cache(maxsize=None)
def load_env(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def conda_deps(env: dict) -> list[str]:
    return [d for d in env["dependencies"] if isinstance(d, str)]


def pip_deps(env: dict) -> list[str]:
    out: list[str] = []
    for d in env["dependencies"]:
        if isinstance(d, dict):
            assert set(d) == {"pip"}, f"unexpected dependency mapping {d}"
            out.extend(d["pip"])
    return out


def rattler():
    return pytest.importorskip("rattler", reason="py-rattler is needed to parse conda MatchSpecs (pip install py-rattler)")


def spec_for(env: dict, name: str):
    r = rattler()
    found = [r.MatchSpec(s) for s in conda_deps(env) if r.MatchSpec(s).name.normalized == name]
    assert len(found) == 1, f"{env['name']}: expected one spec for {name}, found {len(found)}"
    return found[0]


def record(name: str, version: str, build: str = "h0_0"):
    r = rattler()
    return r.PackageRecord(name=name, version=version, build=r.BuildString(build), build_number=0, subdir="linux-64")


def env_cuda(env: dict) -> str | None:
    """The CUDA version an environment pins with cuda-version, None for a CPU env."""
    specs = [s for s in conda_deps(env) if s.split()[0] == "cuda-version"]
    if not specs:
        return None
    m = re.fullmatch(r"cuda-version\s+(\d+\.\d+)\.\*", specs[0])
    assert m, f"{env['name']}: cuda-version must be pinned as 'cuda-version X.Y.*', got {specs[0]!r}"
    return m.group(1)


def dev_envs() -> list[Path]:
    return [p for p in env_files() if p.stem != "packaging"]


def cuda_envs() -> list[Path]:
    return [p for p in dev_envs() if env_cuda(load_env(p))]


def admitted_gcc_majors(spec) -> list[int]:
    return [g for g in range(4, 30) if spec.matches(record(spec.name.normalized, f"{g}.2.0"))]


# ------------------------------------------------------------------------------------------------
# the files exist and are well formed
# ------------------------------------------------------------------------------------------------
def test_expected_environment_files_exist():
    names = {p.name for p in env_files()}
    assert {"cpu.yml", "cuda-12.9.yml", "cuda-13.0.yml", "packaging.yml"} <= names
    assert len({load_env(p)["name"] for p in env_files()}) == len(names), "environment names must be unique"


@pytest.mark.parametrize("path", env_files(), ids=lambda p: p.name)
def test_conda_forge_only(path):
    env = load_env(path)
    assert env["channels"] == ["conda-forge", "nodefaults"], f"{path.name}: channels must be exactly conda-forge + nodefaults"
    for s in conda_deps(env):
        assert "::" not in s, f"{path.name}: {s!r} names a channel; only conda-forge is allowed"


def refused(env: dict) -> list[str]:
    """Dependencies that no environment may name: the legacy cudatoolkit (data/compat.yaml: cudatoolkit)."""
    pkg = compat()["cudatoolkit"]["package"]
    return [s for s in conda_deps(env) if re.split(r"[\s=<>!~]", s.split("::")[-1], maxsplit=1)[0] == pkg]


@pytest.mark.parametrize("path", env_files(), ids=lambda p: p.name)
def test_no_cudatoolkit(path):
    bad = refused(load_env(path))
    assert not bad, (f"{path.name}: {bad}: cudatoolkit is the pre-CUDA-12 package (CUDA <= "
                     f"{compat()['cudatoolkit']['last_version']}); use cuda-version + cuda-* packages")


@pytest.mark.parametrize("spec", ["cudatoolkit", "cudatoolkit 11.8.*", "cudatoolkit=11.8", "conda-forge::cudatoolkit>=11"])
def test_cudatoolkit_refusal_catches_every_spelling(spec):
    assert refused({"dependencies": ["python 3.12.*", spec]}) == [spec]
    assert refused({"dependencies": ["cudatoolkit-dev", "cuda-version 12.9.*"]}) == []


@pytest.mark.parametrize("path", env_files(), ids=lambda p: p.name)
def test_every_dependency_is_a_valid_matchspec(path):
    r = rattler()
    env = load_env(path)
    for s in conda_deps(env):
        ms = r.MatchSpec(s)  # raises InvalidMatchSpecError on malformed lines
        assert ms.name.normalized == s.split()[0], f"{path.name}: {s!r} parsed as package {ms.name.normalized!r}"
        # every token after the name is a version or a build pattern, never free text
        assert len(s.split()) <= 3, f"{path.name}: {s!r} has more than name, version and build"


@pytest.mark.parametrize("path", env_files(), ids=lambda p: p.name)
def test_python_is_pinned_and_allowed_by_pyproject(path):
    env = load_env(path)
    py = spec_for(env, "python")
    minor = [m for m in range(8, 20) if py.matches(record("python", f"3.{m}.1"))]
    assert len(minor) == 1, f"{path.name}: python must be pinned to one minor version, admits 3.{minor}"
    requires = re.search(r'requires-python\s*=\s*">=3\.(\d+)"', (ROOT / "pyproject.toml").read_text())
    assert requires and minor[0] >= int(requires.group(1)), "python pin is below pyproject's requires-python"


# ------------------------------------------------------------------------------------------------
# dev environments: pytorch build, toolchain, editable install
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", dev_envs(), ids=lambda p: p.name)
def test_pytorch_in_supported_range_and_matching_build(path):
    env = load_env(path)
    torch_spec = spec_for(env, "pytorch")
    cuda = env_cuda(env)
    build = f"cuda{cuda.replace('.', '')}_mkl_py312_h0123456_300" if cuda else "cpu_mkl_py312_h0123456_100"
    minimum = compat()["stable_abi"]["min_torch"]
    assert torch_spec.matches(record("pytorch", f"{minimum}.0", build)), f"{path.name}: must admit pytorch {minimum}"
    assert not torch_spec.matches(record("pytorch", "2.9.1", build)), f"{path.name}: must reject torch below {minimum}"
    # the build-string pattern selects exactly this variant
    other = ["cpu_generic_py312_h0_0"] + [f"cuda{r['version'].replace('.', '')}_mkl_py312_h0_300" for r in compat()["cuda"]]
    for b in other:
        want = b.startswith(f"cuda{cuda.replace('.', '')}_") if cuda else b.startswith("cpu_")
        assert torch_spec.matches(record("pytorch", "2.12.0", b)) == want, f"{path.name}: pytorch spec vs build {b}"


@pytest.mark.parametrize("path", dev_envs(), ids=lambda p: p.name)
def test_host_compilers_and_sysroot(path):
    env = load_env(path)
    cuda = env_cuda(env)
    gcc, gxx = admitted_gcc_majors(spec_for(env, "gcc_linux-64")), admitted_gcc_majors(spec_for(env, "gxx_linux-64"))
    assert gcc and gcc == gxx and len(gcc) == 1, f"{path.name}: gcc/g++ must be pinned to one and the same major ({gcc} vs {gxx})"
    sysroot = spec_for(env, "sysroot_linux-64")
    glibc = cuda_row(cuda)["conda_forge"]["c_stdlib_version"] if cuda else "2.17"
    assert sysroot.matches(record("sysroot_linux-64", f"{glibc}")), f"{path.name}: sysroot must be glibc {glibc}"
    for other in {"2.17", "2.28", "2.34"} - {glibc}:
        assert not sysroot.matches(record("sysroot_linux-64", other)), f"{path.name}: sysroot admits glibc {other}"
    if cuda:
        max_gcc = cuda_row(cuda)["max_gcc"]
        assert gcc[0] <= max_gcc, f"{path.name}: GCC {gcc[0]} is newer than nvcc {cuda} accepts (<= {max_gcc})"


@pytest.mark.parametrize("path", cuda_envs(), ids=lambda p: p.name)
def test_cuda_env_matches_table(path):
    env = load_env(path)
    cuda = env_cuda(env)
    row = cuda_row(cuda)  # asserts the table has this CUDA version
    nvcc_build = row["nvcc_build"]
    for pkg in ("cuda-nvcc", "cuda-cudart-dev", "cuda-version"):
        spec = spec_for(env, pkg)
        assert spec.matches(record(pkg, nvcc_build if pkg == "cuda-nvcc" else f"{cuda}.0")), f"{path.name}: {pkg} must admit CUDA {cuda}"
        for other in compat()["cuda"]:
            if other["version"] != cuda:
                assert not spec.matches(record(pkg, other["nvcc_build"])), f"{path.name}: {pkg} admits CUDA {other['version']}"
    assert any(s.split()[0] == "cudnn" for s in conda_deps(env)), f"{path.name}: cudnn missing"
    # conda-forge builds some pytorch >= the stable-ABI minimum for this CUDA version
    minimum = compat()["stable_abi"]["min_torch"]
    built = [r["torch"] for r in compat()["pytorch_conda_forge"] if cuda in r["cuda"]]
    assert any(tuple(map(int, t.split("."))) >= tuple(map(int, minimum.split("."))) for t in built), (
        f"data/compat.yaml confirms no conda-forge pytorch >= {minimum} built for CUDA {cuda}"
    )
    assert env.get("variables", {}).get("TORCH_SEGOPS_WITH_CUDA") == "1", f"{path.name}: variables must set TORCH_SEGOPS_WITH_CUDA=1"
    assert any("cmake.define.TORCH_SEGOPS_WITH_CUDA=ON" in p for p in pip_deps(env)), f"{path.name}: the editable build must be a CUDA build"


def test_cpu_env_has_no_cuda():
    env = load_env(ENV_DIR / "cpu.yml")
    assert env_cuda(env) is None
    assert not [s for s in conda_deps(env) if s.split()[0].startswith(("cuda", "cudnn"))]
    assert "TORCH_SEGOPS_WITH_CUDA" not in (env.get("variables") or {})
    assert not any("WITH_CUDA" in p for p in pip_deps(env))


def test_one_dev_env_per_table_cuda_version():
    assert sorted(env_cuda(load_env(p)) for p in cuda_envs()) == sorted(r["version"] for r in compat()["cuda"])
    for p in cuda_envs():
        assert p.name == f"cuda-{env_cuda(load_env(p))}.yml"


# pip accepts only these options on a requirements-file line (pip's req_file.SUPPORTED_OPTIONS*)
_PIP_LINE_OPTIONS = {"-e", "--editable", "--config-settings", "--hash", "--global-option", "-r", "-c", "--pre", "--index-url", "--extra-index-url", "-f", "--find-links"}


@pytest.mark.parametrize("path", dev_envs(), ids=lambda p: p.name)
def test_editable_install_entry(path):
    env = load_env(path)
    lines = pip_deps(env)
    assert len(lines) == 1, f"{path.name}: expected one pip line (the editable project)"
    tokens = lines[0].split()
    assert tokens[:2] == ["-e", ".."], f"{path.name}: pip line must start with '-e ..'"
    # conda and mamba run pip from the environment file's directory, so '..' is the repository root
    target = (path.parent / tokens[1]).resolve()
    assert target == ROOT and 'name = "torch-segops"' in (target / "pyproject.toml").read_text()
    # pip rejects --no-build-isolation (and any other global option) inside a requirements list
    for t in tokens[2:]:
        opt = t.split("=", 1)[0]
        assert opt in _PIP_LINE_OPTIONS, f"{path.name}: pip does not accept {opt!r} on a requirements line"
    # the isolated build is told where this env's torch is; the path's python matches the python pin
    torch_dir = [t.split("=", 2)[2] for t in tokens if t.startswith("--config-settings=cmake.define.TORCH_SEGOPS_TORCH_DIR=")]
    assert len(torch_dir) == 1, f"{path.name}: TORCH_SEGOPS_TORCH_DIR must be passed to the isolated build"
    py = spec_for(env, "python")
    m = re.fullmatch(r"\$\{CONDA_PREFIX\}/lib/python(3\.\d+)/site-packages/torch", torch_dir[0])
    assert m and py.matches(record("python", f"{m.group(1)}.0")), f"{path.name}: {torch_dir[0]} does not match the python pin"
    assert spec_for(env, "pip").matches(record("pip", "24.0")) and not spec_for(env, "pip").matches(record("pip", "23.3.2")), (
        f"{path.name}: pip >= 24 is needed for --config-settings on a requirements line"
    )


def test_packaging_env_has_both_builders():
    env = load_env(ENV_DIR / "packaging.yml")
    names = {s.split()[0] for s in conda_deps(env)}
    assert {"rattler-build", "conda-build"} <= names


# ------------------------------------------------------------------------------------------------
# conda_build_config.yaml (the recipe's variants) agrees with the table and the environments
# ------------------------------------------------------------------------------------------------
def _cbc() -> dict:
    """The file as conda-build reads it on linux-64 (its osx/win lines, `# [osx or win]`, dropped)."""
    if not CBC.exists():
        pytest.skip("conda_build_config.yaml does not exist yet (owned by the recipe work)")
    ns = {"linux": True, "linux64": True, "unix": True, "x86_64": True, "osx": False, "win": False, "arm64": False,
          "aarch64": False}
    lines = []
    for line in CBC.read_text().splitlines():
        m = re.search(r"#\s*\[(.*)\]\s*$", line)
        if m and not eval(m.group(1), {"__builtins__": {}}, ns):  # noqa: S307 (our own file)
            continue
        lines.append(line)
    return yaml.safe_load("\n".join(lines))


def _cbc_rows(cbc: dict) -> list[dict]:
    keys = ["cuda_compiler_version", "c_compiler_version", "cxx_compiler_version", "c_stdlib_version"]
    groups = [set(g) for g in cbc.get("zip_keys", [])]
    assert any(set(keys) <= g for g in groups), f"zip_keys must zip {keys}, got {cbc.get('zip_keys')}"
    cols = [cbc[k] for k in keys]
    assert len({len(c) for c in cols}) == 1, f"zipped keys differ in length: {[len(c) for c in cols]}"
    return [dict(zip(keys, vals)) for vals in zip(*cols)]


def test_cbc_cuda_versions_match_environments():
    rows = _cbc_rows(_cbc())
    cuda = sorted(str(r["cuda_compiler_version"]) for r in rows if str(r["cuda_compiler_version"]) != "None")
    assert any(str(r["cuda_compiler_version"]) == "None" for r in rows), "conda_build_config.yaml needs a CPU (None) variant"
    assert cuda == sorted(env_cuda(load_env(p)) for p in cuda_envs()) == sorted(r["version"] for r in compat()["cuda"])


def test_cbc_compilers_and_stdlib_match_table():
    for r in _cbc_rows(_cbc()):
        gcc, gxx = int(str(r["c_compiler_version"]).split(".")[0]), int(str(r["cxx_compiler_version"]).split(".")[0])
        assert gcc == gxx, f"c/cxx compiler versions differ in {r}"
        cuda = str(r["cuda_compiler_version"])
        if cuda == "None":
            continue
        row = cuda_row(cuda)
        assert gcc <= row["max_gcc"], f"CUDA {cuda} variant uses GCC {gcc}; nvcc {cuda} accepts <= {row['max_gcc']}"
        assert str(r["c_stdlib_version"]) == row["conda_forge"]["c_stdlib_version"], f"CUDA {cuda}: glibc {r['c_stdlib_version']}"
        env = load_env(ENV_DIR / f"cuda-{cuda}.yml")
        assert spec_for(env, "sysroot_linux-64").matches(record("sysroot_linux-64", str(r["c_stdlib_version"]))), (
            f"cuda-{cuda}.yml and conda_build_config.yaml use different sysroots"
        )


# ------------------------------------------------------------------------------------------------
# the table itself, and the facts it states, checked against their sources where we have them
# ------------------------------------------------------------------------------------------------
def test_table_rows_are_sourced_and_consistent():
    c = compat()
    assert c["stable_abi"]["source"]
    for row in c["cuda"]:
        for key in ("max_gcc_source", "archs_source", "min_driver_source"):
            assert row[key].strip(), f"CUDA {row['version']}: {key} empty"
        assert row["conda_forge"]["source"].strip()
        assert row["oldest_arch"] == min(row["archs"]) and row["newest_arch"] == max(row["archs"])
        assert row["conda_forge"]["c_compiler_version"] <= row["max_gcc"]
    for row in c["pytorch_conda_forge"]:
        assert row["source"].strip()
        assert set(row["cuda"]) <= {r["version"] for r in c["cuda"]}, f"pytorch {row['torch']}: unknown CUDA version"


def test_stable_abi_minimum_matches_build_files():
    minimum = compat()["stable_abi"]["min_torch"]
    cmake = re.search(r'set\(TORCH_SEGOPS_TORCH_TARGET "([\d.]+)"', (ROOT / "CMakeLists.txt").read_text())
    assert cmake and cmake.group(1) == minimum
    assert f'"torch>={minimum}"' in (ROOT / "pyproject.toml").read_text()


def test_doctor_constants_match_table():
    doctor = load_doctor()
    c = compat()
    assert doctor.records.MIN_TORCH == c["stable_abi"]["min_torch"]
    assert doctor.records.MIN_DRIVER_LINUX == {int(r["version"].split(".")[0]): r["min_driver_linux"] for r in c["cuda"]}
    assert doctor.records.OLDEST_ARCH == {int(r["version"].split(".")[0]): r["oldest_arch"] for r in c["cuda"]}
    assert doctor.records.SUGGESTED_CUDA in {r["version"] for r in c["cuda"]}
    assert (doctor.records.CUDATOOLKIT, doctor.records.CUDATOOLKIT_LAST) == (c["cudatoolkit"]["package"], c["cudatoolkit"]["last_version"])


# --- toolkits ----------------------------------------------------------------------------------
def host_config_max_gcc(text: str) -> int:
    """nvcc's host-compiler gate: '#if __GNUC__ > N' followed by '#error -- unsupported GNU version'."""
    m = re.search(r"#if __GNUC__ > (\d+)\s*\n\s*#error -- unsupported GNU version", text)
    assert m, "crt/host_config.h has no GNU version gate"
    return int(m.group(1))


def ptxas_archs(ptxas: str) -> tuple[set[int], set[str], set[str]]:
    """Real architectures ptxas accepts for --gpu-name: (plain, arch-specific 'a', family 'f')."""
    text = subprocess.run([ptxas, "--help"], capture_output=True, text=True, check=True).stdout
    seg = text[text.index("--gpu-name") :]
    seg = seg[seg.index("Allowed values") : seg.index("\n--", seg.index("Allowed values"))]
    names = set(re.findall(r"'sm_(\d+[af]?)'", seg)) or set(re.findall(r"'compute_(\d+[af]?)'", seg))
    plain = {int(n) for n in names if n.isdigit()}
    return plain, {n for n in names if n.endswith("a")}, {n for n in names if n.endswith("f")}


def check_toolkit_against_row(row: dict, host_config: Path, ptxas: Path, version_text: str):
    assert f"release {row['version']}, V{row['nvcc_build']}" in version_text, f"toolkit is not {row['nvcc_build']}: {version_text}"
    assert host_config_max_gcc(host_config.read_text()) == row["max_gcc"]
    plain, arch_a, fam_f = ptxas_archs(str(ptxas))
    assert plain == set(row["archs"]), f"CUDA {row['version']}: ptxas archs {sorted(plain)} != table {row['archs']}"
    assert arch_a == set(row["arch_specific"]) and fam_f == set(row["family_specific"])


def _local_toolkit() -> Path | None:
    for base in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if base and (Path(base) / "bin" / "nvcc").exists():
            return Path(base)
    nvcc = shutil.which("nvcc")
    return Path(nvcc).resolve().parents[1] if nvcc else None


def test_cuda_13_0_toolkit_matches_table():
    tk = _local_toolkit()
    if tk is None:
        pytest.skip("no local CUDA toolkit (nvcc) to check the CUDA 13.0 row against")
    version = subprocess.run([str(tk / "bin" / "nvcc"), "--version"], capture_output=True, text=True).stdout
    if "release 13.0," not in version:
        pytest.skip(f"local toolkit at {tk} is not CUDA 13.0")
    row = cuda_row("13.0")
    check_toolkit_against_row(row, tk / "include" / "crt" / "host_config.h", tk / "bin" / "ptxas", version)
    listed = subprocess.run([str(tk / "bin" / "nvcc"), "--list-gpu-arch"], capture_output=True, text=True, check=True).stdout.split()
    assert {int(a.split("_")[1]) for a in listed} == set(row["archs"])


def _nvcc_12_9() -> Path:
    """host_config.h and ptxas of the CUDA 12.9 nvcc wheel (downloaded once) in the cache."""
    try:
        return Path(cuda_old_archs.nvcc12_wheel_dir())
    except RuntimeError as e:
        pytest.skip(f"{e}: the CUDA 12.9 row is not checked")


def test_cuda_12_9_toolkit_matches_table():
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        pytest.skip("the 12.9 ptxas in the wheel is a linux-x86_64 binary")
    dest = _nvcc_12_9()
    ptxas = dest / "nvidia/cuda_nvcc/bin/ptxas"
    version = subprocess.run([str(ptxas), "--version"], capture_output=True, text=True, check=True).stdout
    check_toolkit_against_row(cuda_row("12.9"), dest / "nvidia/cuda_nvcc/include/crt/host_config.h", ptxas, version)


def test_host_config_parser_reads_the_gate():
    # the parser must find the limit in the header's own wording, and not accept a different gate
    text = "#if defined(__GNUC__)\n\n#if __GNUC__ > 14\n\n#error -- unsupported GNU version! gcc versions later than 14\n#endif\n"
    assert host_config_max_gcc(text) == 14
    with pytest.raises(AssertionError):
        host_config_max_gcc("#if __clang_major__ >= 21\n#error -- unsupported clang version!\n")


# ------------------------------------------------------------------------------------------------
# cmake/cuda_architectures.txt (the single list) against conda-forge's pytorch, the doctor and the docs
# ------------------------------------------------------------------------------------------------
GENERATION_CC = {"Maxwell": (5, 0), "Pascal": (6, 0), "Volta": (7, 0), "Turing": (7, 5), "Ampere": (8, 0),
                 "Ada": (8, 9), "Hopper": (9, 0), "Blackwell": (10, 0)}


def arch_row(cuda: str) -> list[str]:
    row = cuda_toolchain.default_archs(cuda)
    assert row, f"cmake/cuda_architectures.txt has no row for nvcc {cuda}"
    return row.split(";")


def sass_of(row: list[str]) -> list[int]:
    return [int(a.split("-")[0]) for a in row if a.endswith("-real")]


def test_arch_rows_run_wherever_conda_forge_pytorch_runs():
    """Every GPU (each cc the toolkit knows) that conda-forge's pytorch build runs natively runs our SASS
    too, and every GPU it reaches by PTX JIT we reach by SASS or PTX."""
    doctor = load_doctor()
    table = compat()["pytorch_conda_forge_archs"]
    assert table["source"].strip() and table["nvcc12_here"].strip()
    for build in table["builds"]:
        ours = arch_row(build["cuda"])
        theirs = [f"{s}-real" for s in build["sass"]] + [f"{p}-virtual" for p in build["ptx"]]
        for cc in build.get("runs_on") or cuda_row(build["cuda"])["archs"]:
            gpu = (cc // 10, cc % 10)
            want, _ = doctor.checks.arch_support(gpu, theirs)
            got, _ = doctor.checks.arch_support(gpu, ours)
            if want == "sass":
                assert got == "sass", f"CUDA {build['cuda']} {build['platforms']}: pytorch has SASS for sm_{cc}, we have {got}"
            elif want == "ptx":
                assert got in ("sass", "ptx"), f"CUDA {build['cuda']}: pytorch runs on sm_{cc} by PTX, we do not"


def test_doctor_oldest_arch_is_the_rows_oldest():
    doctor = load_doctor()
    for r in compat()["cuda"]:
        major = int(r["version"].split(".")[0])
        assert doctor.records.OLDEST_ARCH[major] == min(sass_of(arch_row(r["version"]))), f"CUDA {r['version']}"


def test_docs_cuda_table_repeats_the_rows():
    text = (ROOT / "docs" / "cuda.md").read_text()
    table = re.findall(r"^\| [\d.]+(?: - [\d.]+|\.x) \| `([^`]+)` \|$", text, re.M)
    assert table == [archs for _, archs in cuda_toolchain.arch_table()], "docs/cuda.md's table differs from cmake/cuda_architectures.txt"


def test_readme_lists_each_packages_architectures():
    readme = (ROOT / "README.md").read_text()
    for cuda in ("12.9", "13.0"):
        tag = "cuda" + cuda.replace(".", "")
        m = re.search(rf"^\| `{tag}` \(nvcc {re.escape(cuda)}\) \| ([^|]+) \| ([^|]+) \|", readme, re.M)
        assert m, f"README.md has no architecture row for {tag}"
        row = arch_row(cuda)
        assert [int(x) for x in re.findall(r"sm_(\d+)", m.group(1))] == sass_of(row), f"README.md {tag} SASS"
        assert [int(x) for x in re.findall(r"compute_(\d+)", m.group(2))] == \
            [int(a.split("-")[0]) for a in row if a.endswith("-virtual")], f"README.md {tag} PTX"


def _gpus_named(text: str) -> list[tuple[int, int]]:
    """The GPUs a sentence promises: generation names and sm_NN (sm_5x-style families are skipped)."""
    gens = [GENERATION_CC[g] for g in re.findall(r"\b(" + "|".join(GENERATION_CC) + r")\b", text)]
    return gens + [(int(n) // 10, int(n) % 10) for n in re.findall(r"\bsm_(\d{2,3})\b", text)]


def test_environment_files_and_docs_promise_only_shipped_archs():
    """Each GPU that the environment files' headers, README's and docs/environments.md's environment tables
    name for a CUDA version runs the SASS of that version's row (the doctor's rule)."""
    doctor = load_doctor()
    claims = []
    for cuda in ("12.9", "13.0"):
        lines = (ENV_DIR / f"cuda-{cuda}.yml").read_text().splitlines()
        header = " ".join(line.lstrip("# ") for line in lines[:2])
        m = re.search(r"from \w+ \(sm_(\d+)\) to", header)
        assert m and int(m.group(1)) == min(sass_of(arch_row(cuda))), f"cuda-{cuda}.yml: {header}"
        claims.append((cuda, f"cuda-{cuda}.yml header", header.split(". ")[0]))
        for doc in ("README.md", "docs/environments.md"):
            for line in (ROOT / doc).read_text().splitlines():
                if line.startswith("|") and f"cuda-{cuda}.yml" in line:
                    claims.append((cuda, doc, line))
    assert len(claims) >= 6, claims
    for cuda, where, text in claims:
        for gpu in _gpus_named(text):
            got, _ = doctor.checks.arch_support(gpu, arch_row(cuda))
            assert got == "sass", f"{where} names sm_{gpu[0]}{gpu[1]} for CUDA {cuda}; the package has {got}: {text}"
