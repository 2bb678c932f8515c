"""The documentation hangs together: docs/README.md indexes every page under docs/, README.md links the index,
every relative link of the Markdown files a reader follows (README.md, docs/, benchmarks/results/) names a file
that exists (and, with a #fragment into a Markdown file, a heading or anchor of it), and every results file is
reachable from README.md. Plain text reads only: well under a second."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RESULTS = ROOT / "benchmarks" / "results"

# [text](target) and ![alt](target); a target in <...> or up to the first space or ")"
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if p.name != "README.md")


def _read_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md")), *sorted(RESULTS.rglob("*.md"))]


def _links(md: Path) -> list[str]:
    text = FENCE.sub("", md.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)  # a link written as code is an example, not a link
    return LINK.findall(text)


def _relative(target: str) -> bool:
    return not re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) and not target.startswith("//")


def _resolve(md: Path, target: str) -> tuple[Path, str]:
    path, _, fragment = target.partition("#")
    return ((md.parent / path).resolve() if path else md), fragment


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation but '-' and '_' removed, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(md: Path) -> set[str]:
    text = FENCE.sub("", md.read_text())
    found, seen = set(), {}
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M):
        slug = _slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    found.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    return found


def _targets(md: Path) -> set[Path]:
    return {_resolve(md, t)[0] for t in _links(md) if _relative(t)}


def test_link_pattern_reads_the_forms_used():
    """A control for the scanner: the link forms the pages use are found, code spans and fences are not."""
    md = "see [a](docs/a.md), ![plot](x/p.png), [b `c`](d.md#e) and `[no](f.md)`\n```\n[no](g.md)\n```\n"
    text = re.sub(r"`[^`\n]*`", "", FENCE.sub("", md))
    assert LINK.findall(text) == ["docs/a.md", "x/p.png", "d.md#e"]
    assert _slug("Choosing the plans: `TORCH_SEGOPS_CUDA_PLANS`") == "choosing-the-plans-torch_segops_cuda_plans"
    assert _slug("osx-64, osx-arm64 and win-64") == "osx-64-osx-arm64-and-win-64"


def test_every_doc_page_is_in_the_index_and_the_index_in_the_readme():
    index = DOCS / "README.md"
    assert index.is_file(), "docs/README.md (the index of the docs) is missing"
    assert index.resolve() in _targets(ROOT / "README.md"), "README.md does not link docs/README.md"
    listed = _targets(index)
    missing = [str(p.relative_to(ROOT)) for p in _pages() if p.resolve() not in listed]
    assert not missing, f"docs/README.md does not link {missing}"
    assert _pages(), "no page under docs/"


@pytest.mark.parametrize("md", _read_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(md):
    bad = []
    for target in _links(md):
        if not _relative(target):
            continue
        path, fragment = _resolve(md, target)
        if not path.exists():
            bad.append(f"{target}: no such file")
        elif fragment and path.suffix == ".md" and fragment not in _anchors(path):
            bad.append(f"{target}: no heading or anchor #{fragment} in {path.relative_to(ROOT)}")
    assert not bad, f"{md.relative_to(ROOT)}: " + "; ".join(bad)


def test_every_results_file_is_reachable_from_the_readme():
    """Numbers that left the README stay reachable: every file under benchmarks/results/ is linked from
    README.md or from a page it links (docs/, a results file), followed link by link."""
    seen, todo = set(), [(ROOT / "README.md").resolve()]
    while todo:
        md = todo.pop()
        if md in seen or md.suffix != ".md" or not md.is_file():
            continue
        seen.add(md)
        todo.extend(t for t in _targets(md) if ROOT in t.parents)
    reached = seen | {t for md in seen for t in _targets(md)}
    unreachable = [str(p.relative_to(ROOT)) for p in sorted(RESULTS.rglob("*"))
                   if p.is_file() and p.suffix in (".md", ".png") and p.resolve() not in reached]
    assert not unreachable, f"not reachable from README.md by links: {unreachable}"


def test_plots_read_the_recorded_tables():
    """benchmarks/plots.py reads the results files it plots (standard library only), row for row."""
    from benchmarks import plots

    for name, (fn, src) in plots.PLOTS_FROM.items():
        assert (RESULTS / src).is_file(), f"{name} reads {src}, which is missing"
    rows = plots.cpu_bandwidth_rows(RESULTS / "cpu-2core-2026-11-24-quiet.md")
    assert len(rows) == 14 and rows[0] == ("2M x 64 sum", 36.8, 43.9, 84.0), rows[0]
    ratios = plots.scatter_ratio_rows(RESULTS / "coo-scatter-cpu-2core-2026-11-25.md")
    assert len(ratios) == 30 and ratios[0] == ("1M x 64 sorted segment_coo sum", 0.62), ratios[0]
    assert plots.number("1.89x (scatter_reduce_) [1.82x-2.52x]") == 1.89


def test_plots_draw(tmp_path):
    """Each plot draws from its results file (matplotlib is the benchmarks' optional dependency)."""
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (optional, benchmarks only): plots not drawn")
    from benchmarks import plots

    assert plots.main(["--out", str(tmp_path)]) == 0
    for name in plots.PLOTS_FROM:
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and 10_000 < len(data) < 200_000, (name, len(data))


def test_descriptions_name_the_whole_api():
    """The README's first paragraph, pyproject.toml's description and the recipes' description name every
    family of the API (issue #41: they said "segment_csr (sum, mean, min, max)" long after COO and scatter)."""
    import tomllib

    import yaml

    families = ("CSR", "COO", "gather", "scatter", "mul", "softmax", "logsumexp", "pytorch_scatter")
    readme = (ROOT / "README.md").read_text().split("\n\n")[1]
    texts = {"README.md's first paragraph": readme,
             "pyproject.toml": tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["description"]}
    for recipe in ("recipe/recipe.yaml", "recipe-v0/meta.yaml"):
        about = re.search(r"^about:\n((?:  .*\n|\n)*)", (ROOT / recipe).read_text(), re.M).group(1)
        texts[recipe] = yaml.safe_load(about)["description"]
    for where, text in texts.items():
        missing = [f for f in families if f not in text]
        assert not missing, f"{where} does not name {missing}"
    for name in ("scatter_std", "scatter_log_softmax", "install_as_torch_scatter", "PyTorch Geometric", "segment_coo"):
        assert name in readme, f"README.md's first paragraph does not name {name}"
