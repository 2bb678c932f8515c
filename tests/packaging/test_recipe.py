"""The conda recipes: recipe.yaml rendered for every variant, meta.yaml kept in step, conda-forge rules.

Fast (no build): renders recipe/recipe.yaml with conda_build_config.yaml through rattler-build's Python
API, and evaluates recipe-v0/meta.yaml (conda-build format) with jinja2 and a small selector evaluator.
The end-to-end build is in test_recipe_e2e.py.
"""

from __future__ import annotations

import functools
import re
import tomllib
from pathlib import Path

import jinja2
import pytest
import yaml

from tools import conda_tools as ct

REPO = Path(__file__).resolve().parents[2]

ct.require_tools()
import rattler  # noqa: E402
from rattler_build import Stage0Recipe  # noqa: E402

PLATFORMS = ["linux-64", "linux-aarch64", "osx-64", "osx-arm64", "win-64"]
VARIANTS = ["cpu", "cuda129", "cuda130"]
# conda-forge's pytorch: cpu on osx (MPS lives in torch itself), cpu and CUDA on linux and win
PLATFORM_VARIANTS = {p: ["cpu"] if p.startswith("osx") else VARIANTS for p in PLATFORMS}
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# the newest GCC each nvcc accepts as host compiler
NVCC_MAX_GCC = {"12.9": 14, "13.0": 15}


PAIRS = [(p, n) for p in PLATFORMS for n in PLATFORM_VARIANTS[p]]


@functools.lru_cache(maxsize=None)
def rendered_for(platform: str) -> dict:
    return {ct.variant_name(v.variant): v for v in ct.render(platform=platform)}


@pytest.fixture(scope="module", params=PLATFORMS)
def rendered(request):
    return rendered_for(request.param), request.param


def reqs(v, kind):
    return [str(x) for x in v.recipe.requirements.to_dict().get(kind, [])]


def by_name(specs, name):
    return [s for s in specs if s.split()[0] == name]


# ---------------------------------------------------------------------------------------------
# recipe.yaml, rendered
# ---------------------------------------------------------------------------------------------

def test_variants_per_platform(rendered):
    variants, platform = rendered
    assert sorted(variants) == PLATFORM_VARIANTS[platform], f"{platform}: {sorted(variants)}"


def test_build_strings_and_numbers(rendered):
    variants, _ = rendered
    seen = set()
    for name, v in variants.items():
        b = v.recipe.build
        number = 0 if name == "cpu" else 200  # CUDA ranks above cpu, never below
        assert b.number == number, (name, b.number)
        assert re.fullmatch(rf"{name}_h[0-9a-f]{{7}}_{number}", b.string), b.string
        assert v.hash_info.hash in b.string
        assert not re.search(r"py\d", b.string), f"python must not be in the build string: {b.string}"
        seen.add(b.string)
    assert len(seen) == len(variants)


def test_cuda_pins(rendered):
    variants, platform = rendered
    for name, v in variants.items():
        cv = v.variant["cuda_compiler_version"]
        build, host, run = reqs(v, "build"), reqs(v, "host"), reqs(v, "run")
        if name == "cpu":
            assert cv == "None"
            assert not by_name(run, "__cuda") and not by_name(host, "cuda-version")
            assert not [s for s in build if s.startswith("cuda-nvcc")]
        else:
            assert name == "cuda" + cv.replace(".", "")
            assert by_name(run, "__cuda") == ["__cuda"]
            assert by_name(host, "cuda-version") == [f"cuda-version {cv}.*"]
            assert by_name(build, f"cuda-nvcc_{platform}") == [f"cuda-nvcc_{platform} {cv}.*"]
            assert "cuda-cudart-dev" in host


def test_pytorch_pins_and_run_exports(rendered):
    """Host: the version from the `pytorch` pin (a bare name, as conda-forge's linter wants), the build
    string (cpu/cuda) from a second, version-less line."""
    variants, _ = rendered
    torch_target = re.search(r'TORCH_SEGOPS_TORCH_TARGET "([0-9.]+)"', (REPO / "CMakeLists.txt").read_text()).group(1)
    for name, v in variants.items():
        kind = "cpu" if name == "cpu" else "cuda"
        host, run = reqs(v, "host"), reqs(v, "run")
        assert by_name(host, "pytorch") == ["pytorch", f"pytorch * {kind}*"] and v.variant["pytorch"] == "2.10"
        # one binary for every torch >= the stable-ABI target: no upper bound, pytorch's run-export ignored
        assert by_name(run, "pytorch") == [f"pytorch >={torch_target} {kind}*"]
        assert v.recipe.requirements.to_dict()["ignore_run_exports"] == {"from_package": ["pytorch"]}


