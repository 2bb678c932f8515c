// Rows folded into a block of features: the loops every piece kernel is made of (reduce_block, the
// reducer's own step; for_feature_blocks, the blocks that cover a piece's features).
#pragma once

#include <cstdint>
#include <type_traits>

#include "vec_math.h"

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

// Folds rows [0, count) into st[0, FB). Row r's features start at elem0 + r * F; its absolute position
// along dim is pos0 + r. K lanes take rows round-robin (K * FB accumulators on the stack).
// kStride > 0 fixes the row stride at compile time.
template <class Op, int K, int FB, int kStride = 0, class Load>
inline void reduce_block(typename Op::State* st, const Load& load, int64_t elem0, int64_t F_rt, int64_t pos0,
                         int64_t count) {
  const int64_t F = kStride > 0 ? kStride : F_rt;
  typename Op::State acc[K * FB];
  for (int i = 0; i < K * FB; ++i) acc[i] = Op::identity();
  int64_t r = 0;
  for (; r + K <= count; r += K) {
    for (int k = 0; k < K; ++k) {
      const int64_t e = elem0 + (r + k) * F;
      for (int f = 0; f < FB; ++f) Op::step(acc[k * FB + f], load(e + f), pos0 + r + k);
    }
  }
  for (; r < count; ++r) {
    for (int f = 0; f < FB; ++f) Op::step(acc[f], load(elem0 + r * F + f), pos0 + r);
  }
  for (int f = 0; f < FB; ++f) {
    st[f] = acc[f];
    for (int k = 1; k < K; ++k) Op::merge(st[f], acc[k * FB + f]);
  }
}

// Calls body(std::integral_constant<int, B>{}, f) for feature blocks [f, f + B) that cover [0, fn):
// B = FB while a whole block fits, then FB / 2, ..., 1. A body keeps a block's per-feature values in
// registers for a whole piece (arrays in memory would make every row wait on the previous row's
// store). Every feature still sees its rows in order, so the block sizes never change a result.
template <int FB, class Body>
inline void for_feature_blocks(int64_t fn, const Body& body, int64_t f = 0) {
  for (; f + FB <= fn; f += FB) body(std::integral_constant<int, FB>{}, f);
  if constexpr (FB > 1) {
    if (f < fn) for_feature_blocks<FB / 2>(fn, body, f);
  }
}

// Features per block: `bytes` of per-feature values in registers (256: eight AVX2 registers).
template <typename V, int bytes> constexpr int kBlockOf = sizeof(V) <= bytes ? bytes / sizeof(V) : 1;

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
