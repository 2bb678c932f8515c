// Min/max with arg of float features in whole rows: blocks of NV vectors (NV even, 16 to 64 features)
// walked row by row over rows [0, count <= kMaxRows16), with the rows as int16 lanes: one comparison mask
// per pair of value vectors narrows into one vector of row numbers, so values and rows of 64 features
// take 12 of AVX2's 16 registers (at 64 the row vectors still spill: a load and a store per row each).
// Blocks of 32 features walked each piece twice, half a row at a time; that access pattern, not the
// instruction count, kept max well behind sum (docs/design.md). The comparison is strict, so a NaN is
// never taken: NaNs are only noted, and a block that holds one returns false without writing st, for
// the exact loop of extremum_piece_lanes. Targets whose comparison masks are vectors (SEGOPS_ROWS16):
// AVX-512's mask registers select 32-bit rows directly, and the scalar fallback has no lanes to pack.
#pragma once

#include <cstdint>

#include "cpu/extremum_reducers.h"
#include "cpu/simd.h"

#define SEGOPS_ROWS16 (!SEGOPS_X86_AVX512 && HWY_TARGET != HWY_SCALAR)

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

constexpr int64_t kMaxRows16 = 32767;  // the rows an int16 lane numbers
// Features per whole-row block: 8 vectors of values and 4 of rows (12 of x86's 16 registers), 16 and 8 on
// aarch64 (32 registers); at most 64.
constexpr int kRows16Block = (HWY_ARCH_ARM_A64 ? 16 : 8) * kF32Lanes < 64 ? (HWY_ARCH_ARM_A64 ? 16 : 8) * kF32Lanes : 64;

#if SEGOPS_ROWS16
template <class Op, int NV, class Load>
HWY_INLINE bool arg_extremum_rows16(typename Op::State* st, const Load& load, int64_t elem0, int64_t F, int64_t pos0,
                                    int64_t count) {
  using D = hn::ScalableTag<float>;
  using D16 = hn::Repartition<int16_t, D>;
  using DI = hn::RebindToSigned<D>;
  constexpr int kL = kF32Lanes;
  constexpr bool kIsMax = ArgExtremumF32<Op>::kIsMax;
  static_assert(NV % 2 == 0 && NV * kL <= 64, "pairs of vectors, at most 64 features");
  const D d;
  const D16 d16;
  const DI di;
  hn::Vec<D> m[NV];
  hn::Vec<D16> idx[NV / 2];
  for (int v = 0; v < NV; ++v) m[v] = load_acc(d, load, elem0 + v * kL);
  for (int j = 0; j < NV / 2; ++j) idx[j] = hn::Zero(d16);
  hn::Mask<D> nan = hn::FirstN(d, 0);
  auto row = hn::Zero(d16);
  const auto one = hn::Set(d16, int16_t{1});
  for (int64_t r = 1; r < count; ++r) {
    row = hn::Add(row, one);
    const int64_t e = elem0 + r * F;
#pragma GCC unroll 8
    for (int j = 0; j < NV / 2; ++j) {  // unrolled, so that m and idx stay in registers
      const auto x0 = load_acc(d, load, e + 2 * j * kL);
      const auto x1 = load_acc(d, load, e + (2 * j + 1) * kL);
      const auto t0 = kIsMax ? hn::Gt(x0, m[2 * j]) : hn::Lt(x0, m[2 * j]);
      const auto t1 = kIsMax ? hn::Gt(x1, m[2 * j + 1]) : hn::Lt(x1, m[2 * j + 1]);
      // a blend, not maxps/minps(x, m), which equals it for every input but a subnormal under denormals-are-zero
      // (torch.set_flush_denormal(True)): that would write 0, not src[arg]
      m[2 * j] = hn::IfThenElse(t0, x0, m[2 * j]);
      m[2 * j + 1] = hn::IfThenElse(t1, x1, m[2 * j + 1]);
      const auto took = hn::ReorderDemote2To(d16, hn::BitCast(di, hn::VecFromMask(d, t0)),
                                             hn::BitCast(di, hn::VecFromMask(d, t1)));
#if SEGOPS_X86_SSE2 && !SEGOPS_X86_SIMD
      // no blend below SSE4 (three instructions): the larger of idx and took's rows is the same, as row is
      // above every row idx holds
      idx[j] = hn::Max(idx[j], hn::And(took, row));
#else
      idx[j] = hn::IfThenElse(hn::MaskFromVec(took), row, idx[j]);
#endif
      nan = hn::Or(nan, unordered(d, x0, x1));
    }
  }
  for (int v = 0; v < NV; ++v) nan = hn::Or(nan, hn::IsNaN(m[v]));  // the first row's NaNs (never replaced)
  if (!hn::AllFalse(d, nan)) return false;
  // which lane of the pair each int16 lane holds: the narrowing's order (AVX2's pack interleaves 128-bit blocks)
  HWY_ALIGN int16_t lane_of[2 * kL];
  hn::Store(hn::ReorderDemote2To(d16, hn::Iota(di, 0), hn::Iota(di, kL)), d16, lane_of);
  HWY_ALIGN float mv[NV * kL];
  HWY_ALIGN int16_t rows[NV * kL];
  for (int v = 0; v < NV; ++v) hn::Store(m[v], d, mv + v * kL);
  for (int j = 0; j < NV / 2; ++j) hn::Store(idx[j], d16, rows + 2 * j * kL);
  for (int j = 0; j < NV / 2; ++j) {
    for (int i = 0; i < 2 * kL; ++i) {
      const int f = 2 * j * kL + lane_of[i];
      st[f] = {mv[f], pos0 + rows[2 * j * kL + i]};
    }
  }
  return true;
}
#endif

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