HWY_MIN = re.search(r"set\(TORCH_SEGOPS_HWY_MIN_VERSION ([\d.]+)\)", (REPO / "cmake" / "highway.cmake").read_text()).group(1)


def test_highway_in_host_and_run(rendered):
    """Google Highway (conda-forge's libhwy) in host, bare (the global pinning's version; its headers, CMake
    package and libhwy.so.1), and in run from cmake/highway.cmake's minimum to the next soname (libhwy's
    run-export narrows it to the minor version built against); every variant, no selector."""
    variants, _ = rendered
    for name, v in variants.items():
        assert by_name(reqs(v, "host"), "libhwy") == ["libhwy"], name
        assert by_name(reqs(v, "run"), "libhwy") == [f"libhwy >={HWY_MIN},<{int(HWY_MIN.split('.')[0]) + 1}"], name
    for path in ("recipe/recipe.yaml", "recipe-v0/meta.yaml"):
        lines = [ln for ln in (REPO / path).read_text().splitlines() if re.search(r"^\s*- libhwy\b", ln)]
        assert len(lines) == 2 and not any("# [" in ln for ln in lines), (path, lines)


def test_build_scripts_never_download_highway():
    """TORCH_SEGOPS_HWY=system (the host's libhwy or a configure error, never cmake/highway.cmake's download),
    set before pip runs CMake; recipe-v0's scripts run these. pyproject.toml passes the variable to CMake."""
    for script, setting, pip in (("build.sh", "export TORCH_SEGOPS_HWY=system", '"${PYTHON}" -m pip install'),
                                 ("build.bat", 'set "TORCH_SEGOPS_HWY=system"', '"%PYTHON%" -m pip install')):
        text = (REPO / "recipe" / script).read_text()
        assert text.count("TORCH_SEGOPS_HWY") == 1 and -1 < text.find(setting) < text.find(pip), script
    assert PYPROJECT["tool"]["scikit-build"]["cmake"]["define"]["TORCH_SEGOPS_HWY"]["env"] == "TORCH_SEGOPS_HWY"


def test_rpath_to_the_environments_lib():
    """_C.so is installed in lib/pythonX.Y/site-packages/torch_segops: build.sh gives it an rpath three levels up,
    the environment's lib (libhwy's folder), and recipe.yaml allow-lists exactly that, which rattler-build drops
    otherwise (it counts from the package's site-packages/, so its own `lib/` rpath lands in lib/pythonX.Y/lib).
    test_recipe_e2e checks that the installed package loads the environment's libhwy."""
    sh = (REPO / "recipe" / "build.sh").read_text()
    rpaths = re.findall(r"export TORCH_SEGOPS_INSTALL_RPATH='([^']+)'", sh)
    assert rpaths == ["@loader_path/../../..", "$ORIGIN/../../.."] and sh.find("INSTALL_RPATH") < sh.find("pip install")
    linking = Stage0Recipe.from_file(REPO / "recipe" / "recipe.yaml").build.to_dict()["dynamic_linking"]
    assert sorted(linking["rpath_allowlist"]) == sorted(rpaths), linking
    assert PYPROJECT["tool"]["scikit-build"]["cmake"]["define"]["TORCH_SEGOPS_INSTALL_RPATH"]["env"] == \
        "TORCH_SEGOPS_INSTALL_RPATH"
    assert 'INSTALL_RPATH "${TORCH_SEGOPS_INSTALL_RPATH}"' in (REPO / "CMakeLists.txt").read_text()


def test_python_independent(rendered):
    variants, _ = rendered
    requires_python = PYPROJECT["project"]["requires-python"]
    scripts = [f"{k} = {e}" for k, e in PYPROJECT["project"]["scripts"].items()]
    for v in variants.values():
        d = v.recipe.to_dict()
        assert d["build"]["python"]["version_independent"] is True
        assert d["build"]["python"]["entry_points"] == scripts
        assert by_name(reqs(v, "run"), "python") == [f"python {requires_python}"]
        python_min = requires_python.removeprefix(">=")
        assert v.variant["python_min"] == python_min and "python" not in v.variant
        assert reqs(v, "host")[0] == f"python {python_min}.*"
        assert [t["python"]["python_version"] for t in d["tests"] if "python" in t] == [[f"{python_min}.*", "*"]]


