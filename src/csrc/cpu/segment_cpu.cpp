// CPU ops of torch_segops: argument checks, indptr validation and output allocation, then the typed
// kernels of kernels.cpp for the best instruction set of this CPU (cpu/kernels.h).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "cpu/kernels.h"
#include "csr_args.h"
#include "reducers.h"

namespace torch_segops {
namespace cpu {

const Kernels& kernels() {
  static const Kernels& chosen = [&]() -> const Kernels& {
    const char* force = std::getenv("TORCH_SEGOPS_CPU_ISA");
    if (force != nullptr && std::strcmp(force, "baseline") == 0) return kernels_baseline();
#if defined(TORCH_SEGOPS_CPU_AVX2)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
        __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2"))
      return kernels_avx2();
#endif
    return kernels_baseline();
  }();
  return chosen;
}

}  // namespace cpu

namespace {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- indptr validation ------------------------------------------------------------------------------

// Every indptr row must satisfy 0 <= indptr[0] <= ... <= indptr[S] <= limit (limit < 0: no bound).
// Returns the largest indptr[..., -1].
int64_t validate_indptr(const CsrArgs& a, int64_t limit, const char* op, const char* limit_what) {
  const int64_t len = a.S + 1;
  const int64_t total = a.indptr_rows * len;
  const int64_t* p = static_cast<const int64_t*>(a.indptr.const_data_ptr());
  constexpr int64_t kBlock = 1 << 16;
  const int64_t nblocks = ceil_div(total, kBlock);
  std::atomic<int64_t> first_bad{total};
  std::atomic<int64_t> max_last{0};
  // The first violation in [i0, i1), if any, into first_bad.
  auto find_first_bad = [&](int64_t i0, int64_t i1) {
    int64_t k = i0 % len;  // position inside the indptr row, advanced without division
    for (int64_t i = i0; i < i1; ++i, ++k) {
      if (k == len) k = 0;
      const bool bad = k == 0 ? p[i] < 0 : p[i] < p[i - 1] || (k == len - 1 && limit >= 0 && p[i] > limit);
      if (bad) {
        int64_t cur = first_bad.load();
        while (i < cur && !first_bad.compare_exchange_weak(cur, i)) {
        }
        return;
      }
    }
  };
  torch::stable::parallel_for(0, nblocks, 1, [&](int64_t b0, int64_t b1) {
    int64_t local_max = 0;
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t i0 = blk * kBlock, i1 = std::min(total, i0 + kBlock);
      // Per piece of an indptr row inside the block: its pairs in one branch-free (vectorised) loop,
      // then its first and last offsets. A block with a violation is searched again for the first.
      bool bad = false;
      for (int64_t i = i0; i < i1;) {
        const int64_t k = i % len, row_end = i - k + len, end = std::min(i1, row_end);
        if (k == 0) bad |= p[i] < 0;
        bool down = false;
        for (int64_t j = k == 0 ? i + 1 : i; j < end; ++j) down |= p[j] < p[j - 1];
        bad |= down;
        if (end == row_end) {
          bad |= limit >= 0 && p[end - 1] > limit;
          local_max = std::max(local_max, p[end - 1]);
        }
        i = end;
      }
      if (bad) find_first_bad(i0, i1);
    }
    int64_t cur = max_last.load();
    while (local_max > cur && !max_last.compare_exchange_weak(cur, local_max)) {
    }
  });
  const int64_t i = first_bad.load();
  if (i < total) {
    const int64_t row = i / len, k = i % len;
    std::string at = a.indptr_rows > 1 ? "indptr[row " + std::to_string(row) + "][" : "indptr[";
    if (k == 0) fail(op, "indptr must start at a non-negative offset, got ", at, "0] = ", p[i]);
    if (p[i] < p[i - 1])
      fail(op, "indptr must be non-decreasing, got ", at, k, "] = ", p[i], " < ", at, k - 1, "] = ", p[i - 1]);
    fail(op, "indptr[..., -1] must be <= ", limit_what, " = ", limit, ", got ", at, k, "] = ", p[i]);
  }
  return max_last.load();
}

// ---- outputs ---------------------------------------------------------------------------------------

int64_t element_bytes(ScalarType t) {
  switch (t) {
    case ScalarType::Half:
    case ScalarType::BFloat16: return 2;
    case ScalarType::Float:
    case ScalarType::Int: return 4;
    default: return 8;
  }
}

// A new output, about to be written for the first time, page by page. Where transparent huge pages
// are enabled for memory that asks for them (`madvise`, the default of many distributions), asking
// turns 512 page faults per 2 MiB into one: a large output (a gather's, a softmax's, max's int64 arg)
// otherwise spends more time in first-touch page faults than in the kernel. Memory already in use
// keeps its pages; the hint never changes a value, and its failure (no THP) is ignored.
Tensor fresh_output(Tensor t) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t bytes = static_cast<uintptr_t>(t.numel() * element_bytes(t.scalar_type()));
  if (bytes >= 4 * kHuge) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(t.mutable_data_ptr());
    const uintptr_t lo = (p + kHuge - 1) & ~(kHuge - 1), hi = (p + bytes) & ~(kHuge - 1);
    if (hi > lo) (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
  }
#endif
  return t;
}

// output_for (csr_args.h), with a new tensor announced by fresh_output.
Tensor cpu_output(const Tensor& src, const std::vector<int64_t>& sizes, ScalarType dtype, const Tensor* given,
                  const char* op, const char* name) {
  Tensor t = output_for(src, sizes, dtype, given, op, name);
  return given == nullptr ? fresh_output(t) : t;
}

// ---- ops -------------------------------------------------------------------------------------------

