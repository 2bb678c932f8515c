// Reduction of one piece of a segment (rows [0, count) of a chunk) over fn features, into per-feature
// reducer states. Features are the innermost loop, over the state array itself (it stays in L1), which
// the compiler vectorises, selects included; with one or two features, rows go round-robin to
// independent register lanes instead.
//
// Reducers whose step does not vectorise as written get their own loops:
//   min/max with arg over several features: one pass with explicit vectors of values and row numbers
//   (the auto-vectoriser left blocks of fewer than 32 float features scalar); float features in
//   whole-row blocks of up to 64 with int16 row numbers (arg_extremum_rows16);
//   min/max with arg over one feature: the extreme value, then the first row that holds it;
//   logsumexp: two passes over the piece, which is small enough to stay in cache (a chunk holds at most
//   kChunkElems elements): the max (over several features, by the vector loop of min/max), then the
//   sum of exp(x - max).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "reduction_policies.h"
#include "vec_math.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

// Folds rows [0, count) into st[0, FB). Row r's features start at elem0 + r * F; its absolute position
// along dim is pos0 + r. K lanes take rows round-robin (K * FB accumulators on the stack).
// kStride > 0 fixes the row stride at compile time.
template <class Op, int K, int FB, int kStride = 0, class Load>
inline void reduce_block(typename Op::State* st, const Load& load, int64_t elem0, int64_t F_rt, int64_t pos0,
                         int64_t count) {
  const int64_t F = kStride > 0 ? kStride : F_rt;
  typename Op::State acc[K * FB];
  for (int i = 0; i < K * FB; ++i) acc[i] = Op::identity();
  int64_t r = 0;
  for (; r + K <= count; r += K) {
    for (int k = 0; k < K; ++k) {
      const int64_t e = elem0 + (r + k) * F;
      for (int f = 0; f < FB; ++f) Op::step(acc[k * FB + f], load(e + f), pos0 + r + k);
    }
  }
  for (; r < count; ++r) {
    for (int f = 0; f < FB; ++f) Op::step(acc[f], load(elem0 + r * F + f), pos0 + r);
  }
  for (int f = 0; f < FB; ++f) {
    st[f] = acc[f];
    for (int k = 1; k < K; ++k) Op::merge(st[f], acc[k * FB + f]);
  }
}

// Reads element i of a contiguous array of n elements (as the accumulation type). Kernels that know
// their input is such an array pass this instead of a lambda, which lets a piece use whole-vector loads.
template <typename T> struct ArrayLoad {
  const T* x;
  int64_t n;
  SEGOPS_HD acc_t<T> operator()(int64_t i) const { return to_acc<acc_t<T>>(x[i]); }
};
template <typename L> struct is_array_load : std::false_type {};
template <typename T> struct is_array_load<ArrayLoad<T>> : std::true_type { using type = T; };

#if defined(__AVX2__)
// Eight elements from x as floats.
inline __m256 load8_f32(const float* x) { return _mm256_loadu_ps(x); }
inline __m256 load8_f32(const torch::headeronly::BFloat16* x) {  // bfloat16 is a float's upper half
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 load8_f32(const torch::headeronly::Half* x) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}
template <typename T>
constexpr bool kSumsInAvx2 = std::is_same_v<T, float> || std::is_same_v<T, torch::headeronly::BFloat16> ||
                             std::is_same_v<T, torch::headeronly::Half>;

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

// Calls body(std::integral_constant<int, B>{}, f) for feature blocks [f, f + B) that cover [0, fn):
// B = FB while a whole block fits, then FB / 2, ..., 1. A body keeps a block's per-feature values in
// registers for a whole piece (arrays in memory would make every row wait on the previous row's
// store). Every feature still sees its rows in order, so the block sizes never change a result.
template <int FB, class Body>
inline void for_feature_blocks(int64_t fn, const Body& body, int64_t f = 0) {
  for (; f + FB <= fn; f += FB) body(std::integral_constant<int, FB>{}, f);
  if constexpr (FB > 1) {
    if (f < fn) for_feature_blocks<FB / 2>(fn, body, f);
  }
}

// Features per block: `bytes` of per-feature values in registers (256: eight AVX2 registers).
template <typename V, int bytes> constexpr int kBlockOf = sizeof(V) <= bytes ? bytes / sizeof(V) : 1;