def test_compilers(rendered):
    """linux: GCC and the sysroot zipped per variant (nvcc's GCC limit); osx and win: test_osx_win_toolchains."""
    variants, platform = rendered
    if not platform.startswith("linux"):
        return test_osx_win_toolchains(rendered)
    stdlib = {"cpu": "2.17", "cuda129": "2.17", "cuda130": "2.28"}
    for name, v in variants.items():
        var, build = v.variant, reqs(v, "build")
        gcc = int(var["c_compiler_version"])
        assert int(var["cxx_compiler_version"]) == gcc
        assert by_name(build, f"gcc_{platform}") == [f"gcc_{platform} {gcc}.*"]
        assert by_name(build, f"gxx_{platform}") == [f"gxx_{platform} {gcc}.*"]
        assert by_name(build, f"sysroot_{platform}") == [f"sysroot_{platform} {stdlib[name]}.*"]
        if name != "cpu":
            assert gcc <= NVCC_MAX_GCC[var["cuda_compiler_version"]], (name, gcc)


def test_osx_win_toolchains(rendered):
    """conda-forge's toolchains: clang (libc++) and the macOS deployment target on osx, MSVC 2022 on win; the
    build script per platform (cmd's build.bat on win)."""
    variants, platform = rendered
    for name, v in variants.items():
        build = reqs(v, "build")
        script = v.recipe.to_dict()["build"]["script"]
        if platform.startswith("win"):
            assert script == {"interpreter": "cmd", "file": "build.bat"}, script
            assert by_name(build, "vs2022_win-64") == ["vs2022_win-64", "vs2022_win-64"], build
            assert by_name(build, "vs_win-64") == ["vs_win-64 2019.*"], build
        else:
            assert script == {"interpreter": "bash", "file": "build.sh"}, script
        if platform.startswith("osx"):
            target = {"osx-64": "10.13", "osx-arm64": "11.0"}[platform]
            assert by_name(build, f"clang_{platform}") == [f"clang_{platform}"], build
            assert by_name(build, f"clangxx_{platform}") == [f"clangxx_{platform}"], build
            assert by_name(build, f"macosx_deployment_target_{platform}") == [f"macosx_deployment_target_{platform} {target}.*"]
        if not platform.startswith("linux"):
            assert not [s for s in build if s.startswith(("gcc", "gxx", "sysroot"))], build


def test_cross_build_adds_cross_python():
    """conda-forge cross-compiles osx-arm64 on osx-64 (conda-forge.yml): both recipes then put python and
    cross-python_osx-arm64 into the build environment (CMake finds the host's torch through it); a
    native build has neither."""
    cfg = yaml.safe_load((REPO / "conda-forge.yml").read_text())
    assert cfg["build_platform"]["osx_arm64"] == "osx_64" and cfg["test"] == "native_and_emulated"
    cross = {ct.variant_name(v.variant): v for v in ct.render(platform="osx-arm64", build_platform="osx-64")}["cpu"]
    build = reqs(cross, "build")
    assert by_name(build, "python") == ["python"] and by_name(build, "cross-python_osx-arm64") == ["cross-python_osx-arm64"]
    meta = render_meta("osx-arm64", {k: str(x) for k, x in cross.variant.items()}, cross.hash_info.hash, build_platform="osx-64")
    assert [norm(s) for s in meta["requirements"]["build"]] == [norm(s) for s in build]
    native = reqs(rendered_for("osx-arm64")["cpu"], "build")
    assert not by_name(native, "python") and not by_name(native, "cross-python_osx-arm64"), native


def test_package_metadata(rendered):
    variants, _ = rendered
    for v in variants.values():
        r = v.recipe
        assert (r.package.name, r.package.version) == (PYPROJECT["project"]["name"], PYPROJECT["project"]["version"])
        about = r.about.to_dict()
        assert about["license"] == PYPROJECT["project"]["license"]
        assert about["license_file"] == ["LICENSE"] and (REPO / "LICENSE").is_file()
        for key in ("homepage", "repository", "documentation", "summary", "description"):
            assert about.get(key), key


