// Min/max with arg of many short segments of one feature (F == 1: a segment is a run of consecutive
// elements), the case where the generic piece (a scalar pass for the value, a second one for the
// first row holding it, two mispredicted loop exits per segment) ran at 1/8 of `src.amax(0)`'s speed.
//
// A segment's rows are read kRows at a time into float vectors (rows past its end replaced by -inf for max,
// +inf for min, so they never win); kRows is 32 (the target's full vectors: two on AVX-512, four on AVX2,
// eight on SSE2/NEON), or 16 or 8 (vectors of at most 8 lanes) where every segment of the chunk is that
// short (float src): one pass over the chunk's offsets, stopped by the first segment past 16 rows, picks it
// (benchmarks/results/2026-11-29-short-segments-f1.md).
// The block's extreme is a horizontal max/min, and the first row holding it is the lowest set bit of the
// vectors' equality masks (on NEON the least row number of the set lanes). No branch depends on a
// segment's length up to kRows rows. NaN: the first NaN row wins
// (ArgExtremumOp's rule), found the same way, behind a branch that only inputs with NaN take. The value
// written is the element at the arg row, so it is exactly what the generic path writes (the first of
// equal values, -0.0 and 0.0 included), whatever the vector width.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "cpu/extremum_reducers.h"
#include "cpu/simd.h"
#include "platform.h"

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

// Whether arg_extrema_segments_f1 serves Op over this load: min/max with arg of float, bfloat16 or float16.
template <class Op, class Load>
constexpr bool kArgExtremaSegmentsF1 = ArgExtremumF32<Op>::value && kFloatArray<Load>;

// A block of kRows rows (8, 16 or 32) in kVecs<kRows> float vectors of kRowL<kRows> lanes: the target's full
// vectors for 32 rows, at most 8 lanes for 8 and 16 (in the avx512 object 256 bits: segments of 4 rows took
// 1.3x the time in 16-lane blocks).
template <int kRows> using DRow = std::conditional_t<kRows == 32, hn::ScalableTag<float>, hn::CappedTag<float, 8>>;
template <int kRows> constexpr int kRowL = static_cast<int>(hn::MaxLanes(DRow<kRows>()));
template <int kRows> constexpr int kVecs = kRows / kRowL<kRows>;
template <int kRows> using RowMask = hn::Mask<DRow<kRows>>;

// One block of up to kRows rows of a segment: rows [0, n) of x (n >= 1), `readable` elements from x on in
// the array. Returns the block's extreme (meaningless if a row is NaN) and sets the vectors (rows past n
// replaced by the worst value). kNoteNans where the extremes keep NaN (kNanKeepingExtremes): *nans gets
// the lanes of the block's extreme vector that are NaN, one test for the block.
template <int kRows, bool kIsMax, bool kNoteNans = false, typename T>
HWY_INLINE float block_extreme(const T* x, int64_t n, int64_t readable, hn::Vec<DRow<kRows>>* v,
                               [[maybe_unused]] RowMask<kRows>* nans = nullptr) {
  const DRow<kRows> d;
  const hn::RebindToSigned<DRow<kRows>> di;
  const T* from = x;
  constexpr int kRowV = kVecs<kRows>, kL = kRowL<kRows>;
  static_assert(kRowV >= 1 && kRowV * kL == kRows, "a block is whole vectors");
  T pad[kRows];
  if (readable < kRows) {  // near the array's end: read a zero-padded copy, never past the array
    for (int k = 0; k < kRows; ++k) pad[k] = k < readable ? x[k] : T(0);
    from = pad;
  }
  const float worst = kIsMax ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  const auto fill = hn::Set(d, worst);
  const auto left = hn::Set(di, static_cast<int32_t>(n < kRows ? n : kRows));
  for (int j = 0; j < kRowV; ++j) {
    const auto valid = hn::RebindMask(d, hn::Lt(hn::Iota(di, j * kL), left));
    v[j] = hn::IfThenElse(valid, load_f32(d, from + j * kL), fill);
  }
  auto m = v[0];
  for (int j = 1; j < kRowV; ++j) m = extreme_of<kIsMax>(d, m, v[j]);
  if constexpr (kNoteNans && kNanKeepingExtremes) *nans = hn::Or(*nans, hn::IsNaN(m));
  return hn::GetLane(kIsMax ? hn::MaxOfLanes(d, m) : hn::MinOfLanes(d, m));
}