// One-pass reduction of a piece, for reducers whose step vectorises: the general case, out of line.
template <class Op, class Load>
[[gnu::noinline]] void reduce_piece_general(typename Op::State* st, const Load& load, int64_t elem0, int64_t F,
                                            int64_t fn, int64_t pos0, int64_t count) {
  // Short segments skip the lanes: their set-up and merge would cost more than the parallel chains
  // gain. The choice depends on the data only, never on the thread count.
  if (F == 1) {
    return count < 32 ? reduce_block<Op, 1, 1, 1>(st, load, elem0, F, pos0, count)
                      : reduce_block<Op, 8, 1, 1>(st, load, elem0, F, pos0, count);
  }
  if (F == 2) {
    return count < 16 ? reduce_block<Op, 1, 2, 2>(st, load, elem0, F, pos0, count)
                      : reduce_block<Op, 4, 2, 2>(st, load, elem0, F, pos0, count);
  }
  if (fn == 1) return reduce_block<Op, 8, 1>(st, load, elem0, F, pos0, count);
  if (fn == 2) return reduce_block<Op, 4, 2>(st, load, elem0, F, pos0, count);
  for_feature_blocks<kBlockOf<typename Op::State, 256>>(fn, [&](auto B, int64_t f) {
    reduce_block<Op, 1, B>(st + f, load, elem0 + f, F, pos0, count);
  });
}

// The one-pass entry point: inlined into the segment loop, so that a float sum over one feature (many
// short segments: the call would cost as much as the sum) runs there; everything else is a call.
template <class Op, class Load>
[[gnu::always_inline]] inline void reduce_piece_one_pass(typename Op::State* st, const Load& load, int64_t elem0,
                                                         int64_t F, int64_t fn, int64_t pos0, int64_t count) {
#if defined(__AVX2__)
  if constexpr (is_array_load<Load>::value && kAddsFloats<Op>) {
    if constexpr (kSumsInAvx2<typename is_array_load<Load>::type>) {
      if (F == 1) {
        st[0].v = sum_avx2(load.x + elem0, count, load.n - elem0);
        return;
      }
    }
  }
#endif
  reduce_piece_general<Op>(st, load, elem0, F, fn, pos0, count);
}

// The extreme value alone (no position): a select that vectorises. NaN wins and stays.
template <typename A, bool kIsMax> struct ExtremeValueOp {
  struct State { A v; };
  static State identity() {
    if constexpr (std::is_floating_point_v<A>) {
      return {kIsMax ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity()};
    } else {
      return {kIsMax ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max()};
    }
  }
  SEGOPS_HD static void step(State& s, A x, int64_t) {
    const bool take = (kIsMax ? x > s.v : x < s.v) | is_nan(x);
    s.v = take ? x : s.v;
  }
  SEGOPS_HD static void merge(State& a, const State& b) { step(a, b.v, 0); }
};

template <class Op> struct TwoPass { static constexpr int kind = 0; };
template <typename T, bool kIsMax> struct TwoPass<ArgExtremumOp<T, kIsMax>> {
  static constexpr int kind = 1;
  using A = T;
  using ValueOp = ExtremeValueOp<T, kIsMax>;
};
template <typename T> struct TwoPass<LogSumExpOp<T>> {
  static constexpr int kind = 2;
  using A = T;
  using ValueOp = ExtremeValueOp<T, true>;
};
template <class Op> struct TwoPass<StateResult<Op>> : TwoPass<Op> {};

constexpr int64_t kMaxPieceFeatures = 256;  // fn <= this (the feature tile of a work unit)

// 32 bytes of A as a GCC/Clang vector (the instruction set's vectors: one AVX2 register, two SSE2 ones),
// and row numbers as wide as A, so that one comparison mask selects both. Rows of a piece fit in
// int32 (a chunk has at most kChunkElems of them).
template <typename T> struct Lanes {
  using A = T;
  static constexpr int kN = 32 / sizeof(A);
  using Pos = std::conditional_t<sizeof(A) <= 4, int32_t, int64_t>;
#if SEGOPS_VECTOR_EXT
  SEGOPS_VECTOR_TYPE(V, A, 32);
  SEGOPS_VECTOR_TYPE(P, Pos, 32);
#endif
};

// v = elements [e, e + kN) as A: one unaligned load where the input already holds A. (An out parameter:
// a 32-byte vector returned by value is an ABI note in the baseline set.)
template <class L, class Load>
[[gnu::always_inline]] inline void load_lanes(const Load& load, int64_t e, typename L::V& v) {
  if constexpr (is_array_load<Load>::value) {
    if constexpr (std::is_same_v<typename is_array_load<Load>::type, typename L::A>) {
      std::memcpy(&v, load.x + e, sizeof v);
      return;
    }
  }
  typename L::A a[L::kN];
  for (int l = 0; l < L::kN; ++l) a[l] = load(e + l);
  std::memcpy(&v, a, sizeof v);
}

// The reducers extremum_piece serves: min/max with the first row holding it, or the value alone.
template <class Op> struct Extremum;
template <typename T, bool M> struct Extremum<ArgExtremumOp<T, M>> {
  using A = T;
  static constexpr bool kIsMax = M, kRows = true;
};
template <typename T, bool M> struct Extremum<ExtremeValueOp<T, M>> {
  using A = T;
  static constexpr bool kIsMax = M, kRows = false;
};