def test_tests_section(rendered):
    """More than an import: pip check, the op on real data and the CPU test suite; test tools stay out of run."""
    variants, _ = rendered
    for name, v in variants.items():
        tests = v.recipe.to_dict()["tests"]
        py = [t["python"] for t in tests if "python" in t]
        assert py and py[0]["imports"] == ["torch_segops"] and py[0].get("pip_check", True) is True
        script = [t for t in tests if "script" in t][0]
        assert any("test_package.py" in line for line in script["script"])
        assert any("pytest" in line for line in script["script"])
        assert "tests/api/test_ops*.py" in script["files"]["source"]
        test_only = set(script["requirements"]["run"])
        assert {"pytest", "hypothesis"} <= test_only
        assert not test_only & {s.split()[0] for s in reqs(v, "run")}, "test-only tools must not be run deps"
        for f in script["files"]["source"]:
            assert list(REPO.glob(f)), f"test file pattern {f} matches nothing"


def test_shipped_recipe_has_no_offline_settings():
    text = "".join((REPO / p).read_text() for p in ("recipe/recipe.yaml", "recipe-v0/meta.yaml", "recipe/build.sh",
                                                      "conda_build_config.yaml"))
    assert "standin" not in text.lower() and "offline" not in text.lower()
    assert not re.search(r"CUDAARCHS=[\"']?\d|CMAKE_CUDA_ARCHITECTURES|sm_\d|compute_\d", text), "arches come from cmake/"


# ---------------------------------------------------------------------------------------------
# meta.yaml, evaluated like conda-build does, against recipe.yaml
# ---------------------------------------------------------------------------------------------

def selector_namespace(platform: str, variant: dict, build_platform: str | None = None) -> dict:
    os_, arch = platform.split("-")
    ns = {"linux": os_ == "linux", "osx": os_ == "osx", "win": os_ == "win", "unix": os_ != "win",
          "x86_64": arch == "64", "aarch64": arch == "aarch64", "arm64": arch == "arm64", "linux64": platform == "linux-64",
          "win64": platform == "win-64",
          "target_platform": platform, "build_platform": build_platform or platform, "environ": {}}
    ns.update(variant)
    return ns


def eval_selectors(text: str, ns: dict) -> str:
    """Keep a line whose `# [expr]` selector is true (Python expression, as in conda-build)."""
    out = []
    for line in text.splitlines():
        m = re.search(r"#\s*\[(.*)\]\s*$", line)
        if m:
            if not eval(m.group(1), {"__builtins__": {}}, ns):  # noqa: S307 (our own recipe)
                continue
            line = line[: m.start()].rstrip()
        out.append(line)
    return "\n".join(out)


def render_meta(platform: str, variant: dict, pkg_hash: str, environ: dict | None = None,
                build_platform: str | None = None) -> dict:
    ns = selector_namespace(platform, variant, build_platform)
    ns["environ"] = environ or {}
    ns["build_platform"] = build_platform or platform

    def compiler(lang):  # conda-build's default compilers where the variant names none (osx: clang, unversioned)
        default = {"c": {"linux": "gcc", "osx": "clang", "win": "vs2017"}, "cxx": {"linux": "gxx", "osx": "clangxx", "win": "vs2017"},
                   "cuda": {"linux": "cuda-nvcc", "osx": "cuda-nvcc", "win": "cuda-nvcc"}}[lang][platform.split("-")[0]]
        version = variant.get(lang + "_compiler_version")
        return f"{variant.get(lang + '_compiler', default)}_{platform}" + (f" {version}" if version else "")

    def stdlib(lang):
        return f"{variant[lang + '_stdlib']}_{platform} {variant[lang + '_stdlib_version']}"

    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    text = eval_selectors(ct.META.read_text(), ns)
    text = env.from_string(text).render(**ns, compiler=compiler, stdlib=stdlib, PKG_HASH=pkg_hash)
    return yaml.safe_load(text)


def norm(spec: str) -> str:
    """conda semantics: a bare version in a match spec is fuzzy (`gcc 14` == `gcc 14.*`)."""
    parts = spec.split()
    if len(parts) >= 2 and re.fullmatch(r"\d[\w.]*", parts[1]) and not parts[1].endswith("*"):
        parts[1] += ".*"
    return str(rattler.MatchSpec(" ".join(parts)))


def v1_context_render(line: str, context: dict) -> str:
    return jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(line.replace("${{", "{{")).render(**context)