// given_out / given_arg: the out= variant's tensors, or null to allocate.
std::tuple<Tensor, Tensor> segment_reduce_into(const Tensor& src, const Tensor& indptr, const std::string& reduce,
                                               const Tensor* given_out, const Tensor* given_arg) {
  const char* op = "segment_csr";
  const Reduce r = parse_reduce(reduce, op);
  CsrArgs a = make_csr_args(src, indptr, op);
  const bool with_arg = r == Reduce::Min || r == Reduce::Max;
  dispatch_dtype(src.scalar_type(), r == Reduce::Sum || with_arg, op, "src", [](auto) {});
  validate_indptr(a, a.N, op, "src.size(dim)");
  const std::vector<int64_t> sizes = sizes_with_dim(src, a.dim, a.S);
  Tensor out = cpu_output(src, sizes, src.scalar_type(), given_out, op, "out");
  Tensor arg = cpu_output(src, with_arg ? sizes : std::vector<int64_t>{0}, ScalarType::Long, given_arg, op, "arg");
  cpu::kernels().segment_reduce(a, r, out, with_arg ? &arg : nullptr);
  return {out, arg};
}

std::tuple<Tensor, Tensor> segment_reduce_cpu(Tensor src, Tensor indptr, std::string reduce) {
  return segment_reduce_into(src, indptr, reduce, nullptr, nullptr);
}

void segment_reduce_out_cpu(Tensor src, Tensor indptr, std::string reduce, Tensor out, Tensor arg) {
  segment_reduce_into(src, indptr, reduce, &out, &arg);
}

// size: output rows (-1: read from indptr); given_out: the out= variant's tensor (its rows are the size).
Tensor gather_into(const Tensor& src, const Tensor& indptr, int64_t size, const Tensor* given_out) {
  const char* op = "gather_csr";
  CsrArgs a = make_csr_args(src, indptr, op);
  SEGOPS_CHECK(a.N == a.S, op, "src.size(dim) must equal the number of segments indptr.size(-1) - 1 = ", a.S,
               ", got ", a.N);
  if (given_out != nullptr) {
    SEGOPS_CHECK(given_out->dim() == src.dim(), op, "out must have as many dims as src (", src.dim(), ")");
    size = given_out->size(a.dim);
  }
  SEGOPS_CHECK(size >= -1, op, "size must be >= 0 (or -1 to read it from indptr), got ", size);
  dispatch_dtype(src.scalar_type(), true, op, "src", [](auto) {});
  const int64_t needed = validate_indptr(a, size, op, given_out != nullptr ? "out.size(dim)" : "size");
  const int64_t R = size >= 0 ? size : needed;
  Tensor out = cpu_output(src, sizes_with_dim(src, a.dim, R), src.scalar_type(), given_out, op, "out");
  cpu::kernels().gather(a, R, out);
  return out;
}

Tensor gather_csr_cpu(Tensor src, Tensor indptr, int64_t size) { return gather_into(src, indptr, size, nullptr); }

void gather_csr_out_cpu(Tensor src, Tensor indptr, Tensor out) { gather_into(src, indptr, -1, &out); }

Tensor segment_softmax_cpu(Tensor src, Tensor indptr) {
  const char* op = "segment_softmax_csr";
  CsrArgs a = make_csr_args(src, indptr, op);
  dispatch_dtype(src.scalar_type(), false, op, "src", [](auto) {});
  validate_indptr(a, a.N, op, "src.size(dim)");
  Tensor out = fresh_output(torch::stable::new_empty(src, src.sizes()));
  cpu::kernels().softmax(a, out);
  return out;
}

Tensor segment_softmax_backward_cpu(Tensor grad, Tensor out, Tensor indptr) {
  const char* op = "segment_softmax_csr (backward)";
  SEGOPS_CHECK(grad.sizes().equals(out.sizes()) && grad.scalar_type() == out.scalar_type(), op,
               "grad and out must have the same shape and dtype");
  CsrArgs a = make_csr_args(out, indptr, op, "out");
  dispatch_dtype(out.scalar_type(), false, op, "out", [](auto) {});
  validate_indptr(a, a.N, op, "out.size(dim)");
  const Tensor g = contiguous_of(grad, op, "grad");
  Tensor grad_in = fresh_output(torch::stable::new_empty(out, out.sizes()));
  cpu::kernels().softmax_backward(a, g, grad_in);
  return grad_in;
}

}  // namespace
}  // namespace torch_segops

// The kernel set this process runs ("baseline" or "avx2"), for torch_segops.build_info() (ctypes).
extern "C" __attribute__((visibility("default"))) const char* torch_segops_cpu_isa() {
  return torch_segops::cpu::kernels().isa;
}

STABLE_TORCH_LIBRARY_IMPL(torch_segops, CPU, m) {
  m.impl("segment_reduce", TORCH_BOX((&torch_segops::guarded<&torch_segops::segment_reduce_cpu, torch_segops::kSegmentReduce>::call)));
  m.impl("gather_csr", TORCH_BOX((&torch_segops::guarded<&torch_segops::gather_csr_cpu, torch_segops::kGatherCsr>::call)));
  m.impl("segment_reduce_out", TORCH_BOX((&torch_segops::guarded<&torch_segops::segment_reduce_out_cpu, torch_segops::kSegmentReduceOut>::call)));
  m.impl("gather_csr_out", TORCH_BOX((&torch_segops::guarded<&torch_segops::gather_csr_out_cpu, torch_segops::kGatherCsrOut>::call)));
  m.impl("segment_softmax", TORCH_BOX((&torch_segops::guarded<&torch_segops::segment_softmax_cpu, torch_segops::kSegmentSoftmax>::call)));
  m.impl("segment_softmax_backward", TORCH_BOX((&torch_segops::guarded<&torch_segops::segment_softmax_backward_cpu, torch_segops::kSegmentSoftmaxBackward>::call)));
}