// Min or max over rows [0, count >= 1) of fn features, in one pass, as Op::step folds them: with rows
// (ArgExtremumOp), a row replaces a feature's extreme when it is better, or when it is NaN and the
// extreme is not (the first NaN wins and stays); the value alone (ExtremeValueOp) takes any NaN. Blocks
// of whole vectors run on Lanes (the auto-vectoriser left blocks of 16 or 8 float features scalar);
// fewer features than a vector holds run as scalars (without rows: reduce_block).
// known_nan: the caller saw a NaN in these rows (the exact loop at once).
template <class Op, class Load>
inline void extremum_piece_lanes(typename Op::State* st, const Load& load, int64_t elem0, int64_t F, int64_t fn,
                                 int64_t pos0, int64_t count, [[maybe_unused]] bool known_nan = false) {
  using E = Extremum<Op>;
  using A = typename E::A;
  using L = Lanes<A>;
  using Pos = typename L::Pos;
  // 4 vectors per block: values and rows in 8 of the 16 AVX2 registers (8 vectors of values alone spill)
  for_feature_blocks<4 * L::kN>(fn, [&](auto B, int64_t f0) {
    if constexpr (SEGOPS_VECTOR_EXT && B >= L::kN) {
#if SEGOPS_VECTOR_EXT
      constexpr int NV = B / L::kN;
      typename L::V m[NV];
      [[maybe_unused]] typename L::P idx[NV];  // rows: kRows only
      auto first_row = [&] {
        for (int v = 0; v < NV; ++v) {
          load_lanes<L>(load, elem0 + f0 + v * L::kN, m[v]);
          if constexpr (E::kRows) idx[v] = typename L::P{};
        }
      };
      first_row();
      // With rows, a first pass assumes no NaN: a strict comparison selects value and row, and NaNs are
      // only noted (two operations per vector and row fewer than the NaN rule; measured 1.5x faster at
      // F=64); a piece that holds a NaN is redone by the exact loop below.
      bool exact = !E::kRows || known_nan;
      if constexpr (E::kRows) {
        if (!exact) {
          typename L::V nan{};
          for (int64_t r = 1; r < count; ++r) {
            const typename L::P row = typename L::P{} + static_cast<Pos>(r);
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) {
              typename L::V x;
              load_lanes<L>(load, elem0 + r * F + f0 + v * L::kN, x);
              const auto take = E::kIsMax ? x > m[v] : x < m[v];
              m[v] = take ? x : m[v];
              idx[v] = take ? row : idx[v];
              nan = (x != x) ? x : nan;
            }
          }
          typename L::V seen = m[0] != m[0] ? m[0] : nan;  // the first row's NaNs (never replaced)
          for (int v = 1; v < NV; ++v) seen = m[v] != m[v] ? m[v] : seen;
          for (int l = 0; l < L::kN; ++l) exact |= seen[l] != seen[l];
          if (exact) first_row();
        }
      }
      for (int64_t r = 1; exact && r < count; ++r) {
        const typename L::P row = typename L::P{} + static_cast<Pos>(r);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {  // unrolled, so that m and idx stay in registers
          typename L::V x;
          load_lanes<L>(load, elem0 + r * F + f0 + v * L::kN, x);
          const auto better_or_nan = (E::kIsMax ? x > m[v] : x < m[v]) | (x != x);
          if constexpr (E::kRows) {
            const auto take = better_or_nan & (m[v] == m[v]);
            m[v] = take ? x : m[v];
            idx[v] = take ? row : idx[v];
          } else {
            m[v] = better_or_nan ? x : m[v];
          }
        }
      }
      for (int v = 0; v < NV; ++v) {
        for (int l = 0; l < L::kN; ++l) {
          if constexpr (E::kRows) {
            st[f0 + v * L::kN + l] = {m[v][l], pos0 + idx[v][l]};
          } else {
            st[f0 + v * L::kN + l] = {m[v][l]};
          }
        }
      }
#endif
    } else if constexpr (E::kRows) {
      // ArgExtremumOp::step from the first row on, rows in Pos: reduce_block's step (int64 rows, a
      // no-row check) measured 12-18% slower for max over 2, 3, 13 and 37 features (2026-11-24).
      A m[B];
      Pos idx[B];
      for (int f = 0; f < B; ++f) m[f] = load(elem0 + f0 + f), idx[f] = 0;
      for (int64_t r = 1; r < count; ++r) {
        for (int f = 0; f < B; ++f) {
          const A x = load(elem0 + r * F + f0 + f);
          const bool take = (Op::better(x, m[f]) | is_nan(x)) & !is_nan(m[f]);
          m[f] = take ? x : m[f];
          idx[f] = take ? static_cast<Pos>(r) : idx[f];
        }
      }
      for (int f = 0; f < B; ++f) st[f0 + f] = {m[f], pos0 + idx[f]};
    } else {
      reduce_block<Op, 1, B>(st + f0, load, elem0 + f0, F, pos0, count);
    }
  });
}

