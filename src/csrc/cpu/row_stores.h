// Output rows written around the cache. A kernel writes each output element once and never reads it
// back, so an ordinary store into memory that is not in the cache first reads the line
// (read-for-ownership) and pushes the input out of the cache; a non-temporal ("streaming") store writes
// whole lines to memory instead. The ops stream only into a large `out=` that the caller passed
// (stream_into, segment_cpu.cpp): memory faulted in by the kernel's first write was just zeroed by
// the OS and is in the cache, where ordinary stores win. Measurements: docs/design.md.
//
// A row streams when its start is 32-byte aligned and its size a multiple of 32 bytes, in the AVX2
// kernel set only (16-byte streaming stores measured slower than ordinary ones on this project's AMD
// EPYC VMs). Other rows take ordinary stores. Values never depend on the choice.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "vec_math.h"  // SEGOPS_ISA_NAMESPACE_*

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

// dst[f] = value(f) for f in [0, n), streamed when `stream` and the row allows it. Streaming
// writers call stream_fence() once after their last row (parallel_for's join then publishes them).
template <typename T, class Value>
inline void write_row(T* dst, int64_t n, bool stream, const Value& value) {
#if defined(__AVX2__)
  constexpr int64_t kVec = 32, kBlock = 1024;  // bytes per store, bytes staged in L1 at a time
  constexpr int64_t kPerBlock = kBlock / sizeof(T);
  if (stream && n * sizeof(T) % kVec == 0 && reinterpret_cast<uintptr_t>(dst) % kVec == 0) {
    alignas(kVec) T buf[kPerBlock];
    for (int64_t f0 = 0; f0 < n; f0 += kPerBlock) {
      const int64_t m = n - f0 < kPerBlock ? n - f0 : kPerBlock;
      for (int64_t f = 0; f < m; ++f) buf[f] = value(f0 + f);
      const __m256i* from = reinterpret_cast<const __m256i*>(buf);
      __m256i* to = reinterpret_cast<__m256i*>(dst + f0);
      for (int64_t i = 0; i < m * static_cast<int64_t>(sizeof(T)) / kVec; ++i) _mm256_stream_si256(to + i, from[i]);
    }
    return;
  }
#endif
  for (int64_t f = 0; f < n; ++f) dst[f] = value(f);
}

inline void stream_fence() {
#if defined(__AVX2__)
  _mm_sfence();
#endif
}

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
