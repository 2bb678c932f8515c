// Min/max of a piece over several features in one pass, with the first row holding it (ArgExtremumOp) or
// the value alone (ExtremeValueOp): Highway vectors of values and row numbers (extremum_piece_lanes; the
// auto-vectoriser left blocks of fewer than 32 float features scalar), and float features in whole-row
// blocks of up to 64 with int16 row numbers first (arg_extremum_rows16.h).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cpu/arg_extremum_rows16.h"
#include "cpu/extremum_reducers.h"
#include "cpu/feature_blocks.h"
#include "cpu/simd.h"

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

// Min or max over rows [0, count >= 1) of fn features, in one pass, as Op::step folds them: with rows
// (ArgExtremumOp), a row replaces a feature's extreme when it is better, or when it is NaN and the
// extreme is not (the first NaN wins and stays); the value alone (ExtremeValueOp) takes any NaN. Blocks
// of up to 4 full vectors (the auto-vectoriser left blocks of 16 or 8 float features scalar), smaller
// blocks in smaller vectors down to 16 bytes; fewer features run as scalars (without rows: reduce_block).
// Rows are lanes as wide as the values, so that one comparison mask selects both.
// known_nan: the caller saw a NaN in these rows (the exact loop at once).
template <class Op, class Load>
inline void extremum_piece_lanes(typename Op::State* st, const Load& load, int64_t elem0, int64_t F, int64_t fn,
                                 int64_t pos0, int64_t count, [[maybe_unused]] bool known_nan = false) {
  using E = Extremum<Op>;
  using A = typename E::A;
  constexpr int kL = static_cast<int>(hn::MaxLanes(hn::ScalableTag<A>()));
  constexpr bool kFloat = std::is_floating_point_v<A>;
  using Pos = std::conditional_t<sizeof(A) <= 4, int32_t, int64_t>;
  // 4 vectors per block: values and rows in 8 registers (8 vectors of values alone spilled on AVX2)
  for_feature_blocks<4 * kL>(fn, [&](auto B, int64_t f0) {
    constexpr int kBL = B < kL ? B : kL;  // lanes per vector of this block
    if constexpr (kBL * sizeof(A) >= 16 && kBL > 1) {
      using D = hn::CappedTag<A, kBL>;
      using DP = hn::RebindToSigned<D>;
      static_assert(sizeof(hn::TFromD<DP>) == sizeof(Pos), "rows as wide as the values");
      constexpr int NV = B / kBL;
      const D d;
      const DP dp;
      hn::Vec<D> m[NV];
      [[maybe_unused]] hn::Vec<DP> idx[NV];  // rows: kRows only
      auto first_row = [&]() {
        for (int v = 0; v < NV; ++v) {
          m[v] = load_acc(d, load, elem0 + f0 + v * kBL);
          if constexpr (E::kRows) idx[v] = hn::Zero(dp);
        }
      };
      first_row();
      // With rows, a first pass assumes no NaN: a strict comparison selects value and row, and NaNs are
      // only noted (two operations per vector and row fewer than the NaN rule; measured 1.5x faster at
      // F=64); a piece that holds a NaN is redone by the exact loop below.
      bool exact = !E::kRows || known_nan;
      if constexpr (E::kRows) {
        if (!exact) {
          hn::Mask<D> nan = hn::FirstN(d, 0);
          for (int64_t r = 1; r < count; ++r) {
            const auto row = hn::Set(dp, static_cast<Pos>(r));
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) {
              const auto x = load_acc(d, load, elem0 + r * F + f0 + v * kBL);
              const auto take = E::kIsMax ? hn::Gt(x, m[v]) : hn::Lt(x, m[v]);
              m[v] = hn::IfThenElse(take, x, m[v]);
              idx[v] = hn::IfThenElse(hn::RebindMask(dp, take), row, idx[v]);
              if constexpr (kFloat) nan = hn::Or(nan, hn::IsNaN(x));
            }
          }
          if constexpr (kFloat) {
            for (int v = 0; v < NV; ++v) nan = hn::Or(nan, hn::IsNaN(m[v]));  // the first row's (never replaced)
            exact = !hn::AllFalse(d, nan);
            if (exact) first_row();
          }
        }
      }
      for (int64_t r = 1; exact && r < count; ++r) {
        const auto row = hn::Set(dp, static_cast<Pos>(r));
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {  // unrolled, so that m and idx stay in registers
          const auto x = load_acc(d, load, elem0 + r * F + f0 + v * kBL);
          auto better_or_nan = E::kIsMax ? hn::Gt(x, m[v]) : hn::Lt(x, m[v]);
          if constexpr (kFloat) better_or_nan = hn::Or(better_or_nan, hn::IsNaN(x));
          if constexpr (E::kRows) {
            auto take = better_or_nan;
            if constexpr (kFloat) take = hn::AndNot(hn::IsNaN(m[v]), better_or_nan);
            m[v] = hn::IfThenElse(take, x, m[v]);
            idx[v] = hn::IfThenElse(hn::RebindMask(dp, take), row, idx[v]);
          } else {
            m[v] = hn::IfThenElse(better_or_nan, x, m[v]);
          }
        }
      }
      HWY_ALIGN A mv[B];
      [[maybe_unused]] HWY_ALIGN Pos iv[B];
      for (int v = 0; v < NV; ++v) {
        hn::Store(m[v], d, mv + v * kBL);
        if constexpr (E::kRows) hn::Store(idx[v], dp, iv + v * kBL);
      }
      for (int f = 0; f < B; ++f) {
        if constexpr (E::kRows) {
          st[f0 + f] = {mv[f], pos0 + iv[f]};
        } else {
          st[f0 + f] = {mv[f]};
        }
      }
    } else if constexpr (E::kRows) {
      // ArgExtremumOp::step from the first row on, rows in Pos: reduce_block's step (int64 rows, a
      // no-row check) measured 12-18% slower for max over 2, 3, 13 and 37 features (2026-11-24).
      A m[B];
      Pos idx[B];
      for (int f = 0; f < B; ++f) m[f] = load(elem0 + f0 + f), idx[f] = 0;
      for (int64_t r = 1; r < count; ++r) {
        for (int f = 0; f < B; ++f) {
          const A x = load(elem0 + r * F + f0 + f);
          const bool take = (Op::better(x, m[f]) | is_nan(x)) & !is_nan(m[f]);
          m[f] = take ? x : m[f];
          idx[f] = take ? static_cast<Pos>(r) : idx[f];
        }
      }
      for (int f = 0; f < B; ++f) st[f0 + f] = {m[f], pos0 + idx[f]};
    } else {
      reduce_block<Op, 1, B>(st + f0, load, elem0 + f0, F, pos0, count);
    }
  });
}

template <class Op, class Load>
[[gnu::noinline]] void extremum_piece(typename Op::State* st, const Load& load, int64_t elem0, int64_t F,
                                      int64_t fn, int64_t pos0, int64_t count) {
#if SEGOPS_ROWS16
  if constexpr (ArgExtremumF32<Op>::value) {
    if (count <= kMaxRows16) {
      for_feature_blocks<kRows16Block>(fn, [&](auto B, int64_t f0) {
        if constexpr (B >= 16 && B >= 2 * kF32Lanes) {
          if (arg_extremum_rows16<Op, B / kF32Lanes>(st + f0, load, elem0 + f0, F, pos0, count)) return;
        }
        extremum_piece_lanes<Op>(st + f0, load, elem0 + f0, F, B, pos0, count, B >= 16);
      });
      return;
    }
  }
#endif
  extremum_piece_lanes<Op>(st, load, elem0, F, fn, pos0, count);
}

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