@pytest.mark.parametrize("platform,name", PAIRS)
def test_meta_yaml_matches_recipe_yaml(platform, name):
    variants = rendered_for(platform)
    v = variants[name]
    r = v.recipe.to_dict()
    meta = render_meta(platform, {k: str(x) for k, x in v.variant.items()}, v.hash_info.hash)

    assert meta["package"] == {"name": r["package"]["name"], "version": r["package"]["version"]}
    assert (meta["build"]["number"], meta["build"]["string"]) == (r["build"]["number"], r["build"]["string"])
    assert meta["build"]["python_version_independent"] is r["build"]["python"]["version_independent"] is True
    # conda-build would both package an entry_points script and list it in link.json (installed
    # twice); v0 ships pip's console script from pyproject.toml, the same one v1 declares
    assert "entry_points" not in meta["build"]
    assert r["build"]["python"]["entry_points"] == [f"{k} = {e}" for k, e in PYPROJECT["project"]["scripts"].items()]
    assert meta["build"]["ignore_run_exports_from"] == r["requirements"]["ignore_run_exports"]["from_package"]
    # rendered, an unset CUDAARCHS is dropped: compare with the unrendered script env
    stage0_env = Stage0Recipe.from_file(REPO / "recipe" / "recipe.yaml").build.to_dict()["script"]["env"]
    assert list(stage0_env) == ["TORCH_SEGOPS_CUDAARCHS"] and "CUDAARCHS" in stage0_env["TORCH_SEGOPS_CUDAARCHS"]
    # CUDAARCHS unset: no script_env at all (conda-build warns about every script_env entry)
    assert meta["build"].get("script_env") is None
    set_meta = render_meta(platform, {k: str(x) for k, x in v.variant.items()}, v.hash_info.hash, {"CUDAARCHS": "75-real"})
    assert set_meta["build"]["script_env"] == ["TORCH_SEGOPS_CUDAARCHS=75-real"]
    # the same build script: v1's recipe/build.sh (build.bat on win), reached by v0 through its `recipe` source folder
    win = platform.startswith("win")
    assert r["build"]["script"].get("file") == ("build.bat" if win else "build.sh")
    assert "script" not in meta["build"]  # conda-build's default scripts beside meta.yaml call v1's
    assert (REPO / "recipe-v0" / "build.sh").read_text().splitlines()[-1] == "exec bash recipe/build.sh"
    assert "call recipe\\build.bat" in (REPO / "recipe-v0" / "bld.bat").read_text().splitlines()
    assert {"path": "../recipe", "folder": "recipe"} in meta["source"]
    assert r["source"] == [{"path": ".."}] or r["source"][0]["path"] == ".."
    for kind in ("build", "host", "run"):
        assert [norm(s) for s in meta["requirements"].get(kind, [])] == [norm(s) for s in reqs(v, kind)], kind

    tests = {next(iter(t)): t for t in r["tests"]}
    script = tests["script"]
    t = meta["test"]
    assert t["imports"] == tests["python"]["python"]["imports"]
    assert ("pip check" in t["commands"]) == tests["python"]["python"].get("pip_check", True)
    assert sorted(t["requires"]) == sorted(script["requirements"]["run"] + ["pip", f"python {v.variant['python_min']}"])
    assert "files" not in t  # test_package.py comes from the shared recipe/ folder of the source
    assert t["source_files"] == [f"recipe/{f}" for f in script["files"]["recipe"]] + script["files"]["source"]
    site = tests["package_contents"]["package_contents"]["site_packages"]
    if win:
        contents = ["if not exist %SP_DIR%\\" + f.replace("/", "\\") + " exit 1" for f in site]
    else:
        contents = [f"test -f ${{SP_DIR}}/{f}" for f in site]
    assert [c for c in t["commands"] if c.startswith(("test -f", "if not exist"))] == contents
    scripted = [v1_context_render(line, r["context"]) for line in script["script"]]
    assert [c.replace("python recipe/", "python ", 1) for c in t["commands"] if c.startswith("python ")] == scripted

    a = r["about"]
    assert (meta["about"]["home"], meta["about"]["dev_url"], meta["about"]["doc_url"]) == (
        a["homepage"], a["repository"], a["documentation"])
    for key in ("license", "summary", "description"):
        assert meta["about"][key].strip() == a[key].strip(), key
    assert [meta["about"]["license_file"]] == a["license_file"]


