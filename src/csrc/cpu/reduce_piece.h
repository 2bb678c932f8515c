// Reduction of one piece of a segment (rows [0, count) of a chunk) over fn features, into per-feature
// reducer states: reduce_piece picks the kernel for the reducer.
//   one_pass_piece.h: reducers whose step vectorises. Features are the innermost loop, over the state
//   array itself (it stays in L1), which the compiler vectorises, selects included; with one or two
//   features, rows go round-robin to independent register lanes instead. A float sum of one feature runs
//   float_sum_lanes.h inline instead (reduce_piece_one_pass, here).
//   extremum_piece.h: min/max with arg over several features (explicit vectors of values and row numbers;
//   float features in whole-row blocks of up to 64 with int16 row numbers: arg_extremum_rows16.h).
//   Here, two passes: min/max with arg over one feature, the extreme value, then the first row that holds
//   it; logsumexp, the max (over several features, by the vector loop of min/max), then the sum of
//   exp(x - max) (exp_pass, in exp_lanes.h's vectors), over a piece small enough to stay in cache (a chunk
//   holds at most kChunkElems elements).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cpu/array_loads.h"
#include "cpu/extremum_piece.h"
#include "cpu/exp_lanes.h"
#include "cpu/extremum_reducers.h"
#include "cpu/feature_blocks.h"
#include "cpu/float_sum_lanes.h"
#include "cpu/one_pass_piece.h"
#include "reduction_policies.h"
#include "vec_math.h"

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

// The one-pass entry point: inlined into the segment loop, so that a float sum over one feature (many
// short segments: the call would cost as much as the sum) runs there; everything else is a call.
template <class Op, class Load>
[[gnu::always_inline]] inline void reduce_piece_one_pass(typename Op::State* st, const Load& load, int64_t elem0,
                                                         int64_t F, int64_t fn, int64_t pos0, int64_t count) {
  if constexpr (kFloatArray<Load> && kAddsFloats<Op>) {
    if (F == 1) {
      st[0].v = sum_f1(load.x + elem0, count, load.n - elem0);
      return;
    }
  }
  reduce_piece_general<Op>(st, load, elem0, F, fn, pos0, count);
}

// exp(x - m) of lanes where x <= m, N vectors in place; kFiniteMax: no lane of m is +-inf, else x == m counts 1
// (x - m is NaN there).
template <bool kFiniteMax, int N, class D, class V> HWY_INLINE void exp_terms(D d, V (&x)[N], const V (&m)[N]) {
  V e[N];
  for (int i = 0; i < N; ++i) e[i] = hn::Sub(x[i], m[i]);
  exp_nonpos_lanes(d, e);
  for (int i = 0; i < N; ++i) {
    if constexpr (kFiniteMax) {
      x[i] = e[i];
    } else {
      x[i] = hn::IfThenElse(hn::Eq(x[i], m[i]), hn::Set(d, 1.f), e[i]);
    }
  }
}

// logsumexp's second pass: st[f] = {max, sum of exp(x - max)} over rows [0, count >= 1), given the max per
// feature (ext); x == max counts 1 exactly (exp(0) is 1: the vector loops test x == max only where a max in
// the vector is +-inf, where x - max is NaN). Each feature's terms are added
// in row order from 0: float inputs in vectors over features, and with one feature, the exps of a vector
// of rows at a time added one by one (exp_nonpos_lanes: exp_approx's bits for x - max <= 0).
template <typename A, class State, class Ext, class Load>
[[gnu::noinline]] void exp_pass(State* st, const Ext* ext, const Load& load, int64_t elem0, int64_t F, int64_t fn,
                                int64_t count) {
  constexpr bool kVector = std::is_same_v<A, float> && kFloatArray<Load> && kF32Lanes >= 4;
  if constexpr (kVector) {
    if (fn == 1 && F == 1) {
      const hn::ScalableTag<float> d;
      const float m = ext[0].v;
      const hn::Vec<decltype(d)> mv[1] = {hn::Set(d, m)};
      float sum = 0.f;
      int64_t r = 0;
      HWY_ALIGN float terms[kF32Lanes];
      auto rows = [&](auto finite) {
        for (; r + kF32Lanes <= count; r += kF32Lanes) {
          hn::Vec<decltype(d)> t[1] = {load_acc(d, load, elem0 + r)};
          exp_terms<decltype(finite)::value>(d, t, mv);
          hn::Store(t[0], d, terms);
          for (int l = 0; l < kF32Lanes; ++l) sum += terms[l];
        }
      };
      if (std::isinf(m)) {
        rows(std::false_type{});
      } else {
        rows(std::true_type{});
      }
      for (; r < count; ++r) {
        const float x = load(elem0 + r);
        sum += x == m ? 1.f : exp_approx(x - m);
      }
      st[0] = {m, sum};
      return;
    }
  }
  for_feature_blocks<kVector ? 4 * kF32Lanes : kBlockOf<A, 128>>(fn, [&](auto B, int64_t f0) {
    constexpr int kBL = B < kF32Lanes ? B : kF32Lanes;
    if constexpr (kVector && kBL >= 4) {
      using D = hn::CappedTag<float, kBL>;
      const D d;
      constexpr int NV = B / kBL;
      hn::Vec<D> m[NV], sum[NV];
      HWY_ALIGN float buf[B];
      for (int f = 0; f < B; ++f) buf[f] = ext[f0 + f].v;
      for (int v = 0; v < NV; ++v) m[v] = hn::Load(d, buf + v * kBL), sum[v] = hn::Zero(d);
      bool finite_max = true;
      for (int v = 0; v < NV; ++v) finite_max = finite_max && hn::AllFalse(d, hn::IsInf(m[v]));
      auto rows = [&](auto finite) {
        for (int64_t r = 0; r < count; ++r) {
          const int64_t e = elem0 + r * F + f0;
          hn::Vec<D> t[NV];
          for (int v = 0; v < NV; ++v) t[v] = load_acc(d, load, e + v * kBL);
          exp_terms<decltype(finite)::value>(d, t, m);
          for (int v = 0; v < NV; ++v) sum[v] = hn::Add(sum[v], t[v]);
        }
      };
      if (finite_max) {
        rows(std::true_type{});
      } else {
        rows(std::false_type{});
      }
      for (int v = 0; v < NV; ++v) hn::Store(sum[v], d, buf + v * kBL);
      for (int f = 0; f < B; ++f) st[f0 + f] = {ext[f0 + f].v, buf[f]};
    } else {
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
    }
  });
}

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
    } else {
      exp_pass<A>(st, ext, load, elem0, F, fn, count);
    }
  }
}

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
