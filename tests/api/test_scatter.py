"""scatter / scatter_{sum,add,mean,min,max} (deterministic, by a stable sort and the CSR reductions)
against the plain-PyTorch reference (masks per target) and torch's own scatter_reduce, pytorch_scatter's
documented behaviour (written from its documentation: broadcasting of index, output size, out=
reduced into, argmin/argmax), determinism across thread counts and runs, plan reuse, gradients,
errors, torch.compile and TorchScript."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import reference as R
import torch_segops as so

ERRORS = (TypeError, ValueError, RuntimeError)
REDUCES = ("sum", "add", "mean", "mul", "min", "max")
NAMED = {"sum": so.scatter_sum, "add": so.scatter_add, "mean": so.scatter_mean, "min": so.scatter_min,
         "max": so.scatter_max, "mul": so.scatter_mul}


@st.composite
def scatter_cases(draw, dtypes=R.ALL_DTYPES):
    """src of 1 to 3 dims, dim anywhere (negative too), index 1-D / partially broadcast / full."""
    dtype = draw(st.sampled_from(dtypes))
    shape, dim, d = R.draw_shape_and_dim(draw, 0, 6)
    n_out = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    kind = draw(st.sampled_from(["1d", "1d", "leading", "full"]))
    if kind == "1d":
        index_shape = [shape[d]]
    elif kind == "leading":  # index dims up to dim (size 1 = broadcast), features broadcast
        index_shape = [draw(st.sampled_from([1, shape[k]])) for k in range(d)] + [shape[d]]
    else:
        index_shape = list(shape)
    index = torch.randint(0, n_out, index_shape, generator=g).to(draw(st.sampled_from([torch.int64, torch.int32])))
    dim_size = draw(st.sampled_from([None, n_out, n_out + 2]))
    src = R.make_values(shape, dtype, g, ties=draw(st.booleans()))
    return {"src": src, "index": index, "dim": dim, "dim_size": dim_size,
            "desc": f"{dtype} src={shape} index={index_shape} dim={dim} dim_size={dim_size} seed={seed}"}


def check_scatter(src, index, dim, dim_size, reduce, what):
    if reduce == "mul":
        src = R.near_one(src)
    expected, expected_arg = R.scatter(src, index, dim, dim_size, reduce)
    got = so.scatter(src, index, dim, dim_size=dim_size, reduce=reduce)
    named = NAMED[reduce](src, index, dim, dim_size=dim_size)
    if reduce == "mul":
        counts, _ = R.scatter(torch.ones_like(src, dtype=torch.float64), index, dim, dim_size, "sum")
        R.assert_product_close(got, expected, counts, f"scatter mul {what}")
        R.assert_product_close(named, expected, counts, f"named mul {what}")
        return
    if reduce in ("min", "max") or not src.dtype.is_floating_point:
        R.assert_equal(got, expected, f"scatter {reduce} {what}")
        if reduce in ("min", "max"):
            R.assert_equal(named[0], expected, f"values {what}")
            R.assert_equal(named[1], expected_arg, f"arg {what}")
        else:
            R.assert_equal(named, expected, f"named {what}")
        return
    scale, _ = R.scatter(src.double().abs(), index, dim, dim_size, "mean" if reduce == "mean" else "sum")
    R.assert_sum_close(got, expected, scale, f"scatter {reduce} {what}")
    R.assert_sum_close(named, expected, scale, f"named {reduce} {what}")


@given(case=scatter_cases(), reduce=st.sampled_from(REDUCES))
def test_scatter_matches_reference(case, reduce):
    check_scatter(case["src"], case["index"], case["dim"], case["dim_size"], reduce, case["desc"])


@given(case=scatter_cases(dtypes=(torch.float64,)), reduce=st.sampled_from(["sum", "mean", "amin", "amax"]))
def test_values_agree_with_torch_scatter_reduce(case, reduce):
    src, dim, dim_size = case["src"], case["dim"] % case["src"].dim(), case["dim_size"]
    index = R.broadcast_index(case["index"].long(), src, dim)
    size = list(src.shape)
    size[dim] = dim_size if dim_size is not None else (int(index.max()) + 1 if index.numel() else 0)
    expected = torch.zeros(size, dtype=src.dtype).scatter_reduce_(dim, index, src, reduce, include_self=False)
    ours = {"sum": "sum", "mean": "mean", "amin": "min", "amax": "max"}[reduce]
    got = so.scatter(src, case["index"], case["dim"], dim_size=dim_size, reduce=ours)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_documented_example():
    """pytorch_scatter's README example: scatter_max of two rows along the last dim; targets that get
    nothing give 0 and argmax src.size(dim) = 5."""
    src = torch.tensor([[2, 0, 1, 4, 3], [0, 2, 1, 3, 4]])
    index = torch.tensor([[4, 5, 4, 2, 3], [0, 0, 2, 2, 1]])
    values, arg = so.scatter_max(src, index, dim=-1)
    assert values.tolist() == [[0, 0, 4, 3, 2, 0], [2, 4, 3, 0, 0, 0]]
    assert arg.tolist() == [[5, 5, 3, 4, 0, 1], [1, 4, 3, 5, 5, 5]]
    assert so.scatter(src, index, reduce="sum").tolist() == [[0, 0, 4, 3, 3, 0], [2, 4, 4, 0, 0, 0]]


def test_graph_layout_broadcasts_a_1d_index_over_features():
    """The message-passing case: src (E, F), index (E,), dim 0 (or -2)."""
    g = torch.Generator().manual_seed(0)
    src = torch.randn(50, 8, generator=g, dtype=torch.float64)
    index = torch.randint(0, 10, (50,), generator=g)
    expected = torch.zeros(12, 8, dtype=torch.float64).index_add_(0, index, src)
    torch.testing.assert_close(so.scatter(src, index, 0, dim_size=12), expected)
    torch.testing.assert_close(so.scatter(src, index, -2, dim_size=12), expected)


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
@pytest.mark.parametrize("feat", [(), (3,)])
def test_a_one_element_index_broadcasts_over_the_rows(index_dtype, reduce, feat):
    """A 1-D index of length 1 along dim 0 of a longer src is broadcast (pytorch_scatter's rule: every row to
    that target), not read as the rows' index (the 1-D fast path takes the index as it is only when its
    length is src's)."""
    src = torch.tensor([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0], [float("inf"), 0.5, float("nan")],
                        [-7.0, 8.0, 9.0]])
    src = src[:, 0] if not feat else src
    index = torch.tensor([2], dtype=index_dtype)
    got = so.scatter(src, index, 0, dim_size=4, reduce=reduce)
    expected = so.scatter(src, index.expand(src.size(0)).contiguous(), 0, dim_size=4, reduce=reduce)
    torch.testing.assert_close(got, expected, equal_nan=True)
    ref = R.scatter(src.double(), index.long().expand(src.size(0)), 0, 4, reduce)[0].to(src.dtype)
    torch.testing.assert_close(got, ref, equal_nan=True)


