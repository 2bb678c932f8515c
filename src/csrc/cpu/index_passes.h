// Passes over a COO index shared by the CPU index ops (coo_cpu.cpp) and scatter (scatter_cpu.cpp): its
// maximum, and the first problem in it, worded as the Python COO checks word it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include <torch/csrc/stable/ops.h>

#include "index_args.h"
#include "index_math.h"
#include "op_names.h"

namespace torch_segops {
namespace cpu {

constexpr int64_t kBlock = 1 << 16;  // index elements per unit of parallel work

// max(index) + 1 (0 for an empty index; size_after_max refuses the int64 maximum); a negative maximum gives 0 and
// the check reports the value.
template <typename I>
inline int64_t size_from_max(const I* x, int64_t total) {
  std::atomic<int64_t> best{-1};
  torch::stable::parallel_for(0, ceil_div(total, kBlock), 1, [&](int64_t b0, int64_t b1) {
    int64_t m = -1;
    for (int64_t i = b0 * kBlock, end = std::min(total, b1 * kBlock); i < end; ++i) m = std::max<int64_t>(m, x[i]);
    int64_t cur = best.load();
    while (m > cur && !best.compare_exchange_weak(cur, m)) {
    }
  });
  return size_after_max(best.load());
}

// The first problem, as the Python COO checks word it (only on the error path; serial).
template <typename I>
inline std::string first_problem(const I* x, int64_t rows, int64_t n, int64_t size, bool check_sorted) {
  const int64_t total = rows * n;
  auto at = [&](int32_t what, int64_t i) {
    return kPrefix + index_error_message(what, i, n, x[i], i % n != 0 ? int64_t{x[i - 1]} : 0, size);
  };
  if (check_sorted) {
    for (int64_t i = 1; i < total; ++i) {
      if (i % n != 0 && x[i] < x[i - 1]) return at(kIndexUnsorted, i);
    }
  }
  for (int64_t i = 0; i < total; ++i) {
    if (x[i] < 0) return at(kIndexNegative, i);
  }
  for (int64_t i = 0; i < total; ++i) {
    if (x[i] >= size) return at(kIndexTooLarge, i);
  }
  return "";
}

}  // namespace cpu
}  // namespace torch_segops
