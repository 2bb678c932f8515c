// The reductions of torch_segops, in one list. Each row generates the enum value, the ops
// torch_segops::segment_<name>(src, indptr) and segment_<name>_out (their schemas: ops.cpp; their entry
// points: segment_ops.h), scatter_<name>(src, index, size, sorted) and scatter_<name>_plan (entry points:
// cpu/scatter_cpu.cpp, cuda/scatter_cuda.cu), the traits below and the reducer that both backends' kernels run
// (visit_reducer). Adding a reduction: docs/design.md, "Adding a reduction".
//
// No op takes the reduction as a string: the stable ABI's conversion of a `str` argument
// (torch/csrc/stable/stableivalue_conversions.h, compiled into _C.so) leaked per call (issue #25;
// docs/design.md, "One op per reduction").
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "reduction_policies.h"

namespace torch_segops {

// X(Enum, name, Reducer, has_arg, integers)
//   name      the ops' name after "segment_"
//   Reducer   the policy template of reduction_policies.h, instantiated with the accumulation type
//   has_arg   the op also returns the argmin/argmax (the position of the value it keeps)
//   integers  int32/int64 src reduce natively (mean of integers is the integer sum divided by the count,
//             done by the Python layer: src/torch_segops/_reductions.py)
#define SEGOPS_REDUCTIONS(X)                            \
  X(Sum, "sum", SumOp, false, true)                     \
  X(Mean, "mean", MeanOp, false, false)                 \
  X(Mul, "mul", ProdOp, false, true)                    \
  X(Min, "min", MinOp, true, true)                      \
  X(Max, "max", MaxOp, true, true)                      \
  X(LogSumExp, "logsumexp", LogSumExpOp, false, false)

#define SEGOPS_REDUCTION_ENUM(E, NAME, OP, ARG, INTS) E,
enum class Reduce : int { SEGOPS_REDUCTIONS(SEGOPS_REDUCTION_ENUM) };
#undef SEGOPS_REDUCTION_ENUM

template <typename T> struct TypeTag { using type = T; };

template <Reduce R> struct Reduction;

// The schemas' tails by has_arg (the row's literal true/false, pasted).
#define SEGOPS_RETURNS_true " -> (Tensor, Tensor)"
#define SEGOPS_RETURNS_false " -> Tensor"
#define SEGOPS_OUTS_true ", Tensor(a!) out, Tensor(b!) arg) -> ()"
#define SEGOPS_OUTS_false ", Tensor(a!) out) -> ()"

#define SEGOPS_REDUCTION_TRAITS(E, NAME, OP, ARG, INTS)                                                  \
  template <> struct Reduction<Reduce::E> {                                                              \
    template <typename A> using reducer = OP<A>;                                                         \
    static_assert(OP<float>::kHasArg == ARG, "the row's has_arg must be its reducer's kHasArg");          \
    static constexpr bool kHasArg = ARG;                                                                 \
    static constexpr bool kIntegers = INTS;                                                              \
    static constexpr char short_name[] = NAME;                                                           \
    static constexpr char name[] = "segment_" NAME;                                                      \
    static constexpr char out_name[] = "segment_" NAME "_out";                                           \
    static constexpr char schema[] = "segment_" NAME "(Tensor src, Tensor indptr)" SEGOPS_RETURNS_##ARG;  \
    static constexpr char out_schema[] = "segment_" NAME "_out(Tensor src, Tensor indptr" SEGOPS_OUTS_##ARG; \
    static constexpr char scatter_name[] = "scatter_" NAME;                                              \
    static constexpr char scatter_plan_name[] = "scatter_" NAME "_plan";                                 \
    static constexpr char scatter_schema[] =                                                             \
        "scatter_" NAME "(Tensor src, Tensor index, SymInt size, bool sorted)" SEGOPS_RETURNS_##ARG;     \
    static constexpr char scatter_plan_schema[] =                                                        \
        "scatter_" NAME "_plan(Tensor src, Tensor perm, Tensor indptr)" SEGOPS_RETURNS_##ARG;            \
  };
SEGOPS_REDUCTIONS(SEGOPS_REDUCTION_TRAITS)
#undef SEGOPS_REDUCTION_TRAITS
#undef SEGOPS_RETURNS_true
#undef SEGOPS_RETURNS_false
#undef SEGOPS_OUTS_true
#undef SEGOPS_OUTS_false

// Every reduction, in the list's order.
#define SEGOPS_REDUCTION_VALUE(E, NAME, OP, ARG, INTS) Reduce::E,
inline constexpr Reduce kReductions[] = {SEGOPS_REDUCTIONS(SEGOPS_REDUCTION_VALUE)};
#undef SEGOPS_REDUCTION_VALUE

template <class F, size_t... I>
void for_each_reduce_at(F& f, std::index_sequence<I...>) {
  (f(std::integral_constant<Reduce, kReductions[I]>{}), ...);
}

// f(std::integral_constant<Reduce, R>{}) for every reduction R, in the list's order.
template <class F>
void for_each_reduce(F&& f) {
  for_each_reduce_at(f, std::make_index_sequence<sizeof(kReductions) / sizeof(kReductions[0])>{});
}

// f(TypeTag<reducer of r over accumulation type A>{}): the one reduce-to-reducer dispatch of both
// backends. For an integer A only the reductions with integers are instantiated (the shared layer has
// already refused the others: segment_ops.h).
template <typename A, typename F>
void visit_reducer(Reduce r, const F& f) {
  switch (r) {
#define SEGOPS_REDUCTION_CASE(E, NAME, OP, ARG, INTS)                                                    \
    case Reduce::E:                                                                                      \
      if constexpr (INTS || !std::is_integral_v<A>) return f(TypeTag<OP<A>>{});                          \
      break;
    SEGOPS_REDUCTIONS(SEGOPS_REDUCTION_CASE)
#undef SEGOPS_REDUCTION_CASE
  }
  throw std::logic_error("torch_segops: a reduction was dispatched for a dtype it does not support");
}

// "sum, min, max, mul": the reductions that take integer src, for error messages.
inline std::string integer_reduction_names() {
  std::string names;
  for_each_reduce([&](auto r) {
    using Traits = Reduction<decltype(r)::value>;
    if (Traits::kIntegers) names += (names.empty() ? "" : ", ") + std::string(Traits::short_name);
  });
  return names;
}

}  // namespace torch_segops
