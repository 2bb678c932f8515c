// Software prefetch of the arrays a loop streams through while it also updates memory at random places (a
// one-feature scatter): the random updates hold the CPU's miss buffers, and the hardware prefetcher then
// falls behind on the streams (measured in docs/design.md, "scatter on the CPU"). A hint only: it never
// faults and changes no result. Highway's Prefetch (prefetcht0 on x86, prfm with GCC and Clang elsewhere;
// nothing with MSVC on ARM64) keeps the instruction out of our sources (tests/packaging/test_portability.py).
#pragma once

#include <cstdint>

#include <hwy/cache_control.h>

namespace torch_segops {
namespace cpu {

// Hints the cache lines of p[0, rows) (rows a compile-time count, so the loop unrolls).
template <int64_t rows, typename E> inline void prefetch_rows(const E* p) {
  constexpr int64_t kLine = 64;
  const char* c = reinterpret_cast<const char*>(p);
  for (int64_t b = 0; b < rows * static_cast<int64_t>(sizeof(E)); b += kLine) hwy::Prefetch(c + b);
}

}  // namespace cpu
}  // namespace torch_segops
