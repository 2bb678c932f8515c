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

// exp_approx's core for a clamped argument xc: n = round(xc / ln 2) and y = exp(xc - n ln 2) in [0.7, 1.5).
template <class D>
HWY_INLINE hn::Vec<D> exp_mantissa(D d, hn::Vec<D> xc, hn::Vec<D>& n) {
  const auto t = hn::Mul(xc, hn::Set(d, 1.44269504088896341f));
  const auto round = hn::Set(d, 12582912.f);
  n = hn::Sub(hn::Add(t, round), round);
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
// same bits: the lower clamp is a max (a NaN's clamp does not matter: NaN is returned as it is), the upper
// one never applies, and 2^n (n in [-126, 0]) is one normal scale factor; exp_approx's two factors make
// the same single rounding, as its first multiply (by 2^(n >> 1), of y in [0.7, 1.5)) is exact.
template <class D>
HWY_INLINE hn::Vec<D> exp_nonpos_lanes(D d, hn::Vec<D> x) {
  const hn::RebindToSigned<D> di;
  const auto lo = hn::Set(d, -87.336544f);
  const auto xc = hn::Max(x, lo);
  hn::Vec<D> n;
  const auto y = exp_mantissa(d, xc, n);
  const auto scale = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127))));
  const auto res = hn::IfThenElseZero(hn::Not(hn::Lt(x, lo)), hn::Mul(y, scale));
  return hn::IfThenElse(hn::Eq(x, x), res, x);
}

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
