"""Every public op of torch_segops as a repeatable call on small CPU inputs, and the memory counters
that tell whether calls leave memory behind. Shared by tests/kernels/test_memory.py (heap growth per call, CI)
and benchmarks/soak.py (heap and RSS slopes over minutes).

CASES maps "function" or "function[variant]" to a factory that builds the inputs once and returns a
call without arguments. A case with a gradient runs the forward and the backward (autograd.grad),
so the op's forward, its backward and the ops the backward calls are all exercised. OP_CASES does the
same for every compiled op (torch.ops.torch_segops.<name>), called directly.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Callable, Dict, Optional, Tuple

import torch

import torch_segops as so

# Names in torch_segops.__all__ that compute nothing (every other name must have a case).
NOT_OPS = {"LibraryLoadError", "ScatterPlan", "__version__", "build_info", "check_errors", "cuda_plan_counts",
           "cuda_plans", "install_as_torch_scatter", "library_path", "set_cuda_plans"}


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _mallinfo2():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    return fn


_MALLINFO2 = _mallinfo2()


def heap_in_use() -> Optional[int]:
    """Bytes glibc's malloc has handed out and not had back (uordblks + hblkhd), or None without glibc
    >= 2.33."""
    if _MALLINFO2 is None:
        return None
    m = _MALLINFO2()
    return m.uordblks + m.hblkhd


def rss_bytes() -> int:
    """This process's resident set (VmRSS), in bytes."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


# ---- inputs ------------------------------------------------------------------------------------------

def _src():
    return torch.randn(6, 3, dtype=torch.float32)


INDPTR = [0, 2, 2, 6]      # three segments of src's 6 rows, one empty
INDEX = [0, 0, 2, 2, 2, 2]  # the same as a sorted COO index
UNSORTED = [2, 0, 2, 1, 0, 2]


def _forward(fn, *args, **kwargs) -> Callable[[], None]:
    def call():
        fn(*args, **kwargs)
    return call


def _both(first: Callable[[], None], second: Callable[[], None]) -> Callable[[], None]:
    def call():
        first()
        second()
    return call


def _with_grad(fn, *args, **kwargs) -> Callable[[], None]:
    """forward and backward w.r.t. src (the first argument); tuple results: the values."""
    x = _src().requires_grad_()

    def values():
        y = fn(x, *args, **kwargs)
        return y[0] if isinstance(y, tuple) else y

    grad = torch.ones_like(values())

    def call():
        torch.autograd.grad(values(), x, grad)
    return call


def _softmax_double_backward() -> Callable[[], None]:
    x = _src().requires_grad_()
    indptr = torch.tensor(INDPTR)
    g = torch.randn(6, 3)

    def call():
        (gx,) = torch.autograd.grad(so.segment_softmax_csr(x, indptr), x, g, create_graph=True)
        torch.autograd.grad(gx.sum(), x)
    return call


def _out_call(fn, rows, *args, **kwargs) -> Callable[[], None]:
    """fn(src, *args, out=out) into a preallocated out (the in-place ops for the CSR forms)."""
    src = _src()
    out = torch.zeros(rows, 3)

    def call():
        fn(src, *args, out=out, **kwargs)
    return call


def _cases() -> Dict[str, Callable[[], Callable[[], None]]]:
    """The public functions: every one in torch_segops.__all__ that computes (aliases share a case),
    with its backward where it has one, and the out= forms that take their own path."""
    ip = torch.tensor(INDPTR)
    idx = torch.tensor(INDEX)
    unsorted = torch.tensor(UNSORTED)
    seg_rows = torch.randn(3, 3)
    cases: Dict[str, Callable[[], Callable[[], None]]] = {}
    for name in ("segment_sum_csr", "segment_mean_csr", "segment_min_csr", "segment_max_csr",
                 "segment_logsumexp_csr", "segment_softmax_csr"):
        fn = getattr(so, name)
        cases[name] = lambda fn=fn: _with_grad(fn, ip)
    cases["segment_sum_csr[out]"] = lambda: _out_call(so.segment_sum_csr, 3, ip)
    cases["segment_max_csr[out]"] = lambda: _out_call(so.segment_max_csr, 3, ip)
    cases["segment_mean_csr[int]"] = lambda: _forward(so.segment_mean_csr, torch.arange(18).reshape(6, 3), ip)
    cases["segment_softmax_csr[double backward]"] = _softmax_double_backward
    cases["segment_csr"] = lambda: _with_grad(so.segment_csr, ip, reduce="mean")
    cases["segment_csr[mul]"] = lambda: _with_grad(so.segment_csr, ip, reduce="mul")
    cases["segment_csr[mul out]"] = lambda: _out_call(so.segment_csr, 3, ip, reduce="mul")
    cases["gather_csr"] = lambda: _with_grad_rows(so.gather_csr, seg_rows, ip)
    cases["gather_csr[out]"] = lambda: _forward(so.gather_csr, seg_rows, ip, out=torch.zeros(6, 3))
    for name in ("segment_sum_coo", "segment_mean_coo", "segment_min_coo", "segment_max_coo"):
        fn = getattr(so, name)
        cases[name] = lambda fn=fn: _with_grad(fn, idx)
    cases["segment_sum_coo[out]"] = lambda: _out_call(so.segment_sum_coo, 3, idx)
    cases["segment_max_coo[out]"] = lambda: _out_call(so.segment_max_coo, 3, idx)
    cases["segment_coo"] = lambda: _with_grad(so.segment_coo, idx, reduce="max")
    cases["segment_coo[mul]"] = lambda: _with_grad(so.segment_coo, idx, reduce="mul")
    cases["gather_coo"] = lambda: _with_grad_rows(so.gather_coo, seg_rows, idx)
    for name in ("scatter_sum", "scatter_mean", "scatter_min", "scatter_max", "scatter_mul"):
        fn = getattr(so, name)
        cases[name] = lambda fn=fn: _with_grad(fn, unsorted, 0)
    cases["scatter_mean[out]"] = lambda: _out_call(so.scatter_mean, 3, unsorted, 0)
    cases["scatter_min[out]"] = lambda: _out_call(so.scatter_min, 3, unsorted, 0)
    cases["scatter_mul[out]"] = lambda: _out_call(so.scatter_mul, 3, unsorted, 0)
    cases["scatter"] = lambda: _with_grad(so.scatter, unsorted, 0, reduce="sum")
    cases["scatter_sum[plan]"] = lambda: _with_grad(so.scatter_sum, unsorted, 0, plan=so.scatter_plan(unsorted, 3))
    cases["scatter_plan"] = lambda: _forward(so.scatter_plan, unsorted, 3)
    for name in ("scatter_softmax", "scatter_log_softmax", "scatter_logsumexp", "scatter_std"):
        fn = getattr(so, name)
        cases[name] = lambda fn=fn: _with_grad(fn, unsorted, 0)
    return cases