def test_integer_mean_floors():
    """pytorch_scatter's scatter_mean divides integers with floor (segment_*'s mean truncates)."""
    src = torch.tensor([-3, -4, 5, 7])
    index = torch.tensor([0, 0, 1, 1])
    assert so.scatter_mean(src, index).tolist() == [-4, 6]  # -7 / 2 -> -4, 12 / 2 -> 6


def test_ties_take_the_first_position_in_src():
    src = torch.tensor([[1.0, 5.0], [5.0, 5.0], [5.0, 1.0], [0.0, 5.0]])
    index = torch.tensor([1, 0, 1, 1])
    values, arg = so.scatter_max(src, index, 0)
    assert values.tolist() == [[5.0, 5.0], [5.0, 5.0]] and arg.tolist() == [[1, 1], [2, 0]]


def test_out_is_reduced_into():
    src = torch.tensor([1.0, 2.0, 3.0, 4.0])
    index = torch.tensor([2, 0, 2, 0])
    R.reduce_into(so.scatter, src, index, [10.0, 20.0, 30.0], [16.0, 20.0, 34.0])
    _, arg = R.reduce_into(so.scatter_max, src, index, [3.0, 20.0, 3.5], [4.0, 20.0, 3.5])
    assert arg.tolist() == [3, 4, 4]
    # (2 + 2 + 4) / 2, untouched, (2 + 1 + 3) / 2
    R.reduce_into(so.scatter_mean, src, index, [2.0, 0.0, 2.0], [4.0, 0.0, 3.0])
    # pytorch_scatter's scatter_mul multiplies into out: 10 * 2 * 4, untouched, 30 * 1 * 3
    R.reduce_into(so.scatter_mul, src, index, [10.0, 20.0, 30.0], [80.0, 20.0, 90.0])
    R.reduce_into(so.scatter, src.long(), index, [10, 20, 30], [80, 20, 90], reduce="mul")