@pytest.mark.parametrize("cuda", ["None", "12.9"])
@pytest.mark.parametrize("platform", ["linux-64", "linux-aarch64", "osx-64", "osx-arm64", "win-64"])
def test_skip_agrees(platform, cuda):
    """rattler-build's Python render does not apply build.skip, so evaluate both recipes' conditions: only
    osx with CUDA is skipped (the variant config makes no such variant; the skip guards a packager's own)."""
    stage0 = Stage0Recipe.from_file(REPO / "recipe" / "recipe.yaml").build.to_dict()["skip"]
    ns = selector_namespace(platform, {"cuda_compiler_version": cuda})
    v1_skip = any(eval(cond, {"__builtins__": {}}, ns) for cond in stage0)  # noqa: S307
    meta_text = eval_selectors(ct.META.read_text(), ns)
    meta_skip = bool(re.search(r"^\s+skip: true\s*$", meta_text, re.M))
    assert v1_skip == meta_skip == (platform.startswith("osx") and cuda != "None")


# ---------------------------------------------------------------------------------------------
# conda-forge's rules (its linter and the global pinning; facts in data/compat.yaml)
# ---------------------------------------------------------------------------------------------
COMPAT = yaml.safe_load((REPO / "data" / "compat.yaml").read_text())
PINNING = COMPAT["conda_forge_pinning"]


def cbc_for(platform: str) -> dict:
    """conda_build_config.yaml as conda-build reads it on `platform` (selectors applied)."""
    return yaml.safe_load(eval_selectors(ct.CBC.read_text(), selector_namespace(platform, {}))) or {}


def test_one_recipe_file_per_folder():
    for folder in {p.parent for pat in ("meta.yaml", "recipe.yaml") for p in REPO.glob(f"*/{pat}")}:
        present = [f for f in ("meta.yaml", "recipe.yaml") if (folder / f).exists()]
        assert len(present) == 1, f"{folder.name}/ holds {present}: conda-forge's linter allows one recipe file per folder"
    assert ct.RECIPE.parent.name == "recipe" and ct.META.parent != ct.RECIPE.parent


def test_recipes_do_not_define_python_min():
    assert "python_min" not in Stage0Recipe.from_file(ct.RECIPE).to_dict().get("context", {})
    assert not re.search(r"{%-?\s*set\s+python_min\s*=", ct.META.read_text()), "python_min comes from the variant config"
    requires_python = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    assert cbc_for("linux-64")["python_min"] == [requires_python] == [PINNING["python_min"]]


@pytest.mark.parametrize("platform", ["linux-64", "linux-aarch64", "linux-ppc64le", "osx-64", "osx-arm64", "win-64"])
def test_cbc_zip_keys_layer_under_the_global_pinning(platform):
    cbc = cbc_for(platform)
    linux = platform.startswith("linux")
    global_groups = [PINNING["zip_keys"]["python"]] + (
        [PINNING["zip_keys"]["linux_cuda"]] if linux else [PINNING["zip_keys"]["unix"]] if not platform.startswith("win") else [])
    zipped = {k for g in global_groups for k in g}
    for group in cbc.get("zip_keys") or []:
        # conda-build pools every file's groups and de-duplicates ordered tuples: a group is only
        # harmless if it repeats a global one exactly, or shares no key with any
        assert group in global_groups or not set(group) & zipped, (
            f"{platform}: zip group {group} collides with the global pinning's {global_groups}")
    for g in global_groups:
        set_here = [k for k in g if k in cbc]
        if set_here:  # to override one key of a zip group, set all of them, with equal lengths
            assert set_here == g, f"{platform}: sets {set_here} of the zipped {g}"
            assert len({len(cbc[k]) for k in g}) == 1, f"{platform}: zipped keys {g} differ in length"
    if not linux:
        assert not cbc.get("zip_keys") and not set(cbc) & zipped, f"{platform}: sets a key the global pinning zips"


def test_cbc_works_on_its_own():
    cbc = cbc_for("linux-64")
    groups = cbc["zip_keys"]
    assert len({k for g in groups for k in g}) == sum(len(g) for g in groups), "a key in two groups"
    for g in groups:
        assert all(k in cbc for k in g) and len({len(cbc[k]) for k in g}) == 1, g
    assert "python" not in cbc, "python is not a variant key (the package is python-version independent)"


