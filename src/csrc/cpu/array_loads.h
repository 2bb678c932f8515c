// How the piece kernels read their input: element by element as the accumulation type (ArrayLoad, or
// any Load); whole vectors where the Load is an ArrayLoad (cpu/simd.h's load_acc and load_f32).
#pragma once

#include <cstdint>
#include <type_traits>

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include "reduction_policies.h"
#include "vec_math.h"

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

// Reads element i of a contiguous array of n elements (as the accumulation type). Kernels that know
// their input is such an array pass this instead of a lambda, which lets a piece use whole-vector loads.
template <typename T> struct ArrayLoad {
  const T* x;
  int64_t n;
  SEGOPS_HD acc_t<T> operator()(int64_t i) const { return to_acc<acc_t<T>>(x[i]); }
};
template <typename L> struct is_array_load : std::false_type {};
template <typename T> struct is_array_load<ArrayLoad<T>> : std::true_type { using type = T; };

// The element types the vector paths read as float lanes: float, bfloat16 and float16.
template <typename T>
constexpr bool kFloatLanes = std::is_same_v<T, float> || std::is_same_v<T, torch::headeronly::BFloat16> ||
                             std::is_same_v<T, torch::headeronly::Half>;

// Whether Load is an ArrayLoad of float lanes.
template <class Load> constexpr bool kFloatArray = [] {
  if constexpr (is_array_load<Load>::value) {
    return kFloatLanes<typename is_array_load<Load>::type>;
  } else {
    return false;
  }
}();

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