def test_mul_gives_one_where_nothing_is_scattered():
    """pytorch_scatter's scatter_mul starts from ones: targets that get nothing are 1 (also for an empty src;
    then out= is left as it is)."""
    src = torch.tensor([[2, 3], [4, 5]], dtype=torch.int32)
    assert so.scatter_mul(src, torch.tensor([1, 1]), 0, dim_size=3).tolist() == [[1, 1], [8, 15], [1, 1]]
    assert so.scatter_mul(torch.empty(0, 2), torch.empty(0, dtype=torch.long), 0, dim_size=3).tolist() == [[1, 1]] * 3
    out = torch.tensor([[2.0, 3.0]])
    assert so.scatter(torch.empty(0, 2), torch.empty(0, dtype=torch.long), 0, out=out, reduce="mul") is out
    assert out.tolist() == [[2.0, 3.0]]


def test_out_with_a_full_index():
    src = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    index = torch.tensor([[0, 1, 0], [1, 1, 0]])
    out = torch.ones(2, 2)
    so.scatter(src, index, dim=1, out=out)
    assert out.tolist() == [[5.0, 3.0], [7.0, 10.0]]


# ---- determinism and plans -------------------------------------------------------------------------

def _big(seed=0, n=200_000, f=16, targets=1000):
    g = torch.Generator().manual_seed(seed)
    src = torch.randn(n, f, generator=g) * 2.0 ** torch.randint(-20, 20, (n, 1), generator=g)
    index = torch.randint(0, targets, (n,), generator=g)
    return src, index


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "mul"])
def test_bitwise_deterministic_across_threads_and_runs(reduce):
    src, index = _big()
    if reduce == "mul":
        src = R.near_one(src)  # products of ~200 factors that neither overflow nor vanish
    results = []
    for threads in (1, 2, 1, 2):
        torch.set_num_threads(threads)
        results.append(so.scatter(src, index, 0, dim_size=1000, reduce=reduce))
    for r in results[1:]:
        assert torch.equal(r, results[0])
    plan = so.scatter_plan(index, 1000)
    assert torch.equal(so.scatter(src, index, 0, reduce=reduce, plan=plan), results[0])


def test_result_depends_only_on_each_targets_values_in_src_order():
    """A target's sum is a function of the sequence of values scattered to it, in src order: moving rows
    of src around while keeping that order within every target (here: grouping them by target, and
    interleaving the targets differently) gives bitwise the same result."""
    g = torch.Generator().manual_seed(3)
    src = torch.randn(5000, 3, generator=g) * 2.0 ** torch.randint(-30, 30, (5000, 1), generator=g)
    index = torch.randint(0, 40, (5000,), generator=g)
    expected = so.scatter(src, index, 0, dim_size=40)
    grouped = torch.sort(index, stable=True).indices
    reversed_targets = torch.sort(39 - index, stable=True).indices
    for order in (grouped, reversed_targets):
        assert torch.equal(so.scatter(src[order], index[order], 0, dim_size=40), expected)


def test_plan_reuse_and_shapes():
    g = torch.Generator().manual_seed(1)
    index = torch.randint(0, 7, (30,), generator=g)
    plan = so.scatter_plan(index)
    assert isinstance(plan, so.ScatterPlan) and plan.indptr.tolist()[-1] == 30 and plan.indptr.numel() == 8
    for src, dim in ((torch.randn(30, 4, generator=g), 0), (torch.randn(3, 30, 2, generator=g), 1),
                     (torch.randn(30, generator=g), -1)):
        for reduce in REDUCES:
            R.assert_equal(so.scatter(src, index, dim, reduce=reduce, plan=plan),
                           so.scatter(src, index, dim, reduce=reduce), f"plan {reduce} dim={dim}")
        values, arg = so.scatter_min(src, index, dim, plan=plan)
        R.assert_equal(arg, so.scatter_min(src, index, dim)[1], "plan arg")


def test_bad_plan():
    index = torch.tensor([1, 0, 1])
    plan = so.scatter_plan(index, 3)
    with pytest.raises(ERRORS, match="plan"):
        so.scatter(torch.randn(4, 2), torch.tensor([1, 0, 1, 1]), 0, plan=plan)
    with pytest.raises(ERRORS, match="plan"):
        so.scatter(torch.randn(3, 2), index, 0, dim_size=5, plan=plan)
    with pytest.raises(ERRORS, match="plan"):
        so.scatter(torch.randn(3, 2), torch.tensor([[1, 0], [0, 0], [1, 1]]), 0, plan=plan)


