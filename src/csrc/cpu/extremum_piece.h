// Min/max of a piece over several features in one pass, with the first row holding it (ArgExtremumOp) or
// the value alone (ExtremeValueOp): explicit vectors of values and row numbers (extremum_piece_lanes; the
// auto-vectoriser left blocks of fewer than 32 float features scalar), and float features in whole-row
// blocks of up to 64 with int16 row numbers first (arg_extremum_rows16.h).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cpu/arg_extremum_rows16.h"
#include "cpu/array_loads.h"
#include "cpu/extremum_reducers.h"
#include "cpu/feature_blocks.h"

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

// Min or max over rows [0, count >= 1) of fn features, in one pass, as Op::step folds them: with rows
// (ArgExtremumOp), a row replaces a feature's extreme when it is better, or when it is NaN and the
// extreme is not (the first NaN wins and stays); the value alone (ExtremeValueOp) takes any NaN. Blocks
// of whole vectors run on Lanes (the auto-vectoriser left blocks of 16 or 8 float features scalar);
// fewer features than a vector holds run as scalars (without rows: reduce_block).
// known_nan: the caller saw a NaN in these rows (the exact loop at once).
template <class Op, class Load>
inline void extremum_piece_lanes(typename Op::State* st, const Load& load, int64_t elem0, int64_t F, int64_t fn,
                                 int64_t pos0, int64_t count, [[maybe_unused]] bool known_nan = false) {
  using E = Extremum<Op>;
  using A = typename E::A;
  using L = Lanes<A>;
  using Pos = typename L::Pos;
  // 4 vectors per block: values and rows in 8 of the 16 AVX2 registers (8 vectors of values alone spill)
  for_feature_blocks<4 * L::kN>(fn, [&](auto B, int64_t f0) {
    if constexpr (SEGOPS_VECTOR_EXT && B >= L::kN) {
#if SEGOPS_VECTOR_EXT
      constexpr int NV = B / L::kN;
      typename L::V m[NV];
      [[maybe_unused]] typename L::P idx[NV];  // rows: kRows only
      auto first_row = [&] {
        for (int v = 0; v < NV; ++v) {
          load_lanes<L>(load, elem0 + f0 + v * L::kN, m[v]);
          if constexpr (E::kRows) idx[v] = typename L::P{};
        }
      };
      first_row();
      // With rows, a first pass assumes no NaN: a strict comparison selects value and row, and NaNs are
      // only noted (two operations per vector and row fewer than the NaN rule; measured 1.5x faster at
      // F=64); a piece that holds a NaN is redone by the exact loop below.
      bool exact = !E::kRows || known_nan;
      if constexpr (E::kRows) {
        if (!exact) {
          typename L::V nan{};
          for (int64_t r = 1; r < count; ++r) {
            const typename L::P row = typename L::P{} + static_cast<Pos>(r);
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) {
              typename L::V x;
              load_lanes<L>(load, elem0 + r * F + f0 + v * L::kN, x);
              const auto take = E::kIsMax ? x > m[v] : x < m[v];
              m[v] = take ? x : m[v];
              idx[v] = take ? row : idx[v];
              nan = (x != x) ? x : nan;
            }
          }
          typename L::V seen = m[0] != m[0] ? m[0] : nan;  // the first row's NaNs (never replaced)
          for (int v = 1; v < NV; ++v) seen = m[v] != m[v] ? m[v] : seen;
          for (int l = 0; l < L::kN; ++l) exact |= seen[l] != seen[l];
          if (exact) first_row();
        }
      }
      for (int64_t r = 1; exact && r < count; ++r) {
        const typename L::P row = typename L::P{} + static_cast<Pos>(r);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {  // unrolled, so that m and idx stay in registers
          typename L::V x;
          load_lanes<L>(load, elem0 + r * F + f0 + v * L::kN, x);
          const auto better_or_nan = (E::kIsMax ? x > m[v] : x < m[v]) | (x != x);
          if constexpr (E::kRows) {
            const auto take = better_or_nan & (m[v] == m[v]);
            m[v] = take ? x : m[v];
            idx[v] = take ? row : idx[v];
          } else {
            m[v] = better_or_nan ? x : m[v];
          }
        }
      }
      for (int v = 0; v < NV; ++v) {
        for (int l = 0; l < L::kN; ++l) {
          if constexpr (E::kRows) {
            st[f0 + v * L::kN + l] = {m[v][l], pos0 + idx[v][l]};
          } else {
            st[f0 + v * L::kN + l] = {m[v][l]};
          }
        }
      }
#endif
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
  if constexpr (SEGOPS_VECTOR_EXT && ArgExtremumF32<Op>::value) {
#if SEGOPS_VECTOR_EXT
    if (count <= kMaxRows16) {
      for_feature_blocks<64>(fn, [&](auto B, int64_t f0) {
        if constexpr (B >= 16) {
          if (arg_extremum_rows16<Op, B / 8>(st + f0, load, elem0 + f0, F, pos0, count)) return;
        }
        extremum_piece_lanes<Op>(st + f0, load, elem0 + f0, F, B, pos0, count, B >= 16);
      });
      return;
    }
#endif
  }
  extremum_piece_lanes<Op>(st, load, elem0, F, fn, pos0, count);
}

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
