// The reducing ops: one op per reduction, torch_segops::segment_<name>(src, indptr) and its out= form
// segment_<name>_out, named and typed by this table (ops.cpp defines the schemas from it, segment_ops.h
// registers one templated entry point per row). No op takes the reduction as a string: the stable
// ABI's conversion of a `str` argument (torch/csrc/stable/stableivalue_conversions.h, compiled into
// _C.so) leaked about 48 bytes per call (issue #25; docs/design.md, "One op per reduction").
#pragma once

#include <type_traits>
#include <utility>

#include "reducers.h"

namespace torch_segops {

template <Reduce R> struct ReduceOp;

// NAME: the op's name after "segment_"; ARG: whether it also returns the argmin/argmax (min, max).
#define SEGOPS_REDUCE_OP(R, NAME, ARG)                                                                   \
  template <> struct ReduceOp<Reduce::R> {                                                               \
    static constexpr bool kHasArg = ARG;                                                                 \
    static constexpr char name[] = "segment_" NAME;                                                      \
    static constexpr char out_name[] = "segment_" NAME "_out";                                           \
    static constexpr const char* schema =                                                                \
        ARG ? "segment_" NAME "(Tensor src, Tensor indptr) -> (Tensor, Tensor)"                          \
            : "segment_" NAME "(Tensor src, Tensor indptr) -> Tensor";                                   \
    static constexpr const char* out_schema =                                                            \
        ARG ? "segment_" NAME "_out(Tensor src, Tensor indptr, Tensor(a!) out, Tensor(b!) arg) -> ()"    \
            : "segment_" NAME "_out(Tensor src, Tensor indptr, Tensor(a!) out) -> ()";                   \
  };
SEGOPS_REDUCE_OP(Sum, "sum", false)
SEGOPS_REDUCE_OP(Mean, "mean", false)
SEGOPS_REDUCE_OP(Min, "min", true)
SEGOPS_REDUCE_OP(Max, "max", true)
SEGOPS_REDUCE_OP(LogSumExp, "logsumexp", false)
SEGOPS_REDUCE_OP(Mul, "mul", false)
#undef SEGOPS_REDUCE_OP

// f(std::integral_constant<Reduce, R>{}) for every reduction R.
template <class F>
void for_each_reduce(F&& f) {
  [&](auto... r) { (f(r), ...); }(std::integral_constant<Reduce, Reduce::Sum>{},
                                  std::integral_constant<Reduce, Reduce::Mean>{},
                                  std::integral_constant<Reduce, Reduce::Min>{},
                                  std::integral_constant<Reduce, Reduce::Max>{},
                                  std::integral_constant<Reduce, Reduce::LogSumExp>{},
                                  std::integral_constant<Reduce, Reduce::Mul>{});
}

}  // namespace torch_segops