# ---- gradients -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["1d", "full", "plan"])
@pytest.mark.parametrize("reduce", ["sum", "mean", "min", "max", "mul"])
def test_gradcheck(reduce, kind):

    x = R.distinct_values((7, 3)).requires_grad_()
    if kind == "full":
        index = torch.tensor([[2, 0, 1], [0, 0, 1], [2, 2, 2], [4, 0, 1], [0, 1, 1], [2, 0, 0], [1, 1, 4]])
    else:
        index = torch.tensor([2, 0, 2, 4, 0, 2, 1])
    plan = so.scatter_plan(index, 6) if kind == "plan" else None
    assert torch.autograd.gradcheck(lambda t: so.scatter(t, index, 0, dim_size=6, reduce=reduce, plan=plan), (x,),
                                    eps=1e-6, atol=1e-8)


@pytest.mark.parametrize("kind", ["1d", "full"])
def test_mul_gradcheck_with_zeros(kind):
    """Targets holding no, one, two and three zeros: the gradient of a product is the product of the
    others, also at and next to a zero (pytorch_scatter's prod / x gives 0 there), to second order."""
    x = torch.tensor([[0.0, 1.5], [2.0, 0.0], [0.0, 0.0], [-1.25, 0.0], [3.0, 0.5], [0.0, 0.75], [0.5, -2.0]],
                     dtype=torch.float64, requires_grad=True)
    if kind == "full":
        index = torch.tensor([[0, 1], [0, 1], [0, 1], [1, 1], [2, 0], [0, 0], [2, 0]])
    else:
        index = torch.tensor([0, 0, 0, 1, 2, 0, 2])
    fn = lambda t: so.scatter(t, index, 0, dim_size=4, reduce="mul")  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x,), eps=1e-6, atol=1e-8)
    assert torch.autograd.gradgradcheck(fn, (x,), eps=1e-6, atol=1e-8)


def test_gradcheck_into_out():

    x = R.distinct_values((7, 3)).requires_grad_()
    index = torch.tensor([2, 0, 2, 4, 0, 2, 1])
    base = R.distinct_values((5, 3), seed=2) + 0.05  # never equal to a value of x (a tie has no derivative)
    assert torch.autograd.gradcheck(lambda t: so.scatter(t, index, 0, out=base.clone(), reduce="max"), (x,),
                                    eps=1e-6, atol=1e-8)


# ---- errors ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad_id,index,kwargs,match", [
    ("past_dim_size", torch.tensor([0, 5, 1, 2]), {"dim_size": 5}, "dim_size"),
    ("negative", torch.tensor([0, -1, 1, 2]), {}, "non-negative"),
    ("float_index", torch.tensor([0.0, 1.0, 1.0, 2.0]), {}, "index"),
    ("zero_dim_index", torch.tensor(1), {}, "index"),
    ("wrong_length", torch.tensor([0, 1, 2]), {}, "index"),
    ("bad_broadcast", torch.zeros(4, 3, dtype=torch.long), {}, "index"),
    ("dim_out_of_range", torch.tensor([0, 1, 1, 2]), {"dim": 2}, "dim"),
    ("reduce_prod", torch.tensor([0, 1, 1, 2]), {"reduce": "prod"}, "reduce"),
    ("negative_dim_size", torch.tensor([0, 1, 1, 2]), {"dim_size": -1}, "dim_size"),
    ("out_dtype", torch.tensor([0, 1, 1, 2]), {"out": torch.zeros(3, 2, dtype=torch.float64)}, "out"),
    ("out_shape", torch.tensor([0, 1, 1, 2]), {"out": torch.zeros(3, 3)}, "out"),
    ("out_vs_dim_size", torch.tensor([0, 1, 1, 2]), {"out": torch.zeros(3, 2), "dim_size": 4}, "dim_size"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_input(bad_id, index, kwargs, match):
    kwargs = dict(kwargs)
    dim = kwargs.pop("dim", 0)
    with pytest.raises(ERRORS, match=match):
        so.scatter(torch.randn(4, 2), index, dim, **kwargs)


def test_error_leaves_out_untouched():
    out = torch.full((3, 2), 7.0)
    with pytest.raises(ERRORS, match="index"):
        so.scatter(torch.randn(4, 2), torch.tensor([0, 2, 3, 1]), 0, out=out)
    assert bool((out == 7.0).all())


# ---- torch.compile and TorchScript ----------------------------------------------------------------

@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("dim_size", [6, None], ids=["dim_size", "from_index"])
@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "mul"])
def test_compile_fullgraph(reduce, dim_size, backend):
    index = torch.tensor([2, 0, 2, 4, 0, 2, 1])

    def f(s, i):
        return so.scatter(s * 2, i, 0, dim_size=dim_size, reduce=reduce)

    R.compile_and_compare(f, (torch.randn(7, 3, dtype=torch.float64), index), backend)


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("name", ["scatter", "scatter_sum", "scatter_add", "scatter_mean", "scatter_min",
                                  "scatter_max", "scatter_mul"])
