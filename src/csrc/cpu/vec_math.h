// Element helpers for the CPU kernels, written so that GCC/Clang vectorise the loops that call them
// (no branches, no libm calls in the float path).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include <torch/headeronly/util/BFloat16.h>

#include "reduction_policies.h"  // SEGOPS_HD

// Code that kernels.cpp compiles once per instruction set lives in an inline namespace named after the
// set, so that no out-of-line copy of it is shared (and picked by the linker) across the sets.
#if defined(SEGOPS_CPU_ISA)
#define SEGOPS_ISA_CAT2(a, b) a##b
#define SEGOPS_ISA_CAT(a, b) SEGOPS_ISA_CAT2(a, b)
#include <hwy/highway.h>
#define SEGOPS_ISA_NAMESPACE_BEGIN HWY_BEFORE_NAMESPACE(); inline namespace SEGOPS_ISA_CAT(isa_, SEGOPS_CPU_ISA) {
#define SEGOPS_ISA_NAMESPACE_END } HWY_AFTER_NAMESPACE();
#else
#define SEGOPS_ISA_NAMESPACE_BEGIN
#define SEGOPS_ISA_NAMESPACE_END
#endif

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

template <typename To, typename From> SEGOPS_HD To bit_cast(From x) {
  static_assert(sizeof(To) == sizeof(From));
  To y;
  std::memcpy(&y, &x, sizeof y);
  return y;
}

// Element -> accumulator. bfloat16 is the top half of a float32: a shift the compiler vectorises.
template <typename A, typename T> SEGOPS_HD A to_acc(T x) { return static_cast<A>(x); }
template <> SEGOPS_HD float to_acc<float, torch::headeronly::BFloat16>(torch::headeronly::BFloat16 x) {
  return bit_cast<float>(static_cast<uint32_t>(x.x) << 16);
}

// exp(x) for float without libm: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by the degree-6 minimax
// polynomial of the Cephes library (within 2 ulp of expf), 2^n built from exponent bits in two halves
// so that every n in [-126, 128] stays a normal float. Results below FLT_MIN flush to 0.
SEGOPS_HD float exp_approx(float x) {
  constexpr float kLo = -87.336544f;  // ln(FLT_MIN)
  constexpr float kHi = 88.722839f;   // ln(FLT_MAX)
  const float xc = x < kLo ? kLo : x > kHi ? kHi : x != x ? 0.f : x;
  const float t = xc * 1.44269504088896341f;
  const float n = (t + 12582912.f) - 12582912.f;  // round to nearest (1.5 * 2^23 trick, |t| < 2^22)
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.f;
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  const float s1 = bit_cast<float>((n1 + 127) << 23), s2 = bit_cast<float>((n2 + 127) << 23);
  const float e = y * s1 * s2;
  const float big = x > kHi ? std::numeric_limits<float>::infinity() : e;
  const float res = x < kLo ? 0.f : big;
  return x != x ? x : res;
}
// double (libm), and the integer types that dtype dispatch instantiates but never runs.
template <typename A> SEGOPS_HD A exp_approx(A x) { return static_cast<A>(std::exp(x)); }

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
