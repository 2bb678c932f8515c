// The min/max reducers as the CPU's extremum kernels see them: ExtremeValueOp, a CPU-only reducer of the
// value alone (the first pass of reduce_piece.h's two-pass reductions; no finalize, no arg: not one of
// the reduction policies of reduction_policies.h that both backends run), and which reducers each extremum kernel
// serves (Extremum: extremum_piece.h; ArgExtremumF32: arg_extremum_rows16.h, segment_extrema.h).
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "reduction_policies.h"
#include "vec_math.h"

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

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

// Min/max with arg accumulating in float (float, bfloat16 and float16 inputs): the reducers of the vector
// paths of arg_extremum_rows16.h and segment_extrema.h.
template <class Op> struct ArgExtremumF32 : std::false_type {};
template <bool M> struct ArgExtremumF32<ArgExtremumOp<float, M>> : std::true_type {
  static constexpr bool kIsMax = M;
};

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
