// How the kernels divide the work: the indptr row of each batch (BatchMap), the merge-path chunks of the
// reduction and expansion kernels over (segment ends, rows) (ChunkGrid; merge_path.h) and the pass that
// finds every chunk border once (Partition), and the slot of a thread in a kernel whose lane groups own a
// unit of work and a tile of features (lane_slot).
#pragma once

#include <cstdint>

#include "cuda/device_primitives.cuh"
#include "merge_path.h"

namespace torch_segops {
namespace cuda {

// ---- batch -> indptr row ---------------------------------------------------------------------------

// Maps batch b (row-major over src's leading dims) to the element offset of its indptr row. Leading
// dims where indptr has size 1 broadcast (stride 0). Built on the host with adjacent dims collapsed.
struct BatchMap {
  static constexpr int kMaxDims = 12;
  int ndims = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
  SEGOPS_HD int64_t offset(int64_t b) const {
    int64_t off = 0;
SEGOPS_UNROLL
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d < ndims) {
        const int64_t q = b / size[d];
        off += (b - q * size[d]) * stride[d];
        b = q;
      }
    }
    return off;
  }
};

// The segments of every batch and their merge-path chunking, shared by the reduction and expansion kernels:
// indptr rows through bmap, S segments of F features, W (segment ends, rows) items per chunk, cpb chunks
// per batch.
struct ChunkGrid {
  const int64_t* indptr;
  BatchMap bmap;
  int64_t S, F;
  int64_t W, cpb;
};

// The merge-path split of diagonal diag with its segment count searched in [lo, hi] (merge_path_search's for a
// valid indptr, inside the diagonal's bounds for any indptr; base = indptr[0], nnz: the clamped row count), as an
// 8-ary search: log8 of the range in rounds instead of log2. A round's 7 probe addresses do not depend on each
// other's values; whether their loads overlap is the compiler's choice (nvcc 13.0 SASS: sm_75 issues all 7
// before the first use, sm_90 only 2 -- measured 2026-11-27, not yet forced).
SEGOPS_HD MergeCoord merge_path_search8(const int64_t* p, int64_t S, int64_t base, int64_t nnz, int64_t diag,
                                        int64_t lo, int64_t hi) {
  constexpr int kWays = 8;
  lo = imax(lo, diag - nnz);
  hi = imin(imin(hi, diag), S);  // the answer lies in [lo, hi]
  while (lo < hi) {
    const int64_t step = ceil_div(hi - lo, kWays);
    int64_t v[kWays - 1];
SEGOPS_UNROLL
    for (int k = 0; k < kWays - 1; ++k) {
      const int64_t mid = imin(lo + (k + 1) * step - 1, hi - 1);
      v[k] = rd_async(p + mid + 1);
    }
    SEGOPS_TRACE_USE();
    // the first probe where "segment end mid comes before row diag - mid" fails bounds the answer
    // branch-free (a branch per probe let nvcc issue a probe's load behind the previous one's test): for a
    // valid indptr the test holds for a prefix of the probes, so the largest passing and the smallest
    // failing probe are the first failing probe's neighbours
    int64_t nlo = lo, nhi = hi;
SEGOPS_UNROLL
    for (int k = 0; k < kWays - 1; ++k) {
      const int64_t mid = imin(lo + (k + 1) * step - 1, hi - 1);
      if (v[k] - base <= diag - mid - 1) {
        nlo = imax(nlo, mid + 1);
      } else {
        nhi = imin(nhi, mid);
      }
    }
    lo = nlo;  // the range shrinks to at most ceil((hi - lo) / kWays) - 1 + 1 candidates every round
    hi = imax(nhi, nlo);  // (the probes of an invalid indptr can disagree)
  }
  return {lo, diag - lo};
}

// Pass 0. Thread tid = b * (cpb + 1) + ci: the merge-path coordinate of chunk border ci of batch b, searched
// once here instead of twice by every thread of the chunk (a search is a chain of dependent loads).
struct Partition : ChunkGrid {
  int64_t N;
  MergeCoord* coord;  // [B, cpb + 1]
  SEGOPS_HD void operator()(int64_t tid) const {
    const int64_t b = tid / (cpb + 1), ci = tid - b * (cpb + 1);
    const int64_t* p = indptr + bmap.offset(b);
    const int64_t p0 = rd_async(p), pS = rd_async(p + S);
    SEGOPS_TRACE_USE();
    const int64_t base = iclamp(p0, 0, N), end = iclamp(pS, base, N), nnz = end - base;
    wr(coord + tid, merge_path_search8(p, S, p0, nnz, imin(ci * W, S + nnz), 0, S));
  }
};

// Thread tid = ((group * tiles) + tile) * G + lane of a kernel whose groups of G lanes own a unit of work
// (group i of batch b, per_batch groups a batch) and a tile of ft features, V per lane from f0.
struct LaneSlot {
  int64_t group, tile, lane, b, i, f0;
};
SEGOPS_HD LaneSlot lane_slot(int64_t tid, int64_t G, int64_t tiles, int64_t per_batch, int64_t ft, int V) {
  LaneSlot s;
  const int64_t unit = tid / G;
  s.lane = tid - unit * G;
  s.group = unit / tiles;
  s.tile = unit - s.group * tiles;
  s.b = s.group / per_batch;
  s.i = s.group - s.b * per_batch;
  s.f0 = s.tile * ft + s.lane * V;
  return s;
}

}  // namespace cuda
}  // namespace torch_segops