// The first row of the block's vectors whose mask is set, or -1. On NEON the least row number of the set
// lanes (selects, mins, one umin across lanes) costs less than the masks' bits.
template <int kRows>
HWY_INLINE int64_t first_row(const RowMask<kRows>* m) {
  constexpr int kRowV = kVecs<kRows>, kL = kRowL<kRows>;
#if SEGOPS_A64_NEON
  const hn::RebindToUnsigned<DRow<kRows>> du;
  const auto none = hn::Set(du, static_cast<uint32_t>(kRows));
  auto row = hn::IfThenElse(hn::RebindMask(du, m[0]), hn::Iota(du, 0), none);
  for (int j = 1; j < kRowV; ++j) {
    row = hn::Min(row, hn::IfThenElse(hn::RebindMask(du, m[j]), hn::Iota(du, j * kL), none));
  }
  const uint32_t r = hn::GetLane(hn::MinOfLanes(du, row));
  return r < kRows ? static_cast<int64_t>(r) : -1;
#else
  const DRow<kRows> d;
  uint32_t bits = 0;
  for (int j = 0; j < kRowV; ++j) bits |= static_cast<uint32_t>(mask_bits(d, m[j])) << (j * kL);
  return bits != 0 ? lowest_bit(bits) : -1;
#endif
}

// First row in [0, n >= 1) of x holding its extreme (the first NaN row where there is one). kNoteNans:
// NaN is not looked for, *nans gets the lanes that saw one (the result is then meaningless but in
// [0, n), and the caller redoes the segment without kNoteNans).
template <int kRows, bool kIsMax, bool kNoteNans = false, typename T>
HWY_INLINE int64_t first_extreme_row(const T* x, int64_t n, int64_t readable,
                                     [[maybe_unused]] RowMask<kRows>* nans) {
  using V = hn::Vec<DRow<kRows>>;
  const DRow<kRows> d;
  constexpr int kRowV = kVecs<kRows>;
  V v[kRowV];
  float best = block_extreme<kRows, kIsMax, kNoteNans>(x, n, readable, v, nans);
  int64_t best_block = 0;
  auto note = [&](const V* w) {  // rows past n hold the worst value, never NaN
    if constexpr (!kNanKeepingExtremes) {
      for (int j = 0; j + 1 < kRowV; j += 2) *nans = hn::Or(*nans, unordered(d, w[j], w[j + 1]));
      if constexpr (kRowV % 2 == 1) *nans = hn::Or(*nans, hn::IsNaN(w[kRowV - 1]));
    }
  };
  auto nan_row = [&](const V* w) {
    RowMask<kRows> m[kRowV];
    for (int j = 0; j < kRowV; ++j) m[j] = hn::IsNaN(w[j]);
    return first_row<kRows>(m);
  };
  if constexpr (kNoteNans) {
    note(v);
  } else if (const int64_t r = nan_row(v); SEGOPS_UNLIKELY(r >= 0)) {
    return r;  // a NaN in the first block (rows past n are never NaN)
  }
  for (int64_t b = kRows; b < n; b += kRows) {  // longer segments: the block holding the first extreme
    V w[kRowV];
    const float e = block_extreme<kRows, kIsMax, kNoteNans>(x + b, n - b, readable - b, w, nans);
    if constexpr (kNoteNans) {
      note(w);
    } else if (const int64_t r = nan_row(w); r >= 0) {
      return b + r;
    }
    if (kIsMax ? e > best : e < best) best = e, best_block = b;
  }
  if (best_block != 0) block_extreme<kRows, kIsMax>(x + best_block, n - best_block, readable - best_block, v);
  RowMask<kRows> eq[kRowV];
  const auto y = hn::Set(d, best);
  for (int j = 0; j < kRowV; ++j) eq[j] = hn::Eq(v[j], y);
  const int64_t r = first_row<kRows>(eq);  // rows past n hold the worst value, after every row that can equal it
  return r >= 0 && best_block + r < n ? best_block + r : 0;
}

