// Float sums of many short segments of one feature (F == 1: a segment is a run of consecutive
// elements), the case where a horizontal sum per segment would cost as much as the additions. Each
// segment's rows go into the 8 lanes of one octet (float_sum_lanes.h): its first 32 rows branch-free
// (sum_window), the rest (segments longer than 32 rows) in a second loop over the batch; a batch of 8
// segments then shares one transposing horizontal sum. A segment's result depends on its length only,
// never on its place in a batch or on the target.
//
// A 512-bit version (16 lanes, masked loads, 64 rows without a branch) was measured on this project's
// AMD EPYC machines at 3x slower than this one (18 vs 5.6 ms for 1M segments of 20 rows, one thread,
// 2026-11-23), so the sums keep 8 lanes on every target.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cpu/float_sum_lanes.h"
#include "reduction_policies.h"

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

// Whether sum_segments_f1 serves Op over this load: a float sum or mean of float, bfloat16 or float16.
template <class Op, class Load> constexpr bool kSumsSegmentsF1 = kAddsFloats<Op> && kFloatArray<Load>;

// Float sums of whole segments [s, s_end) of one feature: segment k's rows are the elements
// [elem_base + p[k], elem_base + p[k + 1]). emit(k, sum, count) receives each segment in order.
template <class Load, class Emit>
inline void sum_segments_f1(const Load& load, const int64_t* p, int64_t s, int64_t s_end, int64_t elem_base,
                            const Emit& emit) {
  constexpr int kBatch = 8;
  Octet v[kBatch];
  HWY_ALIGN float sums[kBatch];
  // Every segment's first 32 rows, branch-free; then the rest of the longer segments (a branch per
  // batch, not per segment, for lengths that vary at random).
  auto lanes = [&](auto end_readable, int64_t s0, int m) {
    constexpr bool kEnd = decltype(end_readable)::value;
    int longer[kBatch];
    int nlonger = 0;
    for (int k = 0; k < m; ++k) {
      const int64_t e = elem_base + p[s0 + k], n = p[s0 + k + 1] - p[s0 + k];
      v[k] = sum_window<kEnd>(load.x + e, n < 32 ? n : 32, load.n - e);
      longer[nlonger] = k;
      nlonger += n > 32;
    }
    for (int j = 0; j < nlonger; ++j) {
      const int k = longer[j];
      const int64_t e = elem_base + p[s0 + k] + 32;
      const int64_t rest = p[s0 + k + 1] - p[s0 + k] - 32;
      v[k] = octet_add(v[k], sum_lanes<kEnd>(load.x + e, rest, load.n - e));
    }
  };
  auto batch = [&](int64_t s0, int m) {
    // Checked once per batch: every segment's last step ends before the batch's end + 32.
    if (elem_base + p[s0 + m] + 32 <= load.n) {
      lanes(std::true_type{}, s0, m);
    } else {
      lanes(std::false_type{}, s0, m);
    }
    octet_totals8(v, sums);
    for (int k = 0; k < m; ++k) emit(s0 + k, sums[k], p[s0 + k + 1] - p[s0 + k]);
  };
  for (; s + kBatch <= s_end; s += kBatch) batch(s, kBatch);
  if (s < s_end) {
    for (int k = 0; k < kBatch; ++k) v[k] = octet_zero();
    batch(s, static_cast<int>(s_end - s));
  }
}

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
