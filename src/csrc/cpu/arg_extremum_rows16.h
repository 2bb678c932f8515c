// Min/max with arg of float features in whole rows: 16, 32 or 64 features (NV = 2, 4, 8 vectors) walked
// row by row over rows [0, count <= kMaxRows16), with the rows as int16 lanes: one comparison mask per
// pair of value vectors narrows into one vector of row numbers, so values and rows of 64 features take
// 12 of the 16 AVX2 registers (at 64 the row vectors still spill: a load and a store per row each).
// Blocks of 32 features walked each piece twice, half a row at a time; that access pattern, not the
// instruction count, kept max well behind sum (docs/design.md). The comparison is strict, so a NaN is
// never taken: NaNs are only noted, and a block that holds one returns false without writing st, for
// the exact loop of extremum_piece_lanes. Needs the vector extensions (SEGOPS_VECTOR_EXT).
#pragma once

#include <cstdint>

#include "cpu/array_loads.h"
#include "cpu/extremum_reducers.h"

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

constexpr int64_t kMaxRows16 = 32767;  // the rows an int16 lane numbers

#if SEGOPS_VECTOR_EXT
SEGOPS_VECTOR_TYPE(RowLanes16, int16_t, 32);
SEGOPS_VECTOR_TYPE(MaskLanes32, int32_t, 32);

// The masks of two vectors of 8 floats as one of 16 int16 lanes: lanes [0, 4) and [8, 12) from a,
// [4, 8) and [12, 16) from b (the order of AVX2's 128-bit-lane pack; row_lane names it). Vectors by
// reference, as in load_lanes.
[[gnu::always_inline]] inline void narrow_masks(const MaskLanes32& a, const MaskLanes32& b, RowLanes16& to) {
#if defined(__AVX2__)
  to = reinterpret_cast<RowLanes16>(_mm256_packs_epi32(reinterpret_cast<__m256i>(a), reinterpret_cast<__m256i>(b)));
#else
  for (int l = 0; l < 4; ++l) {  // the pack's order (no __builtin_shufflevector: GCC >= 12 only)
    to[l] = static_cast<int16_t>(a[l]), to[l + 4] = static_cast<int16_t>(b[l]);
    to[l + 8] = static_cast<int16_t>(a[l + 4]), to[l + 12] = static_cast<int16_t>(b[l + 4]);
  }
#endif
}
// idx's lanes where took is set become row's.
[[gnu::always_inline]] inline void take_rows(const RowLanes16& took, const RowLanes16& row, RowLanes16& idx) {
#if defined(__AVX2__)
  idx = reinterpret_cast<RowLanes16>(_mm256_blendv_epi8(reinterpret_cast<__m256i>(idx), reinterpret_cast<__m256i>(row),
                                                        reinterpret_cast<__m256i>(took)));
#else
  idx = took ? row : idx;
#endif
}
// nan's lanes where a or b is NaN become all ones.
template <class V>
[[gnu::always_inline]] inline void note_nans(const V& a, const V& b, MaskLanes32& nan) {
#if defined(__AVX2__)
  nan |= reinterpret_cast<MaskLanes32>(_mm256_cmp_ps(reinterpret_cast<__m256>(a), reinterpret_cast<__m256>(b), _CMP_UNORD_Q));
#else
  nan |= (a != a) | (b != b);
#endif
}
// The int16 lane of narrow_masks(a, b) holding lane l of a (h = 0) or b (h = 1).
constexpr int row_lane(int h, int l) { return (l < 4 ? l : l + 4) + 4 * h; }

template <class Op, int NV, class Load>
[[gnu::always_inline]] inline bool arg_extremum_rows16(typename Op::State* st, const Load& load, int64_t elem0,
                                                       int64_t F, int64_t pos0, int64_t count) {
  using L = Lanes<float>;
  constexpr bool kIsMax = ArgExtremumF32<Op>::kIsMax;
  static_assert(NV % 2 == 0 && NV <= 8, "pairs of vectors, at most 64 features");
  typename L::V m[NV];
  RowLanes16 idx[NV / 2];
  for (int v = 0; v < NV; ++v) load_lanes<L>(load, elem0 + v * L::kN, m[v]);
  for (int j = 0; j < NV / 2; ++j) idx[j] = RowLanes16{};
  MaskLanes32 nan{};
  RowLanes16 row{};
  for (int64_t r = 1; r < count; ++r) {
    row += 1;
    const int64_t e = elem0 + r * F;
#pragma GCC unroll 4
    for (int j = 0; j < NV / 2; ++j) {  // unrolled, so that m and idx stay in registers
      typename L::V x0, x1;
      load_lanes<L>(load, e + 2 * j * L::kN, x0);
      load_lanes<L>(load, e + (2 * j + 1) * L::kN, x1);
      const MaskLanes32 t0 = kIsMax ? x0 > m[2 * j] : x0 < m[2 * j];
      const MaskLanes32 t1 = kIsMax ? x1 > m[2 * j + 1] : x1 < m[2 * j + 1];
      m[2 * j] = t0 ? x0 : m[2 * j];
      m[2 * j + 1] = t1 ? x1 : m[2 * j + 1];
      RowLanes16 took;
      narrow_masks(t0, t1, took);
      take_rows(took, row, idx[j]);
      note_nans(x0, x1, nan);
    }
  }
  for (int v = 0; v < NV; ++v) nan |= m[v] != m[v];  // the first row's NaNs (never replaced)
  bool seen = false;
  for (int l = 0; l < L::kN; ++l) seen |= nan[l] != 0;
  if (seen) return false;
  for (int v = 0; v < NV; ++v) {
    for (int l = 0; l < L::kN; ++l) st[v * L::kN + l] = {m[v][l], pos0 + idx[v / 2][row_lane(v % 2, l)]};
  }
  return true;
}
#endif

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