def host_specs_v0(platform: str, variant: str) -> list[str]:
    v = rendered_for(platform)[variant]
    return render_meta(platform, {k: str(x) for k, x in v.variant.items()}, v.hash_info.hash)["requirements"]["host"]


@pytest.mark.parametrize("platform,name", PAIRS)
def test_pinned_host_requirements_carry_no_version(platform, name):
    """conda-smithy's hint: a host requirement named like a variant key must take the pin (bare
    name) unless it is listed twice (the second line narrows the build string only)."""
    variants = rendered_for(platform)
    pins = set(variants[name].variant) | set(cbc_for(platform))
    for label, specs in (("recipe.yaml", reqs(variants[name], "host")), ("meta.yaml", host_specs_v0(platform, name))):
        names = [s.split()[0] for s in specs]
        for s in specs:
            n = s.split()[0]
            if n in pins and names.count(n) == 1:
                assert s == n, f"{label}: {s!r} overrides the {n} pin"
            if n in pins and names.count(n) > 1:
                assert n in specs and all(x == n or x.split()[1] == "*" for x in specs if x.split()[0] == n), specs


def v0_sources() -> list[dict]:
    ns = selector_namespace("linux-64", {"cuda_compiler_version": "None"})
    text = eval_selectors(ct.META.read_text(), ns)
    return yaml.safe_load(jinja2.Environment().from_string(text).render(**ns, compiler=str, stdlib=str, PKG_HASH="h0"))["source"]


def test_v0_source_takes_only_project_files():
    """conda-build copies a path source whole (ignored folders included): the v0 recipe lists the
    project's own entries, which must cover what the build and the recipe tests read."""
    entries = {}
    for s in v0_sources():
        path = (ct.META.parent / s["path"]).resolve()
        assert path.exists() and path.parent == REPO, s
        assert s.get("folder", path.name if path.is_dir() else None) == (path.name if path.is_dir() else None), s
        entries[path.name] = path
    tool = PYPROJECT["tool"]["scikit-build"]
    needed = {"pyproject.toml", "CMakeLists.txt", PYPROJECT["project"]["readme"], *PYPROJECT["project"]["license-files"],
              *(p.split("/")[0] for p in tool["wheel"]["packages"]), "recipe"}
    cmake_text = (REPO / "CMakeLists.txt").read_text()
    needed |= set(re.findall(r"include\((\w+)/", cmake_text)) | set(re.findall(r"PRIVATE (\w+)/", cmake_text))
    needed |= {f.split("/")[0] for f in render_meta("linux-64", {"cuda_compiler_version": "None", "python_min": "3.10",
                                                                  "c_compiler": "gcc", "cxx_compiler": "gxx", "c_stdlib": "sysroot",
                                                                  "c_compiler_version": "14", "cxx_compiler_version": "14",
                                                                  "c_stdlib_version": "2.17"}, "h0")["test"]["source_files"]}
    assert needed <= set(entries), f"the v0 source misses {needed - set(entries)}"
    generated = {".venv", "build", "dist", "_work", "output", ".whl", ".tools", ".git"}
    assert not generated & set(entries)
    if (REPO / ".git").exists():  # every listed entry is tracked, none ignored
        import subprocess
        for name in entries:
            ignored = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", name]).returncode == 0
            tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "--error-unmatch", name], capture_output=True).returncode == 0
            assert tracked and not ignored, name


def test_cuda129_offline_says_what_is_missing():
    """cuda129 cannot be built offline: the tools say why and where a packager gets the pieces."""
    from tools import offline_channel

    with pytest.raises(offline_channel.ChannelError) as info:
        offline_channel.download_cuda_wheels("12.9")
    msg = str(info.value)
    for piece in ("PyPI has no CUDA 12.9 build of torch", "no nvcc, cicc or fatbinary",
                  "--variant cuda129 --conda-forge", "cuda_compiler_version=12.9 -c conda-forge"):
        assert piece in msg, msg


# ---------------------------------------------------------------------------------------------
# the feedstock: conda-forge.yml and the jobs a rerender emits
# ---------------------------------------------------------------------------------------------
FORGE_YML = REPO / "conda-forge.yml"
# conda-smithy's defaults for the keys below (conda_smithy/configure_feedstock.py): every platform is
# built on itself; only linux_64, osx_64 and win_64 have a CI provider unless conda-forge.yml names one.
SMITHY_PROVIDER_DEFAULT = {"linux_64": "default", "osx_64": "default", "win_64": "default",
                           "linux_aarch64": None, "linux_ppc64le": None, "osx_arm64": None}


