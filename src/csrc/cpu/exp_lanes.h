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

// exp_approx for arguments x <= 0 or NaN (x - max, in logsumexp and softmax), in fewer operations, with the
// same bits, of N vectors in place. exp_approx's core: y = exp(x - n ln 2) in [0.7, 1.5) with
// n = round(x / ln 2), from big = x / ln 2 + 1.5 * 2^23, whose bits are those of 1.5 * 2^23 plus n. No
// clamp: below ln(FLT_MIN) (-inf included) the lane is garbage and then zeroed, as exp_approx's result is;
// a NaN flows through the arithmetic into the result (a quiet NaN with x's payload: the scale factor's
// mantissa is zero, so it is never the NaN a product returns). 2^n for n in [-126, 0] is one normal factor,
// from big's bits (n + 127 in the exponent field, shifted in unsigned lanes, no conversion); exp_approx's
// two factors round the same, as its first multiply (of y in [0.7, 1.5) by 2^(n >> 1)) is exact.
// The N vectors go step by step side by side: N independent chains in flight (one at a time, the
// out-of-order window held too few of its long chains: logsumexp's exp pass over 2M x 64 took 1.19x this
// time on SSE2, whose steps are a multiply and an add, and 1.16x on AVX2).
template <int N, class D>
HWY_INLINE void exp_nonpos_lanes(D d, hn::Vec<D> (&x)[N]) {
  using V = hn::Vec<D>;
  const hn::RebindToUnsigned<D> du;
  const V round = hn::Set(d, 12582912.f);
  V big[N], r[N], p[N];
  for (int i = 0; i < N; ++i) big[i] = hn::Add(hn::Mul(x[i], hn::Set(d, 1.44269504088896341f)), round);
  for (int i = 0; i < N; ++i) {
    const V n = hn::Sub(big[i], round);
    r[i] = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x[i]));
  }
  for (int i = 0; i < N; ++i) p[i] = hn::MulAdd(hn::Set(d, 1.9875691500e-4f), r[i], hn::Set(d, 1.3981999507e-3f));
  for (int i = 0; i < N; ++i) p[i] = hn::MulAdd(p[i], r[i], hn::Set(d, 8.3334519073e-3f));
  for (int i = 0; i < N; ++i) p[i] = hn::MulAdd(p[i], r[i], hn::Set(d, 4.1665795894e-2f));
  for (int i = 0; i < N; ++i) p[i] = hn::MulAdd(p[i], r[i], hn::Set(d, 1.6666665459e-1f));
  for (int i = 0; i < N; ++i) p[i] = hn::MulAdd(p[i], r[i], hn::Set(d, 5.0000001201e-1f));
  for (int i = 0; i < N; ++i) p[i] = hn::Add(hn::MulAdd(hn::Mul(p[i], r[i]), r[i], r[i]), hn::Set(d, 1.f));
  for (int i = 0; i < N; ++i) {
    const auto biased = hn::Add(hn::BitCast(du, big[i]), hn::Set(du, 127u - 0x4B400000u));  // n + 127 (mod 2^32)
    const V scale = hn::BitCast(d, hn::ShiftLeft<23>(biased));
    x[i] = hn::IfThenZeroElse(hn::Lt(x[i], hn::Set(d, -87.336544f)), hn::Mul(p[i], scale));
  }
}

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
