// The per-target states of a one-feature scatter that folds each target's values in row order
// (scatter_kernels.cpp; docs/design.md, "scatter on the CPU"): Op::step from Op::identity, in the reducer's
// state type, then the result written as chunk_reduce.h's write_result writes it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cpu/array_loads.h"
#include "cpu/chunk_reduce.h"
#include "reduction_policies.h"

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

// Whether the output itself can hold Op's state: a sum or a product in the output's own type (their finalize
// is the state's value, whatever the count).
template <class Op, typename T>
constexpr bool kStateInOutput = std::is_same_v<Op, SumOp<T>> || std::is_same_v<Op, ProdOp<T>>;

// The states of targets [0, n) in the output (out: target 0's element).
template <class Op, typename T> struct OutputStates {
  T* out;
  void start(int64_t n) const { std::fill(out, out + n, Op::identity().v); }
  SEGOPS_ALWAYS_INLINE void step(uint64_t t, T x, int64_t pos) const {
    typename Op::State s{out[t]};
    Op::step(s, x, pos);
    out[t] = s.v;
  }
  void finish(int64_t, const Outputs<T>&) const {}
};

// The states of targets [0, n) and their counts in arrays of at least n (scratch), written out at the end.
template <class Op, typename T> struct ArrayStates {
  typename Op::State* st;
  int64_t* count;
  void start(int64_t n) const {
    std::fill(st, st + n, Op::identity());
    std::fill(count, count + n, int64_t{0});
  }
  SEGOPS_ALWAYS_INLINE void step(uint64_t t, T x, int64_t pos) const {
    Op::step(st[t], to_acc<acc_t<T>>(x), pos);
    ++count[t];
  }
  // o's segment t is target t.
  void finish(int64_t n, const Outputs<T>& o) const {
    for (int64_t t = 0; t < n; ++t) write_result<Op>(st + t, 1, count[t], o, o.at(0, t, 1), 0, SamePosition());
  }
};

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
