// Min/max with arg of many short segments of one feature (F == 1: a segment is a run of consecutive
// elements), the case where the generic piece (a scalar pass for the value, a second one for the
// first row holding it, two mispredicted loop exits per segment) ran at 1/8 of `src.amax(0)`'s speed.
//
// A segment's rows are read 32 at a time into four vectors (rows past its end replaced by -inf for
// max, +inf for min, so they never win); the block's extreme is a horizontal max/min, and the first row
// holding it is the lowest set bit of the four vectors' equality masks. No branch depends on a segment's
// length up to 32 rows. NaN: the first NaN row wins (ArgExtremumOp's rule), found the same way, behind
// a branch that only inputs with NaN take. The value written is the element at the arg row, so it is
// exactly what the generic path writes (the first of equal values, -0.0 and 0.0 included).
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "cpu/array_loads.h"
#include "cpu/extremum_reducers.h"
#include "platform.h"

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

#if defined(__AVX2__)

// Whether arg_extrema_segments_f1 serves Op over this load: min/max with arg of float, bfloat16 or float16.
template <class Op, class Load> constexpr bool kArgExtremaSegmentsF1 = [] {
  if constexpr (is_array_load<Load>::value) {
    return ArgExtremumF32<Op>::value && kSumsInAvx2<typename is_array_load<Load>::type>;
  } else {
    return false;
  }
}();

template <bool kIsMax>
[[gnu::always_inline]] inline __m256 better_of(__m256 a, __m256 b) {
  return kIsMax ? _mm256_max_ps(a, b) : _mm256_min_ps(a, b);
}

// One block of up to 32 rows of a segment: rows [0, n) of x (n >= 1), `readable` elements from x on in
// the array. Returns the block's extreme (NaN rows ignored) and sets `valid` (bit r: row r < n) and the
// four vectors (rows past n replaced by the worst value).
template <bool kIsMax, typename T>
[[gnu::always_inline]] inline float block_extreme(const T* x, int64_t n, int64_t readable, __m256* v,
                                                 uint32_t& valid) {
  const T* from = x;
  T pad[32];
  if (readable < 32) {  // near the array's end: read a zero-padded copy, never past the array
    for (int k = 0; k < 32; ++k) pad[k] = k < readable ? x[k] : T(0);
    from = pad;
  }
  const float worst = kIsMax ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  const __m256 fill = _mm256_set1_ps(worst);
  const __m256i left = _mm256_set1_epi32(static_cast<int>(n < 32 ? n : 32));
  for (int k = 0; k < 4; ++k) {
    const __m256i row = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(8 * k));
    v[k] = _mm256_blendv_ps(fill, load8_f32(from + 8 * k), _mm256_castsi256_ps(_mm256_cmpgt_epi32(left, row)));
  }
  valid = n >= 32 ? ~uint32_t{0} : static_cast<uint32_t>((uint64_t{1} << n) - 1);
  // max/min return their second operand when either is NaN: `fill` second keeps NaN rows out
  __m256 m = better_of<kIsMax>(better_of<kIsMax>(v[0], v[1]), better_of<kIsMax>(v[2], v[3]));
  m = better_of<kIsMax>(m, _mm256_permute2f128_ps(m, m, 0x01));
  m = better_of<kIsMax>(m, _mm256_shuffle_ps(m, m, 0x4e));
  m = better_of<kIsMax>(m, _mm256_shuffle_ps(m, m, 0xb1));
  return _mm256_cvtss_f32(m);
}

// Bit r set where row r of the block's four vectors equals y.
[[gnu::always_inline]] inline uint32_t equal_bits(const __m256* v, __m256 y) {
  uint32_t bits = 0;
  for (int k = 0; k < 4; ++k) bits |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(v[k], y, _CMP_EQ_OQ))) << (8 * k);
  return bits;
}

// Bit r set where row r of the block's four vectors is NaN.
[[gnu::always_inline]] inline uint32_t nan_bits(const __m256* v) {
  uint32_t bits = 0;
  for (int k = 0; k < 4; ++k) bits |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(v[k], v[k], _CMP_UNORD_Q))) << (8 * k);
  return bits;
}

// First row in [0, n >= 1) of x holding its extreme (the first NaN row where there is one). kNoteNans:
// NaN is not looked for, *nans gets all-ones lanes where the rows hold one (the result is then
// meaningless, and the caller redoes the segment without kNoteNans).
template <bool kIsMax, bool kNoteNans = false, typename T>
[[gnu::always_inline]] inline int64_t first_extreme_row(const T* x, int64_t n, int64_t readable,
                                                       [[maybe_unused]] __m256* nans = nullptr) {
  __m256 v[4];
  uint32_t valid;
  float best = block_extreme<kIsMax>(x, n, readable, v, valid);
  int64_t best_block = 0;
  auto note = [&](const __m256* w) {  // rows past n hold the worst value, never NaN
    *nans = _mm256_or_ps(*nans, _mm256_or_ps(_mm256_cmp_ps(w[0], w[1], _CMP_UNORD_Q), _mm256_cmp_ps(w[2], w[3], _CMP_UNORD_Q)));
  };
  if constexpr (kNoteNans) {
    note(v);
  } else if (const uint32_t found = nan_bits(v) & valid; SEGOPS_UNLIKELY(found != 0)) {
    return lowest_bit(found);  // a NaN in the first 32 rows
  }
  for (int64_t b = 32; b < n; b += 32) {  // longer segments: the block holding the first extreme
    __m256 w[4];
    uint32_t w_valid;
    const float e = block_extreme<kIsMax>(x + b, n - b, readable - b, w, w_valid);
    if constexpr (kNoteNans) {
      note(w);
    } else if (const uint32_t found = nan_bits(w) & w_valid; found != 0) {
      return b + lowest_bit(found);
    }
    if (kIsMax ? e > best : e < best) best = e, best_block = b;
  }
  if (best_block != 0) block_extreme<kIsMax>(x + best_block, n - best_block, readable - best_block, v, valid);
  return best_block + lowest_bit(equal_bits(v, _mm256_set1_ps(best)) & valid);
}

// Min/max with arg of whole segments [s, s_end) of one feature: segment k's rows are the elements
// [elem_base + p[k], elem_base + p[k + 1]). emit(k, row) receives each non-empty segment's arg row
// (relative to p[k]); emit_empty(k) each empty one. NaN is only noted on the way (two comparisons per
// 32 rows instead of a test and a branch per segment); if any was seen, the segments are all done
// again with the NaN rule (emit overwrites).
template <bool kIsMax, class Load, class Emit, class EmitEmpty>
inline void arg_extrema_segments_f1(const Load& load, const int64_t* p, int64_t s, int64_t s_end, int64_t elem_base,
                                    const Emit& emit, const EmitEmpty& emit_empty) {
  __m256 nans = _mm256_setzero_ps();
  auto run = [&](auto note_nans) {
    for (int64_t k = s; k < s_end; ++k) {
      const int64_t e = elem_base + p[k], n = p[k + 1] - p[k];
      if (n == 0) {
        emit_empty(k);
        continue;
      }
      emit(k, first_extreme_row<kIsMax, decltype(note_nans)::value>(load.x + e, n, load.n - e, &nans));
    }
  };
  run(std::true_type{});
  if (SEGOPS_UNLIKELY(_mm256_movemask_ps(nans) != 0)) run(std::false_type{});
}
#endif

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
