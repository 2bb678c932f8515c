// Software prefetch of the arrays a loop streams through while it also updates memory at random places (a
// one-feature scatter): the random updates hold the CPU's miss buffers, and the hardware prefetcher then
// falls behind on the streams (measured in docs/design.md, "scatter on the CPU"). A hint only: it never
// faults and changes no result.
#pragma once

#include <cstdint>

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#if defined(_M_X64) || defined(_M_IX86)
#include <xmmintrin.h>
#endif
#endif

namespace torch_segops {
namespace cpu {

inline void prefetch_line(const void* p) {
#if defined(_MSC_VER) && !defined(__clang__)
#if defined(_M_ARM64)
  __prefetch(p);
#else
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
#endif
#else
  __builtin_prefetch(p, 0, 3);
#endif
}

// Hints the cache lines of p[0, rows) (rows a compile-time count, so the loop unrolls).
template <int64_t rows, typename E> inline void prefetch_rows(const E* p) {
  constexpr int64_t kLine = 64;
  const char* c = reinterpret_cast<const char*>(p);
  for (int64_t b = 0; b < rows * static_cast<int64_t>(sizeof(E)); b += kLine) prefetch_line(c + b);
}

}  // namespace cpu
}  // namespace torch_segops
