// Float sums of rows of one feature in the 8 lanes of an AVX2 vector: a window of up to 32 rows without a
// branch (sum_window_avx2), any number of rows (sum_lanes_avx2), and their horizontal sum (sum_avx2). The
// float sums of one feature of reduce_piece.h and the short segments of segment_sums.h run them.
#pragma once

#include <cstdint>

#include "cpu/array_loads.h"

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

#if defined(__AVX2__)
// Float sum of rows [0, n) of x, n <= 32, in 8 lanes (their total is the sum): four vectors that
// always run and keep only the rows below n, so a segment of up to 32 rows costs the same whatever its
// length, with no branch to mispredict. The vectors are read whole (rows past n are zeroed, not
// skipped) when `readable` elements from x on lie in the array; near the array's end a zero-padded copy
// is read instead, so nothing past the array is read. kEndReadable: the caller knows that x[31] lies in
// the array (no check). The four vectors are summed pairwise.
template <bool kEndReadable = false, typename T>
[[gnu::always_inline]] inline __m256 sum_window_avx2(const T* x, int64_t n, int64_t readable) {
  const T* last = x;
  T pad[32];
  if (!kEndReadable && readable < 32) {
    for (int k = 0; k < 32; ++k) pad[k] = k < readable ? x[k] : T(0);
    last = pad;
  }
  const __m256i left = _mm256_set1_epi32(static_cast<int>(n));
  __m256 t[4];
  for (int k = 0; k < 4; ++k) {
    const __m256i row = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(8 * k));
    t[k] = _mm256_and_ps(load8_f32(last + 8 * k), _mm256_castsi256_ps(_mm256_cmpgt_epi32(left, row)));
  }
  return _mm256_add_ps(_mm256_add_ps(t[0], t[1]), _mm256_add_ps(t[2], t[3]));
}

// Float sum of x[0, n) in 8 lanes: whole steps of 32 rows in four vectors (summed pairwise), plus
// sum_window_avx2 of the rest. The order of the additions depends on n only.
template <bool kEndReadable = false, typename T>
[[gnu::always_inline]] inline __m256 sum_lanes_avx2(const T* x, int64_t n, int64_t readable) {
  __m256 whole = _mm256_setzero_ps();
  int64_t i = 0;
  if (n >= 32) {
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (; i + 32 <= n; i += 32) {
      for (int k = 0; k < 4; ++k) a[k] = _mm256_add_ps(a[k], load8_f32(x + i + 8 * k));
    }
    whole = _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]));
  }
  return _mm256_add_ps(whole, sum_window_avx2<kEndReadable>(x + i, n - i, readable - i));
}

// The horizontal sum ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)) (segment_sums.h sums eight
// vectors at once in the same order).
[[gnu::always_inline]] inline float hsum1(__m256 v) {
  const __m256 t = _mm256_hadd_ps(v, v);
  const __m256 u = _mm256_hadd_ps(t, t);
  return _mm_cvtss_f32(_mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1)));
}

template <typename T>
[[gnu::always_inline]] inline float sum_avx2(const T* x, int64_t n, int64_t readable) {
  return hsum1(sum_lanes_avx2(x, n, readable));
}
#endif

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
