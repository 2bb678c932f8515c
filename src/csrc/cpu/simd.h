// Google Highway for the CPU kernels: the vector helpers they share. Every kernel object is compiled with
// its own instruction-set flags (CMakeLists.txt), which make one Highway target its static target:
// hn = hwy::HWY_NAMESPACE is that target's operations (N_AVX2, N_NEON, N_EMU128, ...), and this code
// lives in the object's own inline namespace (SEGOPS_ISA_NAMESPACE_BEGIN).
//
// The kernels keep vectors in arrays (a block's per-feature values in registers), which the sizeless
// vector types of the scalable targets (SVE, RVV) do not allow: no object is built for them.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <hwy/highway.h>
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include "cpu/array_loads.h"

#if HWY_HAVE_SCALABLE
#error "the CPU kernels keep vectors in arrays: build no object for a scalable target (SVE, RVV)"
#endif

// x86 targets from SSE4 up (SSE3's haddps, movmskps) and the NEON targets of aarch64 (faddp): the few
// helpers below that use an instruction Highway 1.0 has no operation for.
#define SEGOPS_X86_SIMD (HWY_ARCH_X86 && HWY_TARGET <= HWY_SSE4)
#define SEGOPS_X86_AVX512 (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3)
#define SEGOPS_A64_NEON (HWY_ARCH_ARM_A64 && HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR)
// Every x86 target with vectors: SSE2 (Highway >= 1.1's baseline), SSSE3 and up
#define SEGOPS_X86_SSE2 (HWY_ARCH_X86 && HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR)

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kF32Lanes = static_cast<int>(hn::MaxLanes(hn::ScalableTag<float>()));  // a full float vector

// Elements as float lanes: float, bfloat16 (a float's upper half) and float16; exact conversions.
template <class D>
HWY_INLINE hn::Vec<D> load_f32(D d, const float* p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> load_f32(D d, const torch::headeronly::BFloat16* p) {
  const hn::Rebind<hwy::bfloat16_t, D> dh;
  return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::bfloat16_t*>(p)));
}
// float16: the hardware conversion where there is one (F16C on AVX2 and AVX-512, NEON's fcvtl);
// elsewhere in integer lanes, exactly (Highway 1.0.3's emulation turned inf and NaN into 65536 and
// 98304): the exponent rebiased, inf/NaN kept (NaNs quieted, as F16C does), subnormals renormalised by
// one exact float subtraction.
template <class D>
HWY_INLINE hn::Vec<D> load_f32(D d, const torch::headeronly::Half* p) {
#if (SEGOPS_X86_SIMD && HWY_TARGET <= HWY_AVX2) || SEGOPS_A64_NEON
  const hn::Rebind<hwy::float16_t, D> dh;
  return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
#else
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<uint16_t, D> dh;
  const auto h = hn::PromoteTo(du, hn::LoadU(dh, reinterpret_cast<const uint16_t*>(p)));
  const auto em = hn::ShiftLeft<13>(hn::And(h, hn::Set(du, 0x7fffu)));  // exponent and mantissa, float's places
  const auto exp = hn::And(em, hn::Set(du, 0x0f800000u));
  const auto rebias = hn::Set(du, 0x38000000u);  // (127 - 15) << 23
  auto o = hn::Add(em, rebias);
  const auto inf_nan = hn::Eq(exp, hn::Set(du, 0x0f800000u));
  const auto quiet = hn::IfThenElseZero(hn::Ne(hn::And(em, hn::Set(du, 0x007fe000u)), hn::Zero(du)),
                                        hn::Set(du, 0x00400000u));
  o = hn::IfThenElse(inf_nan, hn::Or(hn::Add(o, rebias), quiet), o);
  const auto two_m14 = hn::BitCast(d, hn::Set(du, 0x38800000u));  // 2^-14
  const auto sub = hn::BitCast(du, hn::Sub(hn::BitCast(d, hn::Add(o, hn::Set(du, 0x00800000u))), two_m14));
  o = hn::IfThenElse(hn::Eq(exp, hn::Zero(du)), sub, o);
  return hn::BitCast(d, hn::Or(o, hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)))));