// Min/max with arg of float features in whole rows: 16, 32 or 64 features (NV = 2, 4, 8 vectors) walked
// row by row over rows [0, count <= kMaxRows16), with the rows as int16 lanes: one comparison mask per
// pair of value vectors narrows into one vector of row numbers, so values and rows of 64 features take
// 12 of the 16 AVX2 registers (at 64 the row vectors still spill: a load and a store per row each).
// Blocks of 32 features walked each piece twice, half a row at a time; that access pattern, not the
// instruction count, kept max well behind sum (docs/design.md). The comparison is strict, so a NaN is
// never taken: NaNs are only noted, and a block that holds one returns false without writing st, for
// the exact loop of extremum_piece_lanes. Needs the vector extensions (SEGOPS_VECTOR_EXT).
constexpr int64_t kMaxRows16 = 32767;

// Min/max with arg accumulating in float (float, bfloat16 and float16 inputs): the reducers of the vector
// paths here and in segment_extrema.h.
template <class Op> struct ArgExtremumF32 : std::false_type {};
template <bool M> struct ArgExtremumF32<ArgExtremumOp<float, M>> : std::true_type {
  static constexpr bool kIsMax = M;
};

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

template <class Op, class Load>
[[gnu::noinline]] void extremum_piece(typename Op::State* st, const Load& load, int64_t elem0, int64_t F,
                                      int64_t fn, int64_t pos0, int64_t count) {
  if constexpr (SEGOPS_VECTOR_EXT && ArgExtremumF32<Op>::value) {
#if SEGOPS_VECTOR_EXT
    if (count <= kMaxRows16) {
      for_feature_blocks<64>(fn, [&](auto B, int64_t f0) {
        if constexpr (B >= 16) {
          if (arg_extremum_rows16<Op, B / 8>(st + f0, load, elem0 + f0, F, pos0, count)) return;
        }
        extremum_piece_lanes<Op>(st + f0, load, elem0 + f0, F, B, pos0, count, B >= 16);
      });
      return;
    }
#endif
  }
  extremum_piece_lanes<Op>(st, load, elem0, F, fn, pos0, count);
}

template <class Op, class Load>
inline void reduce_piece(typename Op::State* st, const Load& load, int64_t elem0, int64_t F, int64_t fn,
                         int64_t pos0, int64_t count) {
  using P = TwoPass<Op>;
  if constexpr (P::kind == 0) {
    reduce_piece_one_pass<Op>(st, load, elem0, F, fn, pos0, count);
  } else {
    using A = typename P::A;
    using VOp = typename P::ValueOp;
    if (count == 0) {
      for (int64_t f = 0; f < fn; ++f) st[f] = Op::identity();
      return;
    }
    if constexpr (P::kind == 1) {
      if (fn > 1) return extremum_piece<Op>(st, load, elem0, F, fn, pos0, count);
    }
    typename VOp::State ext[kMaxPieceFeatures];
    if (P::kind == 2 && fn > 1) {  // logsumexp's max
      extremum_piece<VOp>(ext, load, elem0, F, fn, pos0, count);
    } else {
      reduce_piece_one_pass<VOp>(ext, load, elem0, F, fn, pos0, count);
    }
    if constexpr (P::kind == 1) {  // one feature: the first row holding the extreme (a NaN extreme: the first NaN)
      int64_t r = 0;
      for (; r < count; ++r) {
        const A x = load(elem0 + r * F);
        if (x == ext[0].v || (is_nan(x) && is_nan(ext[0].v))) break;
      }
      st[0] = {ext[0].v, pos0 + r};
    } else {  // sum of exp(x - max); x == max counts 1 exactly, which also covers max = +-inf
      for_feature_blocks<kBlockOf<A, 128>>(fn, [&](auto B, int64_t f0) {
        A m[B], sum[B];
        for (int f = 0; f < B; ++f) m[f] = ext[f0 + f].v, sum[f] = A(0);
        for (int64_t r = 0; r < count; ++r) {
          const int64_t e = elem0 + r * F + f0;
          for (int f = 0; f < B; ++f) {
            const A x = load(e + f);
            sum[f] += x == m[f] ? A(1) : exp_approx(x - m[f]);
          }
        }
        for (int f = 0; f < B; ++f) st[f0 + f] = {m[f], sum[f]};
      });
    }
  }
}

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