def test_scripted_equals_eager(name):
    fn = getattr(so, name)
    scripted = torch.jit.script(fn)
    src = torch.randn(7, 3)
    index = torch.tensor([2, 0, 2, 4, 0, 2, 1])
    full = torch.randint(0, 4, (7, 3))
    plan = torch.jit.script(so.scatter_plan)(index, 6)
    calls = [(src, index, 0), (src, full, 0, None, 5), (src, index, 0, torch.ones(5, 3)),
             (src, index, -2, None, 6) + (("max",) if name == "scatter" else ()) + (plan,)]
    if name == "scatter":
        calls.append((src, index, 0, torch.full((5, 3), 2.0), None, "mul"))
    for args in calls:
        a = tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in args)
        b = tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in args)
        got, expected = scripted(*a), fn(*b)
        for g_, e_ in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
            assert torch.equal(g_, e_)


# ---- the native order of the index (index_sort: sorted detection, counting sort) ---------------------------

@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("lead,n,targets", [((), 300_000, 30_000), ((3,), 1000, 7), ((64,), 50, 9), ((), 40, 5000),
                                            ((2,), 0, 4), ((), 0, 0)],
                         ids=["long", "few_rows", "many_rows", "more_targets_than_rows", "empty", "dim_size_0"])
def test_index_sort_is_the_stable_sort(dtype, lead, n, targets):
    g = torch.Generator().manual_seed(n + targets)
    index = torch.randint(0, max(targets, 1), (*lead, n), generator=g).to(dtype)
    perm, indptr = torch.ops.torch_segops.index_sort(index, targets)
    ordered, expected_perm = torch.sort(index, dim=-1, stable=True)
    if n > 1:
        R.assert_equal(perm, expected_perm, "perm")
    R.assert_equal(indptr, R.coo_to_indptr(ordered, torch.zeros(*lead, n), targets), "indptr")
    # the same index already sorted: found in the validating pass, no permutation
    perm, indptr2 = torch.ops.torch_segops.index_sort(ordered, -1 if n else targets)
    assert perm.shape == (*lead, 0)
    R.assert_equal(indptr2, indptr[..., : indptr2.size(-1)], "sorted indptr")


def test_index_sort_same_permutation_for_any_thread_count():
    g = torch.Generator().manual_seed(5)
    index = torch.randint(0, 1000, (400_000,), generator=g)
    before = torch.get_num_threads()
    try:
        perms = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            perms.append(torch.ops.torch_segops.index_sort(index, 1000))
    finally:
        torch.set_num_threads(before)
    for perm, indptr in perms[1:]:
        assert torch.equal(perm, perms[0][0]) and torch.equal(indptr, perms[0][1])


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_sorted_and_shuffled_index_match_the_reference(reduce, dtype):
    g = torch.Generator().manual_seed(11)
    src = torch.randn(3, 200, 2, generator=g, dtype=torch.float64)
    shuffled = torch.randint(0, 30, (200,), generator=g)
    for index in (shuffled, shuffled.sort().values):
        for dim_size in (None, 33):
            check_scatter(src, index.to(dtype), 1, dim_size, reduce, f"{dtype} dim_size={dim_size}")


def test_sorted_index_with_a_full_index_and_batched_rows():
    g = torch.Generator().manual_seed(12)
    src = torch.randn(4, 50, 3, generator=g, dtype=torch.float64)
    full = torch.randint(0, 8, (4, 50, 3), generator=g).sort(1).values  # varies along the features
    rows = torch.randint(0, 8, (4, 50), generator=g).sort(1).values  # one sorted row per batch
    for index in (full, rows, full.flip(1), rows.flip(1)):
        for reduce in ("sum", "max"):
            check_scatter(src, index, 1, 9, reduce, f"index {list(index.shape)}")