def _op_cases() -> Dict[str, Callable[[], Callable[[], None]]]:
    """The compiled ops (torch.ops.torch_segops.*), called directly: the only code that crosses the
    stable ABI, so the one place a C++ leak can hide."""
    ops = torch.ops.torch_segops
    ip = torch.tensor(INDPTR)
    seg_rows = torch.randn(3, 3)
    cases: Dict[str, Callable[[], Callable[[], None]]] = {}
    for reduce in ("sum", "mean", "min", "max", "logsumexp", "mul"):
        op, op_out = getattr(ops, f"segment_{reduce}"), getattr(ops, f"segment_{reduce}_out")
        arg = [torch.zeros(3, 3, dtype=torch.long)] if reduce in ("min", "max") else []
        cases[f"segment_{reduce}"] = lambda op=op: _forward(op, _src(), ip)
        cases[f"segment_{reduce}_out"] = lambda op=op_out, arg=arg: _forward(op, _src(), ip, torch.zeros(3, 3), *arg)
    unsorted = torch.tensor(UNSORTED)
    perm, offsets = torch.sort(unsorted, stable=True).indices, torch.tensor([0, 2, 3, 6])
    for reduce in ("sum", "mean", "min", "max", "logsumexp", "mul"):
        op, op_plan = getattr(ops, f"scatter_{reduce}"), getattr(ops, f"scatter_{reduce}_plan")
        # both ways of each call: the sorted index read as it is, and the partition of an unsorted one
        cases[f"scatter_{reduce}"] = lambda op=op: _both(_forward(op, _src(), torch.tensor(INDEX), 3, True),
                                                         _forward(op, _src(), unsorted, -1, False))
        cases[f"scatter_{reduce}_plan"] = lambda op=op_plan: _forward(op, _src(), perm, offsets)
    cases["gather_csr"] = lambda: _forward(ops.gather_csr, seg_rows, ip, 6)
    cases["gather_csr_out"] = lambda: _forward(ops.gather_csr_out, seg_rows, ip, torch.zeros(6, 3))
    cases["segment_softmax"] = lambda: _forward(ops.segment_softmax, _src(), ip)
    cases["segment_softmax_backward"] = lambda: _forward(ops.segment_softmax_backward, _src(), _src(), ip)
    cases["index_to_indptr"] = lambda: _forward(ops.index_to_indptr, torch.tensor(INDEX), 3, True)
    cases["gather_index"] = lambda: _forward(ops.gather_index, seg_rows, torch.tensor(INDEX), True)
    # both outcomes of the validating pass in each call: already sorted (no permutation), and the counting sort
    cases["index_sort"] = lambda: _both(_forward(ops.index_sort, torch.tensor(INDEX), 3),
                                        _forward(ops.index_sort, torch.tensor(UNSORTED), -1))
    return cases


def _with_grad_rows(fn, rows: torch.Tensor, index: torch.Tensor) -> Callable[[], None]:
    """gather: forward and backward w.r.t. the segment rows."""
    x = rows.clone().requires_grad_()
    grad = torch.ones_like(fn(x, index))

    def call():
        torch.autograd.grad(fn(x, index), x, grad)
    return call


def large_max_case() -> Callable[[], None]:
    """segment_max_csr on 4000 x 1000 with 4000 segments (24 MB of values and argmax a call): before the
    fix, the leaked 48-byte blocks pinned the freed outputs and the RSS grew by 6.1 GB in 200 calls."""
    g = torch.Generator().manual_seed(0)
    src = torch.randn(4000, 1000, generator=g)
    indptr = torch.randint(0, 4001, (4001,), generator=g).sort().values
    indptr[0], indptr[-1] = 0, 4000
    return _forward(so.segment_max_csr, src, indptr)


def rss_growth(calls: int, bound: int) -> Tuple[int, int]:
    """(RSS growth in bytes, calls made) over up to `calls` calls of large_max_case after 10 warm-up calls,
    stopping at the first call that grows the RSS by `bound` bytes or more. Run it in a fresh process: how
    glibc places (and pins) large blocks depends on what the process allocated before."""
    call = large_max_case()
    for _ in range(10):
        call()
    before = rss_bytes()
    grown = 0
    for k in range(calls):
        call()
        grown = rss_bytes() - before
        if grown >= bound:
            return grown, k + 1
    return grown, calls


CASES = _cases()
OP_CASES = _op_cases()

if __name__ == "__main__":  # python memory_cases.py CALLS BOUND: "grown calls" of rss_growth
    print(*rss_growth(int(sys.argv[1]), int(sys.argv[2])))
