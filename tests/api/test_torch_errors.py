"""Errors raised by torch inside an op reach the user with torch's own message (issue #18).

Every case makes a torch call inside an op fail for lack of memory without touching memory: tensors of
terabytes are views made by expand() (free), or output sizes far beyond this machine, which the
allocator refuses at once. The messages must name what failed and never carry the stable ABI's bare
"torch_call_dispatcher(...) API call failed at" line.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import torch_segops as so
from conftest import requires_cuda

HUGE = 2**40  # rows: 4 TiB and more in float32, refused by any allocator here
ops = torch.ops.torch_segops
# torch >= 2.13 exports the shim that passes its message through the stable ABI (looked up at run time)
TORCH_GIVES_REASON = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13)
CPU_REASON = "DefaultCPUAllocator"


def huge_src(features: int = 4, dtype=torch.float32) -> torch.Tensor:
    return torch.ones(1, features, dtype=dtype).expand(HUGE, features)


def indptr_for(n: int) -> torch.Tensor:
    return torch.tensor([0, n // 2, n])


def assert_clean(msg: str) -> None:
    assert "torch_call_dispatcher(" not in msg and "API call failed at" not in msg, msg


# (what fails, call, pieces the message must hold)
CASES = [
    ("gather_csr: new output", lambda: so.gather_csr(torch.randn(3, 3), torch.tensor([0, 1, 2, 3]), size=HUGE),
     ["torch_segops.gather_csr: allocating out of shape (1099511627776, 3), float32, 13194139533312 bytes, "
      "on cpu failed"]),
    ("segment_csr sum: src made contiguous", lambda: so.segment_csr(huge_src(), indptr_for(HUGE)),
     ["torch_segops.segment_csr: copying src of shape (1099511627776, 4), float32, 17592186044416 bytes, on cpu "
      "into contiguous memory failed"]),
    ("segment_max_csr (values and arg): src made contiguous",
     lambda: so.segment_max_csr(huge_src(dtype=torch.float64), indptr_for(HUGE)),
     ["torch_segops.segment_max_csr: copying src of shape (1099511627776, 4), float64, 35184372088832 bytes"]),
    ("segment_softmax_csr: src made contiguous", lambda: so.segment_softmax_csr(huge_src(), indptr_for(HUGE)),
     ["torch_segops.segment_softmax_csr: copying src of shape (1099511627776, 4)"]),
    ("softmax backward: out made contiguous",
     lambda: ops.segment_softmax_backward(huge_src(), huge_src(), indptr_for(HUGE)),
     ["torch_segops.segment_softmax_csr (backward): copying out of shape (1099511627776, 4)"]),
    ("int32 indptr converted to int64",
     lambda: so.segment_csr(torch.randn(4, 2), torch.zeros(1, dtype=torch.int32).expand(HUGE)),
     ["torch_segops.segment_csr: converting indptr of shape (1099511627776), int64, 8796093022208 bytes, on cpu "
      "to int64 failed"]),
]


@pytest.mark.parametrize("what, call, pieces", CASES, ids=[c[0] for c in CASES])
def test_failed_torch_call_keeps_torchs_message(what, call, pieces):
    with pytest.raises(RuntimeError) as info:
        call()
    msg = str(info.value)
    assert_clean(msg)
    for piece in pieces:
        assert piece in msg, msg
    if TORCH_GIVES_REASON:
        assert CPU_REASON in msg, f"torch's own message is missing: {msg}"
    assert not isinstance(info.value, torch.OutOfMemoryError), "torch itself raises RuntimeError on the CPU"


def test_without_torchs_message_the_error_says_what_failed():
    """torch 2.10 to 2.12 cannot pass their message through the stable ABI: the error then says which
    allocation failed and why torch's reason is missing (simulated by TORCH_SEGOPS_NO_TORCH_MESSAGE)."""
    code = (
        "import torch, torch_segops as so\n"
        "try:\n"
        f"    so.gather_csr(torch.randn(3, 3), torch.tensor([0, 1, 2, 3]), size={HUGE})\n"
        "except RuntimeError as e:\n"
        "    print(e)\n")
    env = {**os.environ, "TORCH_SEGOPS_NO_TORCH_MESSAGE": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    msg = out.stdout.strip()
    assert_clean(msg)
    assert "allocating out of shape (1099511627776, 3), float32, 13194139533312 bytes, on cpu failed" in msg, msg
    assert "torch did not say why" in msg and CPU_REASON not in msg, msg


def test_argument_errors_are_unchanged():
    """Our own checks are not rewrapped: they keep their message and argument name (the public function's)."""
    with pytest.raises(RuntimeError, match=r"^torch_segops\.segment_csr: indptr must be non-decreasing, got indptr\[2\] "
                                           r"= 2 < indptr\[1\] = 3$"):
        so.segment_csr(torch.randn(4, 2), torch.tensor([0, 3, 2]))


@requires_cuda
def test_cuda_out_of_memory_is_torchs_error():
    src = torch.randn(3, 3, device="cuda")
    indptr = torch.tensor([0, 1, 2, 3], device="cuda")
    with pytest.raises(torch.OutOfMemoryError) as info:
        so.gather_csr(src, indptr, size=HUGE)
    msg = str(info.value)
    assert_clean(msg)
    assert "CUDA out of memory" in msg and "allocating out of shape (1099511627776, 3)" in msg, msg
    torch.cuda.empty_cache()
    torch.testing.assert_close(so.gather_csr(src, indptr), src)  # the device still works


def test_cuda_out_of_memory_message_becomes_torchs_type():
    """Without a GPU: the translation the public functions apply to what the C++ side raises."""
    from torch_segops._errors import public

    def fails(msg):
        raise RuntimeError(msg)

    oom = ("torch_segops.gather_csr: allocating out of shape (1099511627776, 3), float32, 13194139533312 bytes, "
           "on cuda:0 failed: CUDA out of memory. Tried to allocate 12.00 TiB.")
    with pytest.raises(torch.OutOfMemoryError, match="allocating out of shape") as info:
        public(fails, "tests", "fails")(oom)
    assert isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(RuntimeError, match="^torch_segops.fails: indptr must be non-decreasing$") as info:
        public(fails, "tests", "fails")("torch_segops.segment_sum: indptr must be non-decreasing")
    assert not isinstance(info.value, torch.OutOfMemoryError)
    assert so.segment_csr.__wrapped__ is not None, "the public functions carry the translation"
