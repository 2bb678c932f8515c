// A piece reduced in one pass by its reducer's step, for the reducers whose step vectorises (sum, mean,
// mul, and the value passes of reduce_piece.h): lanes of rows for one or two features, blocks of
// features otherwise. (A float sum of one contiguous feature runs float_sum_lanes.h instead: reduce_piece.h.)
#pragma once

#include <cstdint>

#include "cpu/feature_blocks.h"

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

// One-pass reduction of a piece, for reducers whose step vectorises: the general case, out of line.
template <class Op, class Load>
[[gnu::noinline]] void reduce_piece_general(typename Op::State* st, const Load& load, int64_t elem0, int64_t F,
                                            int64_t fn, int64_t pos0, int64_t count) {
  // Short segments skip the lanes: their set-up and merge would cost more than the parallel chains
  // gain. The choice depends on the data only, never on the thread count.
  if (F == 1) {
    return count < 32 ? reduce_block<Op, 1, 1, 1>(st, load, elem0, F, pos0, count)
                      : reduce_block<Op, 8, 1, 1>(st, load, elem0, F, pos0, count);
  }
  if (F == 2) {
    return count < 16 ? reduce_block<Op, 1, 2, 2>(st, load, elem0, F, pos0, count)
                      : reduce_block<Op, 4, 2, 2>(st, load, elem0, F, pos0, count);
  }
  if (fn == 1) return reduce_block<Op, 8, 1>(st, load, elem0, F, pos0, count);
  if (fn == 2) return reduce_block<Op, 4, 2>(st, load, elem0, F, pos0, count);
  for_feature_blocks<kBlockOf<typename Op::State, 256>>(fn, [&](auto B, int64_t f) {
    reduce_block<Op, 1, B>(st + f, load, elem0 + f, F, pos0, count);
  });
}

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
