"""Package test: the installed binary is the variant it claims to be and computes the right answers.

Runs in the recipe's test environment (no source tree): plain-PyTorch references only.
"""

import argparse
import sys
import warnings

import torch

import torch_segops as so

warnings.filterwarnings("ignore", message="index_reduce")

ap = argparse.ArgumentParser()
ap.add_argument("--variant", choices=["cpu", "cuda"], required=True)
ap.add_argument("--version", required=True)
args = ap.parse_args()

info = so.build_info()
print("build_info:", info)
assert so.__version__ == args.version, (so.__version__, args.version)
assert info["variant"] == args.variant, f"package built as {args.variant} but the library says {info['variant']}"
if args.variant == "cuda":
    assert info["cuda_version"] and info["cuda_archs"], info
assert so.library_path().endswith("_C.so")

devices = ["cpu"] + (["cuda"] if args.variant == "cuda" and torch.cuda.is_available() else [])
g = torch.Generator().manual_seed(0)
# a graph-like CSR: 1000 segments with 0..40 rows each (empty segments included), 16 features
counts = torch.randint(0, 41, (1000,), generator=g)
indptr = torch.zeros(1001, dtype=torch.long)
indptr[1:] = counts.cumsum(0)
src = torch.randn(int(indptr[-1]), 16, generator=g, dtype=torch.float64)
seg = torch.repeat_interleave(torch.arange(1000), counts)



def reference(reduce):
    out = torch.zeros(1000, 16, dtype=src.dtype)
    if reduce == "sum":
        return out.index_add_(0, seg, src)
    mode = {"mean": "mean", "min": "amin", "max": "amax"}[reduce]
    return out.index_reduce_(0, seg, src, mode, include_self=False)  # empty segments stay 0


for dev in devices:
    s, ip = src.to(dev), indptr.to(dev)
    for reduce in ("sum", "mean", "min", "max"):
        got = so.segment_csr(s, ip, reduce=reduce).cpu()
        torch.testing.assert_close(got, reference(reduce), msg=f"segment_csr {reduce} on {dev}")
    gathered = so.gather_csr(so.segment_csr(s, ip, reduce="sum"), ip).cpu()
    torch.testing.assert_close(gathered, reference("sum")[seg])
    soft = so.segment_softmax_csr(s, ip).cpu()
    e = (src - src.max()).exp()
    torch.testing.assert_close(soft, e / torch.zeros(1000, 16, dtype=src.dtype).index_add_(0, seg, e)[seg])
    print(f"{dev}: segment_csr sum/mean/min/max, gather_csr and segment_softmax_csr match on "
          f"{src.shape[0]} rows x 16 features in 1000 segments")

print("torch", torch.__version__, "| python", sys.version.split()[0], "| OK")
