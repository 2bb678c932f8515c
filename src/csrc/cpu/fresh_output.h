// New CPU outputs that ask for transparent huge pages (shared by cpu/segment_cpu.cpp and cpu/coo_cpu.cpp).
#pragma once

#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <torch/csrc/stable/tensor.h>

#include "torch_errors.h"

namespace torch_segops {
namespace cpu {

// A new output, about to be written for the first time, page by page. Where transparent huge pages
// are enabled for memory that asks for them (`madvise`, the default of many distributions), asking
// turns 512 page faults per 2 MiB into one: a large output (a gather's, a softmax's, max's int64 arg)
// otherwise spends more time in first-touch page faults than in the kernel. Memory already in use
// keeps its pages; the hint never changes a value, and its failure (no THP) is ignored.
inline torch::stable::Tensor fresh_output(torch::stable::Tensor t) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t bytes = static_cast<uintptr_t>(t.numel() * dtype_bytes(t.scalar_type()));
  if (bytes >= 4 * kHuge) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(t.mutable_data_ptr());
    const uintptr_t lo = (p + kHuge - 1) & ~(kHuge - 1), hi = (p + bytes) & ~(kHuge - 1);
    if (hi > lo) (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
  }
#endif
  return t;
}

}  // namespace cpu
}  // namespace torch_segops