def smithy_linux_jobs(cfg: dict) -> dict[str, str]:
    """{target subdir: build subdir} of the linux jobs a rerender emits (conda-smithy's
    _get_platforms_of_provider): a platform gets jobs when the platform it is built on has a provider."""
    provider = {**SMITHY_PROVIDER_DEFAULT, **(cfg.get("provider") or {})}
    build_on = {p: p for p in provider} | (cfg.get("build_platform") or {})
    jobs = {}
    for target, build in build_on.items():
        if target.startswith("linux_") and provider.get(build) is not None:
            jobs[target.replace("_", "-")] = build.replace("_", "-")
    return jobs


def test_smithy_job_rule():
    assert smithy_linux_jobs({}) == {"linux-64": "linux-64"}  # what the issue saw: linux_64 only
    assert smithy_linux_jobs({"provider": {"linux_aarch64": "default"}}) == {"linux-64": "linux-64",
                                                                            "linux-aarch64": "linux-aarch64"}
    assert smithy_linux_jobs({"build_platform": {"linux_aarch64": "linux_64"}})["linux-aarch64"] == "linux-64"


def test_feedstock_config_emits_linux_aarch64_jobs():
    """conda-forge.yml gives linux-aarch64 jobs, cross-compiled on linux-64 as conda-forge's pytorch is,
    and every job renders with rattler-build into the variants pytorch has on that platform."""
    cfg = yaml.safe_load(FORGE_YML.read_text())
    assert cfg["conda_build_tool"] == "rattler-build" and cfg.get("recipe_dir", "recipe") == "recipe"
    assert cfg["test"] == "native_and_emulated"  # the aarch64 tests run under emulation
    jobs = smithy_linux_jobs(cfg)
    assert jobs == {"linux-64": "linux-64", "linux-aarch64": "linux-64"}, jobs
    compat = yaml.safe_load((REPO / "data" / "compat.yaml").read_text())["pytorch_conda_forge_platforms"]
    assert compat["source"].strip()
    assert {k.replace("_", "-"): v.replace("_", "-") for k, v in compat["build_platform"].items()} == \
        {k: v for k, v in jobs.items() if k != "linux-64"}
    for target, build in jobs.items():
        variants = {ct.variant_name(v.variant): v for v in ct.render(platform=target, build_platform=build)}
        assert sorted(variants) == VARIANTS, (target, sorted(variants))
        cudas = {v.variant["cuda_compiler_version"] for v in variants.values()} - {"None"}
        assert cudas == set(compat["cuda"][target]), (target, cudas)
        for name, v in variants.items():
            build_reqs = reqs(v, "build")
            assert [s for s in build_reqs if s.startswith("gxx_")] == [f"gxx_{target} {v.variant['cxx_compiler_version']}.*"]
            cross = [s for s in build_reqs if s.startswith(("python", "cross-python"))]
            assert cross == ([] if build == target else ["python", f"cross-python_{target}"]), (target, name, cross)
            meta = render_meta(target, {k: str(x) for k, x in v.variant.items()}, v.hash_info.hash, build_platform=build)
            assert [norm(s) for s in meta["requirements"]["build"]] == [norm(s) for s in build_reqs], (target, name)


def test_meta_yaml_parses_as_conda_forge_linter_reads_it(tmp_path):
    """conda-smithy's linter parses the raw meta.yaml (conda-recipe-manager, grayskull, conda-souschef); a key
    written twice behind two selectors (`script:` for unix and for win) stopped all three."""
    souschef = pytest.importorskip("souschef.recipe", reason="conda-souschef is not installed (tools/bootstrap.sh "
                                                              "installs it)")
    recipe = souschef.Recipe(load_file=str(REPO / "recipe-v0" / "meta.yaml"))
    assert recipe["package"]["name"].value == "<{ name }}" and "requirements" in recipe
    twice = tmp_path / "meta.yaml"  # the check itself: a key written twice fails the parse
    twice.write_text("package:\n  name: x\nbuild:\n  script: a  # [not win]\n  script: b  # [win]\n")
    with pytest.raises(Exception, match='found duplicate key "script"'):
        souschef.Recipe(load_file=str(twice))
