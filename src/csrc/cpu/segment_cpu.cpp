// CPU backend of torch_segops: indptr validation, outputs that ask for huge pages, and the typed kernels
// of kernels.cpp for the best instruction set of this CPU (cpu/kernels.h), behind the shared op entry
// points of segment_ops.h.
#include <algorithm>
#include <atomic>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "cpu/fresh_output.h"
#include "cpu/kernels.h"
#include "cpu/nonempty_segments.h"
#include "csr_args.h"
#include "index_math.h"
#include "platform.h"
#include "reduction_table.h"
#include "segment_ops.h"

namespace torch_segops {
namespace {

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
    throw std::runtime_error(
        indptr_error_message(op, limit_what, i, len, a.indptr_rows, p[i], i % len != 0 ? p[i - 1] : 0, limit));
  }
  return max_last.load();
}

// ---- outputs ---------------------------------------------------------------------------------------

// ---- the kernels for the shared entry points (segment_ops.h) -------------------------------------------

struct CpuBackend {
  const char* op;
  CpuBackend(const CsrArgs&, OpId id) : op(op_names(id).name) {}

  // output_for (csr_args.h), with a new tensor announced by fresh_output.
  Tensor output(const Tensor& like, const std::vector<int64_t>& sizes, ScalarType dtype, const Tensor* given,
                const char* name) const {
    Tensor t = output_for(like, sizes, dtype, given, op, name);
    return given == nullptr ? cpu::fresh_output(t) : t;
  }
  void check_indptr(const CsrArgs& a, int64_t limit, const char* limit_what) const {
    validate_indptr(a, limit, op, limit_what);
  }
  int64_t gather_rows(const CsrArgs& a, int64_t size, const char* limit_what) const {
    const int64_t needed = validate_indptr(a, size, op, limit_what);
    return size >= 0 ? size : needed;
  }
  void reduce(const CsrArgs& a, Reduce r, const Tensor& out, const Tensor* arg) const {
    cpu::kernels().segment_reduce(a, r, out, arg);
  }
  void gather(const CsrArgs& a, int64_t R, const Tensor& out) const { cpu::kernels().gather(a, R, out); }
  // The softmax kernels keep a statistic per segment: given the non-empty segments only when most are
  // empty (cpu/nonempty_segments.h), so that it never outgrows src.
  void softmax(const CsrArgs& a, const Tensor& out) const {
    if (cpu::has_many_empty_segments(a)) return cpu::kernels().softmax(cpu::without_empty_segments(a, op), out);
    cpu::kernels().softmax(a, out);
  }
  void softmax_backward(const CsrArgs& a, const Tensor& grad, const Tensor& grad_in) const {
    if (cpu::has_many_empty_segments(a)) {
      return cpu::kernels().softmax_backward(cpu::without_empty_segments(a, op), grad, grad_in);
    }
    cpu::kernels().softmax_backward(a, grad, grad_in);
  }
  void finish() const {}
};

}  // namespace
}  // namespace torch_segops

STABLE_TORCH_LIBRARY_IMPL(torch_segops, CPU, m) { torch_segops::register_segment_ops<torch_segops::CpuBackend>(m); }
