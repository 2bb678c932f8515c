// Reduction of one piece of a segment (rows [0, count) of a chunk) over fn features, into per-feature
// reducer states. Features are the innermost loop, over the state array itself (it stays in L1), which
// the compiler vectorises, selects included; with one or two features, rows go round-robin to
// independent register lanes instead.
//
// Reducers whose step does not vectorise get two passes over the piece, which is small enough to
// stay in cache (a chunk holds at most kChunkElems elements):
//   min/max with arg: the extreme value, then the first row that holds it;
//   logsumexp: the max, then the sum of exp(x - max).
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "reducers.h"
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

// Reads element i of a contiguous array (as the accumulation type). Kernels that know their input is
// such an array pass this instead of a lambda, which lets a piece use whole-vector loads.
template <typename T> struct ArrayLoad {
  const T* x;
  SEGOPS_HD acc_t<T> operator()(int64_t i) const { return to_acc<acc_t<T>>(x[i]); }
};

#if defined(__AVX2__)
// Sum of x[0, n) in 16 lanes; the last, partial step uses masked loads (no tail loop, no read past
// x[n - 1]). The order of the additions depends on n only.
inline float sum_f32_avx2(const float* x, int64_t n) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i lane8 = _mm256_add_epi32(lane, _mm256_set1_epi32(8));
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
  }
  if (i < n) {
    const __m256i left = _mm256_set1_epi32(static_cast<int>(n - i));
    a0 = _mm256_add_ps(a0, _mm256_maskload_ps(x + i, _mm256_cmpgt_epi32(left, lane)));
    a1 = _mm256_add_ps(a1, _mm256_maskload_ps(x + i + 8, _mm256_cmpgt_epi32(left, lane8)));
  }
  const __m256 a = _mm256_add_ps(a0, a1);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}
#endif

// One-pass reduction of a piece, for reducers whose step vectorises.
template <class Op, class Load>
inline void reduce_piece_one_pass(typename Op::State* st, const Load& load, int64_t elem0, int64_t F,
                                  int64_t fn, int64_t pos0, int64_t count) {
#if defined(__AVX2__)
  if constexpr (std::is_same_v<Load, ArrayLoad<float>> && std::is_same_v<typename Op::State, SumOp<float>::State>) {
    if (F == 1) {
      st[0].v = sum_f32_avx2(load.x + elem0, count);
      return;
    }
  }
#endif
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
  for (int64_t f = 0; f < fn; ++f) st[f] = Op::identity();
  for (int64_t r = 0; r < count; ++r) {
    const int64_t e = elem0 + r * F;
    for (int64_t f = 0; f < fn; ++f) Op::step(st[f], load(e + f), pos0 + r);
  }
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

constexpr int64_t kMaxPieceFeatures = 256;  // fn <= this (the feature tile of a work unit)

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
    typename VOp::State ext[kMaxPieceFeatures];
    reduce_piece_one_pass<VOp>(ext, load, elem0, F, fn, pos0, count);
    if constexpr (P::kind == 1) {  // the first row holding the extreme (a NaN extreme: the first NaN)
      if (fn == 1) {
        int64_t r = 0;
        for (; r < count; ++r) {
          const A x = load(elem0 + r * F);
          if (x == ext[0].v || (is_nan(x) && is_nan(ext[0].v))) break;
        }
        st[0] = {ext[0].v, pos0 + r};
        return;
      }
      // Rows of a piece fit in int32 (a chunk has at most kChunkElems of them): lanes as wide as a
      // float value, so the select vectorises. Rows run backwards: the last hit is the first row.
      using Pos = std::conditional_t<sizeof(A) <= 4, int32_t, int64_t>;
      Pos idx[kMaxPieceFeatures];
      for (int64_t f = 0; f < fn; ++f) idx[f] = 0;
      for (int64_t r = count - 1; r >= 0; --r) {
        const int64_t e = elem0 + r * F;
        for (int64_t f = 0; f < fn; ++f) {
          const A x = load(e + f), m = ext[f].v;
          const bool hit = (x == m) | (is_nan(x) & is_nan(m));
          idx[f] = hit ? static_cast<Pos>(r) : idx[f];
        }
      }
      for (int64_t f = 0; f < fn; ++f) st[f] = {ext[f].v, pos0 + idx[f]};
    } else {  // sum of exp(x - max); x == max counts 1 exactly, which also covers max = +-inf
      A sum[kMaxPieceFeatures];
      for (int64_t f = 0; f < fn; ++f) sum[f] = A(0);
      for (int64_t r = 0; r < count; ++r) {
        const int64_t e = elem0 + r * F;
        for (int64_t f = 0; f < fn; ++f) {
          const A x = load(e + f), m = ext[f].v;
          sum[f] += x == m ? A(1) : exp_approx(x - m);
        }
      }
      for (int64_t f = 0; f < fn; ++f) st[f] = {ext[f].v, sum[f]};
    }
  }
}

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