#endif
}

// Elements [e, e + Lanes(d)) of a load as its accumulation type A = TFromD<D>: one vector load where the
// input is an array of A, a widening load for bfloat16/float16 -> float and int32 -> int64, else lane by lane.
template <class D, class Load>
HWY_INLINE hn::Vec<D> load_acc(D d, const Load& load, int64_t e) {
  using A = hn::TFromD<D>;
  if constexpr (is_array_load<Load>::value) {
    using T = typename is_array_load<Load>::type;
    if constexpr (std::is_same_v<T, A>) {
      return hn::LoadU(d, load.x + e);
    } else if constexpr (std::is_same_v<A, float> && kFloatLanes<T>) {
      return load_f32(d, load.x + e);
    } else if constexpr (std::is_same_v<A, int64_t> && std::is_same_v<T, int32_t>) {
      return hn::PromoteTo(d, hn::LoadU(hn::Rebind<int32_t, D>(), load.x + e));
    }
  }
  HWY_ALIGN A a[hn::MaxLanes(d)];
  for (size_t l = 0; l < hn::MaxLanes(d); ++l) a[l] = load(e + static_cast<int64_t>(l));
  return hn::Load(d, a);
}

// Within every 128-bit block: [a0 + a1, a2 + a3, b0 + b1, b2 + b3] (SSE3's haddps, NEON's faddp), so that
// every target adds float lanes in the same pairs (the one-feature sums' order, float_sum_lanes.h).
template <class D>
HWY_INLINE hn::Vec<D> pair_add([[maybe_unused]] D d, hn::Vec<D> a, hn::Vec<D> b) {
  static_assert(std::is_same_v<hn::TFromD<D>, float> && hn::MaxLanes(D()) % 4 == 0, "blocks of 4 floats");
#if SEGOPS_X86_SIMD && HWY_TARGET <= HWY_AVX2
  if constexpr (hn::MaxLanes(D()) == 4) {
    return hn::Vec<D>{_mm_hadd_ps(a.raw, b.raw)};
  } else {
    static_assert(hn::MaxLanes(D()) == 8, "256-bit vectors");
    return hn::Vec<D>{_mm256_hadd_ps(a.raw, b.raw)};
  }
#elif SEGOPS_X86_SIMD
  static_assert(hn::MaxLanes(D()) == 4, "128-bit vectors");
  return hn::Vec<D>{_mm_hadd_ps(a.raw, b.raw)};
#elif SEGOPS_X86_SSE2  // no haddps: the even and the odd lanes of a and b, added
  static_assert(hn::MaxLanes(D()) == 4, "128-bit vectors");
  return hn::Vec<D>{_mm_add_ps(_mm_shuffle_ps(a.raw, b.raw, _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm_shuffle_ps(a.raw, b.raw, _MM_SHUFFLE(3, 1, 3, 1)))};
#elif SEGOPS_A64_NEON
  static_assert(hn::MaxLanes(D()) == 4, "128-bit vectors");
  return hn::Vec<D>{vpaddq_f32(a.raw, b.raw)};
#else
  HWY_ALIGN float x[hn::MaxLanes(D())], y[hn::MaxLanes(D())], r[hn::MaxLanes(D())];
  hn::Store(a, d, x);
  hn::Store(b, d, y);
  for (size_t k = 0; k < hn::MaxLanes(D()); k += 4) {
    r[k] = x[k] + x[k + 1], r[k + 1] = x[k + 2] + x[k + 3];
    r[k + 2] = y[k] + y[k + 1], r[k + 3] = y[k + 2] + y[k + 3];
  }
  return hn::Load(d, r);
#endif
}

// Lanes where a or b is NaN (x86: one unordered comparison).
template <class D>
HWY_INLINE hn::Mask<D> unordered(D d, hn::Vec<D> a, hn::Vec<D> b) {
  [[maybe_unused]] constexpr bool kF32 = std::is_same_v<hn::TFromD<D>, float>;
  [[maybe_unused]] constexpr size_t kL = hn::MaxLanes(D());
#if SEGOPS_X86_AVX512
  if constexpr (kF32 && kL == 16) {
    return hn::Mask<D>{_mm512_cmp_ps_mask(a.raw, b.raw, _CMP_UNORD_Q)};
  } else if constexpr (kF32 && kL == 8) {
    return hn::Mask<D>{_mm256_cmp_ps_mask(a.raw, b.raw, _CMP_UNORD_Q)};
  }
#elif SEGOPS_X86_SIMD && HWY_TARGET <= HWY_AVX2
  if constexpr (kF32 && kL == 8) return hn::Mask<D>{_mm256_cmp_ps(a.raw, b.raw, _CMP_UNORD_Q)};
  if constexpr (kF32 && kL == 4) return hn::Mask<D>{_mm_cmpunord_ps(a.raw, b.raw)};
#elif SEGOPS_X86_SSE2  // SSE's cmpunordps: the SSE2 and SSSE3 targets
  if constexpr (kF32 && kL == 4) return hn::Mask<D>{_mm_cmpunord_ps(a.raw, b.raw)};
#endif
  (void)d;
  return hn::Or(hn::IsNaN(a), hn::IsNaN(b));
}

// Lane-wise max or min of float vectors that keeps NaN where one instruction does (NEON's fmax/fmin;
// Highway's Max/Min are fmaxnm/fminnm there, which drop it): kNanKeepingExtremes says whether a NaN in a
// or b always reaches the result (x86's maxps returns its second operand when one is NaN).
#if SEGOPS_A64_NEON
constexpr bool kNanKeepingExtremes = true;
#else
constexpr bool kNanKeepingExtremes = false;
#endif
template <bool kIsMax, class D>
HWY_INLINE hn::Vec<D> extreme_of([[maybe_unused]] D d, hn::Vec<D> a, hn::Vec<D> b) {
#if SEGOPS_A64_NEON
  static_assert(std::is_same_v<hn::TFromD<D>, float> && hn::MaxLanes(D()) == 4, "128-bit float vectors");
  return hn::Vec<D>{kIsMax ? vmaxq_f32(a.raw, b.raw) : vminq_f32(a.raw, b.raw)};
#else
  return kIsMax ? hn::Max(a, b) : hn::Min(a, b);
#endif
}

// Bit l set where lane l of m is true (at most 64 lanes).
template <class D>
HWY_INLINE uint64_t mask_bits(D d, hn::Mask<D> m) {
  static_assert(hn::MaxLanes(D()) <= 64, "one word of bits");
#if SEGOPS_X86_AVX512
  (void)d;
  return static_cast<uint64_t>(m.raw);
#elif SEGOPS_X86_SIMD && HWY_TARGET <= HWY_AVX2
  if constexpr (std::is_same_v<hn::TFromD<D>, float> && hn::MaxLanes(D()) == 8) {
    return static_cast<uint32_t>(_mm256_movemask_ps(m.raw));
  } else if constexpr (std::is_same_v<hn::TFromD<D>, float> && hn::MaxLanes(D()) == 4) {
    return static_cast<uint32_t>(_mm_movemask_ps(m.raw));
  }
#elif SEGOPS_X86_SSE2  // SSE's movmskps: the SSE2 and SSSE3 targets (Highway's StoreMaskBits merged bytes there)
  if constexpr (std::is_same_v<hn::TFromD<D>, float> && hn::MaxLanes(D()) == 4) {
    return static_cast<uint32_t>(_mm_movemask_ps(m.raw));
  }
#elif SEGOPS_A64_NEON  // lane l's bit: an and with 1 << l, an add across lanes (GCC merged StoreMaskBits' bytes with bfxil)
  if constexpr (std::is_same_v<hn::TFromD<D>, float> && hn::MaxLanes(D()) == 4) {
    const uint32x4_t lane_bit = {1u, 2u, 4u, 8u};
    return vaddvq_u32(vandq_u32(m.raw, lane_bit));
  }
#endif
  uint8_t bytes[8] = {};
  hn::StoreMaskBits(d, m, bytes);
  uint64_t bits;
  std::memcpy(&bits, bytes, sizeof bits);
  return bits;
}

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
