// The expansion kernels (gather, softmax, softmax backward): Expand walks the same merge-path chunks over
// (segment ends, output rows); 32 lanes per chunk write each output row once (features or rows across lanes,
// so stores are coalesced), from its segment's data through an Fn (GatherFn, SoftmaxFn, SoftmaxBackwardFn);
// rows outside [indptr[0], indptr[-1]) are zero-filled in row blocks.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "cuda/chunk_grid.cuh"
#include "cuda/device_primitives.cuh"
#include "cuda/indptr_errors.cuh"
#include "merge_path.h"
#include "reduction_policies.h"

namespace torch_segops {
namespace cuda {

// Output element e (in [B, R, F]) from the segment element se (in [B, S, F]); V features at once.
template <typename T> struct GatherFn {
  using OutT = T;
  const T* src;
  template <int V> SEGOPS_HD void apply(int64_t, int64_t se, T (&o)[V]) const {
    load_vec<V>(src, se, o);
  }
};

// exp(x - max) / sum in A from the segment's logsumexp state, never exp(x - lse) (see StateResult). A +inf
// in the segment makes the whole segment NaN, as torch.softmax does (inf - inf).
template <typename T> struct SoftmaxFn {
  using OutT = T;
  using A = acc_t<T>;
  using Stats = StateResult<LogSumExpOp<A>>;  // the reducer of the statistics
  using State = typename Stats::State;
  const T* x;
  const State* stats;  // [B, S, F]: max and sum of exp(x - max)
  template <int V> SEGOPS_HD void apply(int64_t e, int64_t se, T (&o)[V]) const {
    A xv[V];
    State sv[V];
    load_vec<V>(x, e, xv);
    load_vec<V>(stats, se, sv);
SEGOPS_UNROLL
    for (int j = 0; j < V; ++j) {
      const A y = std::exp(xv[j] - sv[j].m) / sv[j].s;
      o[j] = static_cast<T>(sv[j].m == std::numeric_limits<A>::infinity() ? std::numeric_limits<A>::quiet_NaN() : y);
    }
  }
};

template <typename T> struct SoftmaxBackwardFn {
  using OutT = T;
  using A = acc_t<T>;
  const T* y;
  const T* g;
  const A* dot;  // [B, S, F]: segment sums of g * y
  template <int V> SEGOPS_HD void apply(int64_t e, int64_t se, T (&o)[V]) const {
    A yv[V], gv[V], dv[V];
    load_vec<V>(y, e, yv);
    load_vec<V>(g, e, gv);
    load_vec<V>(dot, se, dv);
SEGOPS_UNROLL
    for (int j = 0; j < V; ++j) o[j] = static_cast<T>(yv[j] * (gv[j] - dv[j]));
  }
};

// Thread tid = chunk * 32 + lane. Chunk ci of batch b writes the output rows of merge-path items
// [ci * W, (ci + 1) * W) and zero-fills the rows of [ci * Wz, (ci + 1) * Wz) outside [indptr[0], indptr[S]).
template <class Fn, int V> struct Expand : ChunkGrid {
  using OutT = typename Fn::OutT;
  static constexpr int kLanes = 32;
  Fn fn;
  int64_t R;               // output rows per batch
  int64_t Wz, C;           // zero rows per chunk, chunks
  int64_t nfv;             // feature vectors per row (F / V)
  OutT* out;
  Publish pub;

  SEGOPS_HD void operator()(int64_t tid) const {
    if (tid == 0) pub.run();
    const int64_t c = tid / kLanes, lane = tid - c * kLanes;
    if (c >= C) return;
    const int64_t b = c / cpb, ci = c - b * cpb;
    const int64_t* p = indptr + bmap.offset(b);
    const int64_t p0 = rd_async(p), pS = rd_async(p + S);
    SEGOPS_TRACE_USE();
    const int64_t base = iclamp(p0, 0, R), end = iclamp(pS, base, R), nnz = end - base;
    // Lanes walk (row, feature vector) pairs q = lane, lane + 32, ... of a row range in order; the pair
    // advances by (32 / nfv rows, 32 % nfv vectors) with a carry, so there is no division per item.
    const int64_t dr = kLanes / nfv, dv = kLanes - dr * nfv;
    const int64_t r_first = lane / nfv, v_first = lane - r_first * nfv;

    // 1. zero rows: [z0, z1) minus [base, end), as two row pieces walked as one
    const int64_t z0 = ci * Wz, z1 = imin(z0 + Wz, R);
    const int64_t a0 = z0, n1 = imax(imin(z1, base) - z0, 0);
    const int64_t b0 = imax(z0, end), n2 = imax(z1 - b0, 0);
    OutT z[V];
    SEGOPS_UNROLL
    for (int j = 0; j < V; ++j) z[j] = OutT(0);
    for (int64_t r = r_first, v = v_first; r < n1 + n2;) {
      const int64_t row = r < n1 ? a0 + r : b0 + (r - n1);
      store_vec<V>(out, (b * R + row) * F + v * V, z);
      r += dr;
      v += dv;
      if (v >= nfv) {
        v -= nfv;
        ++r;
      }
    }

    // 2. rows of the chunk's merge-path items, each from its segment
    const int64_t d0 = ci * W, d1 = imin(d0 + W, S + nnz);
    if (S == 0 || d0 >= S + nnz) return;
    // 8-ary searches (chunk_grid.cuh); the chunk's end lies at most d1 - d0 segments after its start
    const MergeCoord m0 = merge_path_search8(p, S, p0, nnz, d0, 0, S);
    const MergeCoord m1 = merge_path_search8(p, S, p0, nnz, d1, m0.seg, m0.seg + (d1 - d0));
    const int64_t r0 = m0.row, nrows = imax(m1.row - m0.row, 0);
    int64_t s = imin(m0.seg, S - 1);
    for (int64_t r = r_first, v = v_first; r < nrows;) {
      const int64_t rr = r0 + r;  // rows only increase along the loop: advance the segment
      while (s < S - 1 && iclamp(rd(p + s + 1), base, end) - base <= rr) ++s;
      const int64_t e = (b * R + base + rr) * F + v * V, se = (b * S + s) * F + v * V;
      OutT o[V];
      fn.template apply<V>(e, se, o);
      store_vec<V>(out, e, o);
      r += dr;
      v += dv;
      if (v >= nfv) {
        v -= nfv;
        ++r;
      }
    }
  }
};

}  // namespace cuda
}  // namespace torch_segops
