// Reduction policies shared by the CPU and CUDA kernels.
//
// A reducer has a State, an identity, step (fold one value in), merge (combine two partial states,
// order-independent for ties: the smaller position wins) and finalize (count == 0 -> empty segment).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include "platform.h"

#if defined(__CUDACC__)
#define SEGOPS_HD __host__ __device__ __forceinline__
#else
#define SEGOPS_HD SEGOPS_ALWAYS_INLINE
#endif

namespace torch_segops {

// Accumulation type: float16/bfloat16 accumulate in float32, int32 in int64.
template <typename T> struct AccType { using type = T; };
template <> struct AccType<torch::headeronly::Half> { using type = float; };
template <> struct AccType<torch::headeronly::BFloat16> { using type = float; };
template <> struct AccType<int32_t> { using type = int64_t; };
template <typename T> using acc_t = typename AccType<T>::type;

template <typename A> SEGOPS_HD bool is_nan(A x) {
  if constexpr (std::is_floating_point_v<A>) {
    return x != x;
  } else {
    return false;
  }
}

template <typename A> struct SumOp {
  struct State { A v; };
  static constexpr bool kHasArg = false;
  SEGOPS_HD static State identity() { return {A(0)}; }
  SEGOPS_HD static void step(State& s, A x, int64_t) { s.v += x; }
  SEGOPS_HD static void merge(State& a, const State& b) { a.v += b.v; }
  SEGOPS_HD static A finalize(const State& s, int64_t) { return s.v; }
};

// Product; an empty segment gives the identity 1 (pytorch_scatter's scatter_mul leaves untouched outputs
// at 1). Integers multiply as unsigned: an overflow wraps (as torch's integer products do) instead of
// being undefined behaviour.
template <typename A> struct ProdOp {
  struct State { A v; };
  static constexpr bool kHasArg = false;
  SEGOPS_HD static A mul(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
  SEGOPS_HD static State identity() { return {A(1)}; }
  SEGOPS_HD static void step(State& s, A x, int64_t) { s.v = mul(s.v, x); }
  SEGOPS_HD static void merge(State& a, const State& b) { a.v = mul(a.v, b.v); }
  SEGOPS_HD static A finalize(const State& s, int64_t) { return s.v; }
};

template <typename A> struct MeanOp : SumOp<A> {
  using State = typename SumOp<A>::State;
  SEGOPS_HD static A finalize(const State& s, int64_t count) {
    return count > 0 ? s.v / static_cast<A>(count) : A(0);
  }
};

// Whether Op is the float sum, finalized as a sum or as a mean: the reducers that the CPU's float-sum fast
// paths serve (cpu/float_sum_lanes.h, cpu/segment_sums.h; they leave finalize to the caller). Exact types, not
// the state's type: a reducer derived from SumOp that folds values in another way must not be summed.
template <class Op>
constexpr bool kAddsFloats = std::is_same_v<Op, SumOp<float>> || std::is_same_v<Op, MeanOp<float>>;

// kNoArg marks a state that has seen no value; NaN propagates (the first NaN wins).
template <typename A, bool kIsMax> struct ArgExtremumOp {
  struct State { A v; int64_t arg; };
  static constexpr bool kHasArg = true;
  static constexpr int64_t kNoArg = std::numeric_limits<int64_t>::max();
  SEGOPS_HD static bool better(A x, A than) { return kIsMax ? x > than : x < than; }
  SEGOPS_HD static State identity() { return {A(0), kNoArg}; }
  SEGOPS_HD static void step(State& s, A x, int64_t pos) {
    // Branch-free selects, so the feature loop vectorises.
    const bool seen_nan = is_nan(s.v);
    const bool take = (s.arg == kNoArg) | ((better(x, s.v) | is_nan(x)) & !seen_nan);
    s.v = take ? x : s.v;
    s.arg = take ? pos : s.arg;
  }
  SEGOPS_HD static void merge(State& a, const State& b) {
    if (b.arg == kNoArg) return;
    bool take;
    if (a.arg == kNoArg) {
      take = true;
    } else if (is_nan(a.v) || is_nan(b.v)) {
      take = is_nan(b.v) && (!is_nan(a.v) || b.arg < a.arg);
    } else {
      take = better(b.v, a.v) || (b.v == a.v && b.arg < a.arg);
    }
    if (take) a = b;
  }
  SEGOPS_HD static A finalize(const State& s, int64_t count) { return count > 0 ? s.v : A(0); }
};

template <typename A> using MinOp = ArgExtremumOp<A, false>;
template <typename A> using MaxOp = ArgExtremumOp<A, true>;

// Running (max, sum of exp(x - max)); one pass, exp per element.
template <typename A> struct LogSumExpOp {
  struct State { A m; A s; };
  static constexpr bool kHasArg = false;
  SEGOPS_HD static State identity() { return {-std::numeric_limits<A>::infinity(), A(0)}; }
  SEGOPS_HD static void step(State& st, A x, int64_t) {
    if (x > st.m) {
      st.s = st.s * std::exp(st.m - x) + A(1);
      st.m = x;
    } else if (x == st.m) {
      st.s += A(1);  // also keeps (-inf, -inf) and (inf, inf) away from exp(nan)
    } else {
      st.s += std::exp(x - st.m);
    }
  }
  SEGOPS_HD static void merge(State& a, const State& b) {
    const A m = a.m > b.m ? a.m : b.m;
    if (m == -std::numeric_limits<A>::infinity()) {
      a.s += b.s;
    } else {
      // a part whose max is the max keeps its sum as it is: exp(0) = 1, and at m = +inf the rescale would be
      // exp(inf - inf) = NaN (issue #36)
      const A sa = a.s == A(0) ? A(0) : a.m == m ? a.s : a.s * std::exp(a.m - m);
      const A sb = b.s == A(0) ? A(0) : b.m == m ? b.s : b.s * std::exp(b.m - m);
      a.s = sa + sb;
      a.m = m;
    }
  }
  SEGOPS_HD static A finalize(const State& st, int64_t count) {
    return count > 0 ? st.m + std::log(st.s) : A(0);
  }
};

// Op with its state as the result: softmax keeps logsumexp's running max and sum of exp(x - max) apart
// (softmax = exp(x - max) / sum). Finalized, max + log(sum) rounds to the ulp of the max, which at
// large inputs swamps the differences that exp(x - lse) needs: float32 [1e7, 1e7] gave 0.368 each
// (issue #25).
template <class Op> struct StateResult : Op {
  using State = typename Op::State;
  SEGOPS_HD static State finalize(const State& s, int64_t) { return s; }
};

}  // namespace torch_segops
