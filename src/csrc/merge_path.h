// Merge-path partitioning of a CSR segmentation (Merrill & Garland, "Merge-based parallel sparse
// matrix-vector multiplication", SC'16): the work list is the merge of the S segment ends with the
// nnz rows, so a fixed number of items per chunk balances many tiny, empty and huge segments alike.
#pragma once

#include <cstdint>

#include "reduction_policies.h"  // SEGOPS_HD

// The CUDA host tracer (research/gpu_model/model.py) counts the search's reads; nothing elsewhere.
#ifndef SEGOPS_TRACE_INDEX
#define SEGOPS_TRACE_INDEX(p) ((void)0)
#endif

namespace torch_segops {

struct MergeCoord {
  int64_t seg;  // segment ends consumed before this point
  int64_t row;  // rows consumed before this point (relative to indptr[0])
};

// Split point of diagonal `diag` (0 <= diag <= S + nnz) with its segment count searched in [lo, hi).
// `indptr` points at the S + 1 offsets of one batch; base = indptr[0]. Segment end k sits before row j
// in the merge iff indptr[k + 1] - base <= j.
SEGOPS_HD MergeCoord merge_path_search_in(const int64_t* indptr, int64_t nnz, int64_t diag, int64_t lo,
                                          int64_t hi) {
  const int64_t base = indptr[0];
  lo = diag - nnz > lo ? diag - nnz : lo;
  hi = diag < hi ? diag : hi;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    SEGOPS_TRACE_INDEX(indptr + mid + 1);
    if (indptr[mid + 1] - base <= diag - mid - 1) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return {lo, diag - lo};
}

SEGOPS_HD MergeCoord merge_path_search(const int64_t* indptr, int64_t S, int64_t nnz, int64_t diag) {
  return merge_path_search_in(indptr, nnz, diag, 0, S);
}

// The same, given the split point `from` of an earlier diagonal: the path moves right or down one
// step per item, so only the (diag - from diagonal) segments after from.seg need a look.
SEGOPS_HD MergeCoord merge_path_search_from(const int64_t* indptr, int64_t S, int64_t nnz, int64_t diag,
                                            MergeCoord from) {
  const int64_t reach = from.seg + (diag - from.seg - from.row);
  return merge_path_search_in(indptr, nnz, diag, from.seg, reach < S ? reach : S);
}

// The same as merge_path_search_from, probing first at from.seg + hint (the caller's guess of how many
// segment ends the step passes: the previous chunk's count) and then at doubling distances from it
// before a binary search of the bracket found. A steady segmentation needs a few probes in cache lines
// next to the guess, instead of a binary search over the whole reach whose every probe misses the cache.
SEGOPS_HD MergeCoord merge_path_search_near(const int64_t* indptr, int64_t S, int64_t nnz, int64_t diag,
                                            MergeCoord from, int64_t hint) {
  const int64_t base = indptr[0];
  const int64_t reach = from.seg + (diag - from.seg - from.row);
  int64_t lo = diag - nnz > from.seg ? diag - nnz : from.seg;
  int64_t hi = reach < S ? reach : S;
  hi = diag < hi ? diag : hi;
  // The answer lies in [lo, hi]; segment end k comes before the split iff k < answer.
  auto before = [&](int64_t k) { return indptr[k + 1] - base <= diag - k - 1; };
  int64_t g = from.seg + (hint > 0 ? hint : 0);
  g = g < lo ? lo : g > hi ? hi : g;
  if (g < hi && before(g)) {
    lo = g + 1;
    for (int64_t step = 1; g + step < hi; step *= 2) {
      if (!before(g + step)) {
        hi = g + step;
        break;
      }
      lo = g + step + 1;
    }
  } else {
    hi = g;
    for (int64_t step = 1; g - step >= lo; step *= 2) {
      if (before(g - step)) {
        lo = g - step + 1;
        break;
      }
      hi = g - step;
    }
  }
  return merge_path_search_in(indptr, nnz, diag, lo, hi);
}

}  // namespace torch_segops
