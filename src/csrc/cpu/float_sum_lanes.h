// Float sums of rows of one feature in 8 float lanes on every target (one 256-bit vector on AVX2, two
// 128-bit ones on SSE4/NEON: an "octet"): a window of up to 32 rows without a branch (sum_window), any
// number of rows (sum_lanes), and the lanes' total (octet_total, octet_totals8 for 8 octets at once). The
// lanes, and the tree that adds them, are the same on every target, so every target gives the same bits
// (the order of the additions depends on a segment's length only). The float sums of one feature of
// reduce_piece.h and the short segments of segment_sums.h run them.
#pragma once

#include <cstdint>

#include "cpu/simd.h"

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

// 8 float lanes as kOctV vectors of D8 (lanes 0..7 in order): 1 of 8 lanes, 2 of 4, or 8 of 1 (scalar).
using D8 = hn::CappedTag<float, 8>;
constexpr int kOctL = static_cast<int>(hn::MaxLanes(D8()));
constexpr int kOctV = 8 / kOctL;
static_assert(kOctL == 8 || kOctL == 4 || HWY_TARGET == HWY_SCALAR, "octets of 1 or 2 vectors");
struct Octet {
  Octet() {}  // user-provided: GCC's implicit one is not (NEON's vectors have a constructor)
  hn::Vec<D8> v[kOctV];
};

HWY_INLINE Octet octet_zero() {
  Octet o;
  for (int j = 0; j < kOctV; ++j) o.v[j] = hn::Zero(D8());
  return o;
}
HWY_INLINE Octet octet_add(const Octet& a, const Octet& b) {
  Octet o;
  for (int j = 0; j < kOctV; ++j) o.v[j] = hn::Add(a.v[j], b.v[j]);
  return o;
}
template <typename T>
HWY_INLINE Octet octet_load(const T* x) {
  Octet o;
  for (int j = 0; j < kOctV; ++j) o.v[j] = load_f32(D8(), x + j * kOctL);
  return o;
}

// Float sum of rows [0, n) of x, n <= 32, in 8 lanes (their total is the sum): four octets that always
// run and keep only the rows below n, so a segment of up to 32 rows costs the same whatever its length,
// with no branch to mispredict. The octets are read whole (rows past n are zeroed, not skipped) when
// `readable` elements from x on lie in the array; near the array's end a zero-padded copy is read instead,
// so nothing past the array is read. kEndReadable: the caller knows that x[31] lies in the array (no
// check). The four octets are summed pairwise.
template <bool kEndReadable = false, typename T>
HWY_INLINE Octet sum_window(const T* x, int64_t n, int64_t readable) {
  const hn::RebindToSigned<D8> di;
  const T* from = x;
  T pad[32];
  if (!kEndReadable && readable < 32) {
    for (int k = 0; k < 32; ++k) pad[k] = k < readable ? x[k] : T(0);
    from = pad;
  }
  const auto left = hn::Set(di, static_cast<int32_t>(n));
  Octet t[4];
  for (int k = 0; k < 4; ++k) {
    for (int j = 0; j < kOctV; ++j) {
      const auto row = hn::Iota(di, 8 * k + j * kOctL);
      t[k].v[j] = hn::IfThenElseZero(hn::RebindMask(D8(), hn::Lt(row, left)), load_f32(D8(), from + 8 * k + j * kOctL));
    }
  }
  return octet_add(octet_add(t[0], t[1]), octet_add(t[2], t[3]));
}

// Float sum of x[0, n) in 8 lanes: whole steps of 32 rows in four octets (summed pairwise), plus
// sum_window of the rest. The order of the additions depends on n only.
template <bool kEndReadable = false, typename T>
HWY_INLINE Octet sum_lanes(const T* x, int64_t n, int64_t readable) {
  Octet whole = octet_zero();
  int64_t i = 0;
  if (n >= 32) {
    Octet a[4] = {octet_zero(), octet_zero(), octet_zero(), octet_zero()};
    for (; i + 32 <= n; i += 32) {
      for (int k = 0; k < 4; ++k) a[k] = octet_add(a[k], octet_load(x + i + 8 * k));
    }
    whole = octet_add(octet_add(a[0], a[1]), octet_add(a[2], a[3]));
  }
  return octet_add(whole, sum_window<kEndReadable>(x + i, n - i, readable - i));
}

// The lanes' total ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)).
HWY_INLINE float octet_total(const Octet& o) {
  const D8 d;
#if HWY_TARGET == HWY_SCALAR
  HWY_ALIGN float l[8];
  for (int j = 0; j < kOctV; ++j) hn::Store(o.v[j], d, l + j * kOctL);
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
#else
  if constexpr (kOctV == 1) {
    const auto t = pair_add(d, o.v[0], o.v[0]);  // per 128-bit half: 01 23 01 23, 45 67 45 67
    const auto u = pair_add(d, t, t);              // 0123 ..., 4567 ...
    const hn::Half<D8> dh;
    return hn::GetLane(hn::Add(hn::LowerHalf(dh, u), hn::UpperHalf(dh, u)));
  } else {
    const auto t = pair_add(d, o.v[0], o.v[kOctV - 1]);  // 01 23 45 67
    const auto u = pair_add(d, t, t);                      // 0123 4567 ...
    const float lo = hn::GetLane(u), hi = hn::ExtractLane(u, 1);
    return lo + hi;
  }
#endif
}

// sums[k] = octet_total(v[k]) for 8 octets at once (a quarter of the instructions).
HWY_INLINE void octet_totals8(const Octet* v, float* sums) {
#if HWY_TARGET == HWY_SCALAR
  for (int k = 0; k < 8; ++k) sums[k] = octet_total(v[k]);
#else
  const D8 d;
  if constexpr (kOctV == 1) {
    const auto u0 = pair_add(d, pair_add(d, v[0].v[0], v[1].v[0]), pair_add(d, v[2].v[0], v[3].v[0]));
    const auto u1 = pair_add(d, pair_add(d, v[4].v[0], v[5].v[0]), pair_add(d, v[6].v[0], v[7].v[0]));
    // lower halves: lanes 0..3 of octets 0..3, then 4..7; upper halves: their lanes 4..7
    hn::StoreU(hn::Add(hn::ConcatLowerLower(d, u1, u0), hn::ConcatUpperUpper(d, u1, u0)), d, sums);
  } else {
    for (int g = 0; g < 2; ++g) {
      const Octet* w = v + 4 * g;
      const auto lo = pair_add(d, pair_add(d, w[0].v[0], w[1].v[0]), pair_add(d, w[2].v[0], w[3].v[0]));
      const auto hi = pair_add(d, pair_add(d, w[0].v[kOctV - 1], w[1].v[kOctV - 1]),
                               pair_add(d, w[2].v[kOctV - 1], w[3].v[kOctV - 1]));
      hn::StoreU(hn::Add(lo, hi), d, sums + 4 * g);
    }
  }
#endif
}

// Float sum of x[0, n), `readable` elements from x on in the array.
template <typename T>
HWY_INLINE float sum_f1(const T* x, int64_t n, int64_t readable) {
  return octet_total(sum_lanes(x, n, readable));
}

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
