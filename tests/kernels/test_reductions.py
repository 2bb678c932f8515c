"""The reduction registry: the C++ list (src/csrc/reduction_table.h), the Python table (_reductions.REDUCTIONS), the
scriptable functions that spell the table as literals, and the registered ops all say the same; the dispatch
and the reducer traits of the C++ side run under ASan/UBSan (tests/cpp/reduction_registry.cpp); and no module
but _reductions.py interprets a reduction's name."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest
import torch

import cpp_checks
import torch_segops

REPO = Path(__file__).resolve().parents[2]
cpp_rows = cpp_checks.registry_rows


# The tests are parametrized by the source tree's C++ list, and the Python table is imported by a fixture: an
# installed package older than the registry then fails these tests instead of stopping the collection of all.
NAMES = [name for _, name, *_ in cpp_rows()]


@pytest.fixture(scope="module")
def reductions():
    from torch_segops import _reductions

    return _reductions


def test_python_table_is_the_cpp_list(reductions):
    rows = cpp_rows()
    assert len(rows) >= 6, rows
    assert [n for _, n, *_ in rows] == list(reductions.REDUCTIONS), "the same reductions, in the same order"
    for _, name, _, has_arg, integers in rows:
        r = reductions.REDUCTIONS[name]
        assert r.has_arg == has_arg, name
        # the kernels reduce integers natively exactly where the Python table says "native"
        assert (r.integers == "native") == integers, name


@pytest.mark.parametrize("name", NAMES)
def test_registered_ops_follow_the_table(reductions, name):
    r = reductions.REDUCTIONS[name]
    op = getattr(torch.ops.torch_segops, f"segment_{name}").default
    op_out = getattr(torch.ops.torch_segops, f"segment_{name}_out").default
    assert len(op._schema.returns) == (2 if r.has_arg else 1), op._schema
    assert [a.name for a in op_out._schema.arguments] == ["src", "indptr", "out"] + (["arg"] if r.has_arg else [])


def test_reduce_names_select_their_reduction(reductions):
    accepted = [n for r in reductions.REDUCTIONS.values() for n in r.reduce_names]
    for r in reductions.REDUCTIONS.values():
        for n in r.reduce_names:
            assert reductions.reduction_of("f", n) == r.name
    with pytest.raises(ValueError) as e:
        reductions.reduction_of("segment_csr", "prod")
    message = str(e.value)
    assert message.startswith("torch_segops.segment_csr: reduce must be one of ") and message.endswith("got 'prod'")
    assert re.findall(r"'(\w+)'", message)[:-1] == accepted, "the message lists what is accepted, in table order"
    for name in ("logsumexp", "Sum", "", "add "):  # logsumexp has its own function only
        with pytest.raises(ValueError, match="reduce must be one of"):
            reductions.reduction_of("f", name)


@pytest.mark.parametrize("name", NAMES)
def test_scriptable_functions_agree_with_the_table(reductions, name):
    r = reductions.REDUCTIONS[name]
    assert reductions.has_arg(name) == r.has_arg
    assert reductions.sums_integers_then_divides(name) == (r.integers == "sum_then_divide")
    assert reductions.combines_sums(name) == (r.integers == "sum_then_divide" and r.combine is not None)
    assert reductions.multiplies(name) == (name == "mul")
    assert r.saves in ("", "src", "arg") and (r.saves == "arg") == r.has_arg


@pytest.mark.parametrize("name", NAMES)
def test_combine_into_is_the_tables_combine_function(reductions, name):
    """combine_into (literal, for TorchScript) applies the row's own combine function; a reduction without one
    raises, so that a new reduction cannot fall through to another's rule (e.g. max's signed comparison)."""
    r = reductions.REDUCTIONS[name]
    g = torch.Generator().manual_seed(5)
    out, values = (torch.randn(4, 3, generator=g, dtype=torch.float64) for _ in range(2))
    values[0, 0], out[1, 1] = float("nan"), float("-inf")
    arg, counts = torch.tensor([[0, 1, 2], [6, 6, 6], [3, 4, 5], [1, 1, 6]]), torch.tensor([[2.0], [1.0], [3.0], [1.0]])
    args = (out, values, arg, 6, counts.double(), "floor")
    if r.combine is None:
        with pytest.raises(ValueError, match=f"the reduction '{name}' has no out= combine rule"):
            reductions.combine_into(name, *args)
        return
    got, want = reductions.combine_into(name, *args), r.combine(*args)
    assert all(torch.equal(a, b) or torch.allclose(a, b, equal_nan=True) for a, b in zip(got, want))


def test_combine_into_refuses_a_reduction_it_does_not_know(reductions):
    with pytest.raises(ValueError, match="the reduction 'absmax' has no out= combine rule"):
        reductions.combine_into("absmax", torch.zeros(2), torch.ones(2), torch.zeros(2, dtype=torch.long), 1,
                                torch.ones(2), "floor")


@pytest.mark.parametrize("name", NAMES)
def test_run_and_run_out_call_the_reductions_own_ops(reductions, recorded_ops, name):
    rec = recorded_ops
    src, indptr = torch.randn(9, 2), torch.tensor([0, 4, 4, 9])
    values, arg = reductions.run(src, indptr, name)
    out = torch.empty_like(values)
    arg_out = reductions.run_out(src, indptr, name, out)
    assert rec.called == [f"segment_{name}", f"segment_{name}_out"]
    assert torch.equal(out, values) and torch.equal(arg_out, arg)
    assert (arg.shape == values.shape) if reductions.REDUCTIONS[name].has_arg else arg.numel() == 0
    for f in (reductions.run, lambda s, i, n: reductions.run_out(s, i, n, out)):
        with pytest.raises(ValueError, match="unknown reduction"):
            f(src, indptr, "add")  # a reduce= name, not a reduction: the callers resolve it first


@pytest.mark.parametrize("name", NAMES)
def test_integer_rule(reductions, name):
    r = reductions.REDUCTIONS[name]
    src = torch.tensor([[3], [-4], [7], [2], [5]], dtype=torch.int32)
    indptr = torch.tensor([0, 2, 2, 5])
    if r.integers == "native":
        values, _ = reductions.run(src, indptr, name)
        assert values.dtype == torch.int32
        return
    with pytest.raises(RuntimeError, match=r"integer dtypes only for sum, mul, min, max and gather"):
        reductions.run(src, indptr, name)  # the kernels refuse it, naming the reductions that take integers
    if r.integers == "sum_then_divide":
        # the public function sums, then divides with truncation (pytorch_scatter's C++ integer division)
        got = torch_segops.segment_csr(src, indptr, reduce=name)
        assert got.tolist() == [[int(-1 / 2)], [0], [int(14 / 3)]]


@pytest.mark.parametrize("name", NAMES)
def test_every_reduce_name_runs_through_csr_coo_and_scatter(reductions, name):
    """segment_csr, segment_coo and scatter take every reduce= name of the table, with and without out=; a
    reduction without an out= combine rule has no reduce= name (logsumexp: its own function only)."""
    if not reductions.REDUCTIONS[name].combine:
        assert reductions.REDUCTIONS[name].reduce_names == ()
        return
    src = torch.tensor([[1.0, -2.0], [3.0, 0.5], [-1.0, 4.0], [2.0, 2.0]])
    index = torch.tensor([0, 0, 2, 2])
    indptr = torch.tensor([0, 2, 2, 4])
    for reduce in reductions.REDUCTIONS[name].reduce_names:
        csr = torch_segops.segment_csr(src, indptr, reduce=reduce)
        assert torch.equal(torch_segops.segment_coo(src, index, dim_size=3, reduce=reduce), csr)
        assert torch.equal(torch_segops.scatter(src, index, 0, dim_size=3, reduce=reduce), csr)
        base = torch.full((3, 2), 2.0)
        into = torch_segops.scatter(src, index, 0, out=base.clone(), reduce=reduce)
        assert into.shape == (3, 2) and not torch.equal(into, base)


def test_no_other_module_interprets_a_reduction_name():
    """Comparisons of a reduction's name (reduce == "max", reduce in [...]) live in _reductions.py only."""
    package = REPO / "src" / "torch_segops"
    pattern = re.compile(r"\breduce\s*(==|!=|not in|in)\s*[\"'\[(]")
    found = [f"{p.name}:{i}: {line.strip()}" for p in sorted(package.rglob("*.py")) if p.name != "_reductions.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, found


@cpp_checks.needs_gxx_and_torch
def test_cpp_registry_and_reducer_traits(tmp_path):
    exe = cpp_checks.build(tmp_path, "tests/cpp/reduction_registry.cpp", "-O1", "-Wall", "-Wextra", "-Werror")
    out = cpp_checks.run(exe)
    assert "0 failed" in out, out
    rows = re.findall(r"^row (\w+) (\w+) (\d) (\d)$", out, re.M)
    assert [(n, f"segment_{n}", a == "1", i == "1") for n, _, a, i in rows] == [
        (name, f"segment_{name}", has_arg, integers) for _, name, _, has_arg, integers in cpp_rows()]
    assert "integer names: sum, mul, min, max" in out


def _section(section: str) -> tuple[list[str], list[str]]:
    """docs/design.md's "Adding a reduction" section: (the files of its numbered list, the files it says list the
    reductions by name)."""
    path = r"`((?:src|research|tests|benchmarks)/[\w/.-]+\.\w+)`"
    required = re.findall(rf"^\d+\. {path}", section, re.M)
    listing = section[section.index("Files that list the reductions by name"):]
    return required, re.findall(path, listing[:listing.index("\n\n")])


def _row_words(rows) -> list[set[str]]:
    """For each row the C++ names of its reducer: the policy's name and, for an alias (MinOp), the template it
    names (ArgExtremumOp)."""
    aliases = dict(re.findall(r"using (\w+) = (\w+)<", (REPO / "src" / "csrc" / "reduction_policies.h").read_text()))
    return [{op, aliases.get(op, op)} for _, _, op, _, _ in rows]


def _literal_lists(text: str) -> list[set[str]]:
    """The string sets of a Python module's literal tuples, lists and sets: their strings and the first arguments
    of their calls (a tuple of rows, Reduction("sum", ...))."""
    def first(e):
        return e.args[0] if isinstance(e, ast.Call) and e.args else e
    def string(e):
        return isinstance(first(e), ast.Constant) and isinstance(first(e).value, str)
    return [{first(e).value for e in node.elts if string(e)}
            for node in ast.walk(ast.parse(text)) if isinstance(node, (ast.Tuple, ast.List, ast.Set))]


def _names_every_row(path: str, text: str, rows) -> bool:
    """Whether a file spells out every row: a Python literal collection holding every name, or C++ naming every
    row's reducer as a template argument (Reference<SumOp<A>>) or where it defines it (the policies, the table)."""
    if path.endswith(".py"):
        names = {name for _, name, *_ in rows}
        return any(names <= found for found in _literal_lists(text))
    return all(any(re.search(rf"\b{w}<\w+(?:, ?\w+)?>\s*>|struct {w}\b|using {w} =|X\(\w+, \"\w+\", {w},", text)
                   for w in words) for words in _row_words(rows))


def test_adding_a_reduction_in_design_md_follows_the_code():
    """docs/design.md's "Adding a reduction" lists the files a new reduction touches, from a count (a side branch
    added a seventh). Held to the code: every numbered file spells out every row today (so a row added without
    it is caught by the build or a test, and a file that stopped needing it is dropped from the list), and every
    file of the repository with a hand-written list of all the rows is named there (numbered, or among the files
    that list the reductions by name). The literal functions of _reductions.py that need its branch are named."""
    rows = cpp_rows()
    text = (REPO / "docs" / "design.md").read_text()
    section = text[text.index("## Adding a reduction"):text.index("## Adding an op")]
    required, listing = _section(section)
    assert len(required) >= 2 and f"touches these {len(required)} files" in section, required
    assert all((REPO / p).exists() for p in required + listing), required + listing
    missing = [p for p in required if not _names_every_row(p, (REPO / p).read_text(), rows)]
    assert not missing, f"numbered in design.md but no longer spelling out every row: {missing}"
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True, check=True)
    hand_lists = [p for p in tracked.stdout.split() if re.search(r"\.(py|h|cpp|cu|cuh)$", p)
                  and _names_every_row(p, (REPO / p).read_text(errors="replace"), rows)]
    undocumented = sorted(set(hand_lists) - set(required) - set(listing))
    assert not undocumented, f"files that list every reduction, not named in design.md's section: {undocumented}"
    tree = ast.parse((REPO / "src" / "torch_segops" / "_reductions.py").read_text())

    def branches_on_a_name(f):
        return any(isinstance(c, ast.Compare) and isinstance(c.left, ast.Name) and c.left.id in ("name", "reduce")
                   and any(isinstance(x, ast.Constant) and isinstance(x.value, str) for x in c.comparators)
                   for c in ast.walk(f))

    branching = {f.name for f in tree.body if isinstance(f, ast.FunctionDef) and branches_on_a_name(f)}
    assert {"run", "combine_into", "reduction_of"} <= branching, branching
    assert branching <= set(re.findall(r"`(\w+)`", section)), branching - set(re.findall(r"`(\w+)`", section))