def test_out_of_range_on_the_native_path_names_the_callers_position():
    with pytest.raises(ValueError, match=r"scatter: index must be < dim_size = 3, got index\[2, 1\] = 3"):
        so.scatter(torch.ones(3, 2), torch.tensor([[0, 1], [2, 2], [0, 3]]), 0, dim_size=3)
    with pytest.raises(ValueError, match=r"scatter_sum: index must be non-negative, got index\[4\] = -1"):
        so.scatter_sum(torch.ones(5), torch.tensor([0, 1, 2, 3, -1]))
    with pytest.raises(ValueError, match=r"scatter_plan: index must be < dim_size = 4, got index\[1\] = 4"):
        so.scatter_plan(torch.tensor([0, 4, 1]), 4)


@pytest.mark.parametrize("index,size", [(torch.tensor([2, 0, 1, 0, 2]), 3), (torch.tensor([[0, 0, 2], [1, 1, 1]]).int(), 4),
                                        (torch.tensor([0, 1, 1, 3]), -1)], ids=["unsorted", "sorted_int32", "size_from_max"])
def test_opcheck_index_sort(index, size):
    torch.library.opcheck(torch.ops.torch_segops.index_sort.default, (index, size))


@pytest.mark.parametrize("call", ["scatter_mul", "scatter", "segment_coo"])
def test_mul_backward_through_out(call):
    """mul's gradient needs out's old values, which out= overwrites: it raised "modified by an inplace
    operation"; now the gradients are the product rule's, to src and to a differentiable out."""
    x = torch.tensor([[0.5, 2.0], [3.0, -1.0], [4.0, 0.25]], dtype=torch.float64, requires_grad=True)
    index = torch.tensor([2, 0, 2]) if call != "segment_coo" else torch.tensor([0, 2, 2])
    base = torch.tensor([[1.5, 2.0], [1.0, 1.0], [-2.0, 3.0]], dtype=torch.float64, requires_grad=True)
    if call == "scatter_mul":
        result = so.scatter_mul(x, index, 0, out=base.clone())
    elif call == "scatter":
        result = so.scatter(x, index, 0, out=base.clone(), reduce="mul")
    else:
        result = so.segment_coo(x, index, out=base.clone(), reduce="mul")
    result.sum().backward()
    want_x = torch.zeros_like(x)
    want_base = torch.ones_like(base)
    for r in range(3):
        t = int(index[r])
        others = [k for k in range(3) if int(index[k]) == t and k != r]
        want_x[r] = base[t].detach() * torch.stack([x[k].detach() for k in others]).prod(0) if others else base[t]
    for t in range(3):
        rows = [k for k in range(3) if int(index[k]) == t]
        if rows:
            want_base[t] = torch.stack([x[k].detach() for k in rows]).prod(0)
    torch.testing.assert_close(x.grad, want_x)
    torch.testing.assert_close(base.grad, want_base)
    x.grad = None
    so.scatter_mul(x, index if call != "segment_coo" else torch.tensor([2, 0, 2]), 0,
                   out=torch.ones(3, 2, dtype=torch.float64)).sum().backward()  # the case: out plain
    assert x.grad is not None and bool(x.grad.isfinite().all())


def test_empty_src_with_a_plan_has_the_plans_size():
    plan = so.scatter_plan(torch.empty(0, dtype=torch.long), 5)
    assert so.scatter(torch.ones(0, 3), torch.empty(0, dtype=torch.long), 0, plan=plan).shape == (5, 3)
    assert so.scatter(torch.ones(0, 3), torch.empty(0, dtype=torch.long), 0, dim_size=5).shape == (5, 3)


@pytest.mark.parametrize("size", [2**63, 2**64, 10**30])
def test_dim_size_past_int64_names_the_argument(size):
    with pytest.raises(ValueError, match=rf"^torch_segops.scatter: dim_size must be < 2\*\*63, got {size}$"):
        so.scatter(torch.ones(3), torch.tensor([0, 1, 2]), 0, dim_size=size)
    with pytest.raises(ValueError, match=rf"^torch_segops.segment_coo: dim_size must be < 2\*\*63, got {size}$"):
        so.segment_coo(torch.ones(3), torch.tensor([0, 1, 2]), dim_size=size)
