// exp_approx (cpu/vec_math.h) in float lanes, operation for operation, with the multiply-adds that GCC
// contracts there (its -ffp-contract=fast) written as MulAdd/NegMulAdd: fused on the targets with FMA,
// a multiply and an add elsewhere, as the scalar code is. The same bits as exp_approx on every target
// (tools/cpu_targets.py compares the objects with each other and with a build of the scalar code).
#pragma once

#include <cstdint>
#include <limits>

#include "cpu/simd.h"

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

// exp_approx's core for an argument xc in [ln(FLT_MIN), ln(FLT_MAX)]: y = exp(xc - n ln 2) in [0.7, 1.5) with
// n = round(xc / ln 2), and big = xc / ln 2 + 1.5 * 2^23, whose bits are those of 1.5 * 2^23 plus n.
template <class D>
HWY_INLINE hn::Vec<D> exp_mantissa(D d, hn::Vec<D> xc, hn::Vec<D>& big) {
  const auto t = hn::Mul(xc, hn::Set(d, 1.44269504088896341f));
  const auto round = hn::Set(d, 12582912.f);
  big = hn::Add(t, round);
  const auto n = hn::Sub(big, round);
  const auto r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), hn::NegMulAdd(n, hn::Set(d, 0.693359375f), xc));
  auto p = hn::Set(d, 1.9875691500e-4f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 5.0000001201e-1f));
  return hn::Add(hn::MulAdd(hn::Mul(p, r), r, r), hn::Set(d, 1.f));
}

// exp_approx for arguments x <= 0 or NaN (x - max, in logsumexp and softmax), in fewer operations, with the
// same bits. No clamp: below ln(FLT_MIN) (-inf included) the lane is garbage and then zeroed, as
// exp_approx's result is; a NaN flows through the arithmetic into the result (a quiet NaN with x's
// payload: the scale factor's mantissa is zero, so it is never the NaN a product returns). 2^n for n in
// [-126, 0] is one normal factor, from big's bits (n + 127 in the exponent field, shifted in unsigned
// lanes, no conversion); exp_approx's two factors round the same, as its first multiply (of y in
// [0.7, 1.5) by 2^(n >> 1)) is exact.
template <class D>
HWY_INLINE hn::Vec<D> exp_nonpos_lanes(D d, hn::Vec<D> x) {
  const hn::RebindToUnsigned<D> du;
  hn::Vec<D> big;
  const auto y = exp_mantissa(d, x, big);
  const auto biased = hn::Add(hn::BitCast(du, big), hn::Set(du, 127u - 0x4B400000u));  // n + 127 (mod 2^32)
  const auto scale = hn::BitCast(d, hn::ShiftLeft<23>(biased));
  return hn::IfThenZeroElse(hn::Lt(x, hn::Set(d, -87.336544f)), hn::Mul(y, scale));
}

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