// One pass of arg_extrema_segments_f1 over its segments; returns the NaN lanes noted (kNoteNans). A function of
// its own (inlined, both passes in one body, GCC's x86 code was 8-12% slower), taking the emit closures by value,
// which capture copies (chunk_reduce.h): clang's NEON loop, as a lambda capturing by reference, read every
// captured pointer back from memory per segment.
template <int kRows, bool kIsMax, bool kNoteNans, class Load, class Emit, class EmitEmpty>
[[gnu::noinline]] RowMask<kRows> segments_f1_pass(const Load& load, const int64_t* p, int64_t s, int64_t s_end,
                                                  int64_t elem_base, Emit emit, EmitEmpty emit_empty) {
  const DRow<kRows> d;
  RowMask<kRows> nans = hn::FirstN(d, 0);
  const auto* const x = load.x;
  const int64_t size = load.n;
  for (int64_t k = s; k < s_end; ++k) {
    const int64_t e = elem_base + p[k], n = p[k + 1] - p[k];
    if (n == 0) {
      emit_empty(k);
      continue;
    }
    emit(k, first_extreme_row<kRows, kIsMax, kNoteNans>(x + e, n, size - e, &nans));
  }
  return nans;
}

// Min/max with arg of whole segments [s, s_end) of one feature: segment k's rows are the elements
// [elem_base + p[k], elem_base + p[k + 1]). emit(k, row) receives each non-empty segment's arg row
// (relative to p[k]); emit_empty(k) each empty one. NaN is only noted on the way (a comparison per two
// vectors, or per block where the extremes keep NaN, instead of a test and a branch per segment); if any
// was seen, the segments are all done again with the NaN rule (emit overwrites). Blocks of 8 or 16 rows
// where the longest segment of [s, s_end) fits (float), else 32.
template <bool kIsMax, class Load, class Emit, class EmitEmpty>
inline void arg_extrema_segments_f1(const Load& load, const int64_t* p, int64_t s, int64_t s_end, int64_t elem_base,
                                    const Emit& emit, const EmitEmpty& emit_empty) {
  auto run = [&](auto rows) {
    constexpr int kRows = decltype(rows)::value;
    const auto nans = segments_f1_pass<kRows, kIsMax, true>(load, p, s, s_end, elem_base, emit, emit_empty);
    if (SEGOPS_UNLIKELY(!hn::AllFalse(DRow<kRows>(), nans))) {
      segments_f1_pass<kRows, kIsMax, false>(load, p, s, s_end, elem_base, emit, emit_empty);
    }
  };
  // float only: bfloat16 and float16 keep 32-row blocks (their 8- and 16-row passes were 2/3 of the 250 KB of
  // code the short blocks added to the library, and took the cuda package past its 5 MiB bound)
  if constexpr (std::is_same_v<typename is_array_load<Load>::type, float>) {
    int64_t longest = 0;  // by runs of 64 segments (a vector loop), up to the first run with one past 16 rows
    for (int64_t k = s; k < s_end && longest <= 16; k += 64) {
      const int64_t e = std::min(s_end, k + 64);
      for (int64_t j = k; j < e; ++j) longest = std::max(longest, p[j + 1] - p[j]);
    }
    if (longest <= 8) return run(std::integral_constant<int, 8>{});
    if (longest <= 16) return run(std::integral_constant<int, 16>{});
  }
  run(std::integral_constant<int, 32>{});
}

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
