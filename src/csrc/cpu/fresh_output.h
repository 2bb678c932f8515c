// New CPU outputs that ask for transparent huge pages (shared by cpu/segment_cpu.cpp and cpu/coo_cpu.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include <torch/csrc/stable/tensor.h>

#include "platform.h"
#include "torch_errors.h"

namespace torch_segops {
namespace cpu {

// A new output, about to be written for the first time, page by page. Where transparent huge pages
// are enabled for memory that asks for them (`madvise`, the default of many distributions), asking
// turns 512 page faults per 2 MiB into one: a large output (a gather's, a softmax's, max's int64 arg)
// otherwise spends more time in first-touch page faults than in the kernel. Memory already in use
// keeps its pages; the hint never changes a value, and its failure (no THP) is ignored. Outputs of four
// 2 MiB pages or more ask (platform::advise_huge_pages: a no-op where the OS has no such hint).
inline torch::stable::Tensor fresh_output(torch::stable::Tensor t) {
  const int64_t bytes = t.numel() * dtype_bytes(t.scalar_type());
  if (bytes >= (int64_t{8} << 20)) platform::advise_huge_pages(t.mutable_data_ptr(), static_cast<size_t>(bytes));
  return t;
}

}  // namespace cpu
}  // namespace torch_segops
