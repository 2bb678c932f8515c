// Cooperative (block) kernels: functors run by a whole block, whose threads cooperate through shared
// memory, block barriers and warp shuffles (the Blk contract below), and ReduceFlatBlock, pass 1 of the
// merge-path plan for one-feature inputs (F == 1).
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda/chunk_grid.cuh"
#include "cuda/device_primitives.cuh"
#include "cuda/indptr_errors.cuh"
#include "cuda/reduce_kernels.cuh"

namespace torch_segops {
namespace cuda {

// The Blk contract. A block kernel has `Shared` (its shared memory), kBlock threads per block and
// `template <class Blk> operator()(Blk& blk, Shared& sh)`, run by every thread of block blk.block().
// Threads talk only through Blk: sync() (a barrier of the whole block, __syncthreads) and shfl_up(v, d)
// (lane l gets lane l - d's v, its own for l < d; __shfl_up_sync over the full warp), and through `sh`
// between barriers. Every thread of a block must reach the same barriers (no thread returns early while
// others wait) and every lane of a warp the same shuffles. The GPU runs them with DeviceBlock
// (device_primitives.cuh); the host emulation (tests/cuda_emulation/block_emulation.h) runs each thread of a
// block as a fiber, phase by phase between barriers, in forward, reverse or shuffled order, and fails on a
// barrier or shuffle that not every thread reaches.

// A reduction state with a flag: "a segment starts in this range" (its left part is complete). The
// segmented-scan operator: (f1, a) then (f2, b) = (f1 | f2, f2 ? b : a (+) b); associative, so any fixed
// tree of it gives the same result as the serial fold up to the rounding of the fixed tree.
template <class Op> struct FlagState {
  typename Op::State st;
  int32_t flag;
  int32_t pad;
};

template <class Op> SEGOPS_HD FlagState<Op> seg_combine(const FlagState<Op>& a, const FlagState<Op>& b) {
  if (b.flag) return b;
  FlagState<Op> r = a;
  Op::merge(r.st, b.st);
  return r;
}

// Pass 1 of the flat plan (F == 1) as a block kernel. Block c owns merge-path chunk c (W = kBlock * items
// items of (segment ends, rows)), whose coordinates Partition found. 1. The block loads the chunk's rows
// into shared memory coalesced (consecutive threads, consecutive aligned 16-byte vectors, all of a
// thread's loads in flight together) and its segment ends (clamped offsets, coalesced). 2. Each thread
// walks kItems merge items of the tile in shared memory (a merge-path search there finds its start),
// writing the segments that start and end inside its range and keeping the partial of its first segment
// and of its last (open) one. 3. A block-wide segmented scan (warp shuffles, then the 8 warp totals through
// shared memory) gives every thread the part of its first segment held by the threads before it. 4. The
// first segments are written; the chunk's head (a segment that started in an earlier chunk) and carry (one
// still open at its end) go to the carry workspace exactly like ReduceMain's, for LevelCarry and Fixup.
template <class Op, class Load, class OutT> struct ReduceFlatBlock : ChunkGrid {
  using State = typename Op::State;
  using A = typename Load::A;
  using FS = FlagState<Op>;
  static constexpr int kBlock = 256, kWarps = kBlock / 32, kMinBlocks = 4;
  // Items per thread at most: 15 (31 KiB of shared memory) for 4-byte A, 8 for 8-byte A. Shared layout
  // (x_at / e_at are the one place to change it), chosen with the tracer's bank count over constant segment
  // lengths 0-300, alternating 0/k and random ones (docs/cuda.md, "ReduceFlatBlock's shared-memory layout"):
  // 4-byte rows XOR-swizzled inside each 128-byte line (word i at i ^ ((i >> 5) & 31)), so the staging
  // stores (lanes 4 or 8 words apart) hit 32 banks; segment ends plain, and with an odd item count the
  // threads walking a run of empty segments read ends 15 words apart (32 banks). No case of the sweep takes
  // more wavefronts than the plain 16-item layout, which SEGOPS_FLAT_PLAIN_LAYOUT restores for
  // research/gpu_model/test_model.py to compare. 8-byte rows stay plain with 8 items: no layout tried was as
  // good at every segment length.
#ifdef SEGOPS_FLAT_PLAIN_LAYOUT
  static constexpr int kItemsMax = sizeof(A) <= 4 ? 16 : 8;
  static constexpr bool kSwizzleX = false;
#else
  static constexpr int kItemsMax = sizeof(A) <= 4 ? 15 : 8;
  static constexpr bool kSwizzleX = sizeof(A) == 4;
#endif
  static constexpr int kW = kBlock * kItemsMax;
  static constexpr int kVR = Load::kVec;  // elements per 16-byte vector
  static_assert(!kSwizzleX || kW % 32 == 0, "the swizzle stays inside the array");
  struct Shared {
    A x[kW];                // the chunk's rows: row i at x_at(i)
    int32_t e[kW + 1];      // e_at(i), 1 <= i <= ns: end of segment m0.seg + i - 1, in tile rows (clamped)
    int64_t start0;         // clamped start (absolute row) of segment m0.seg
    FS warp_total[kWarps];  // the inclusive scan at each warp's last lane
    SEGOPS_HD static int xi(int i) { return kSwizzleX ? i ^ ((i >> 5) & 31) : i; }
    SEGOPS_HD A& x_at(int i) { return x[xi(i)]; }
    SEGOPS_HD const A& x_at(int i) const { return x[xi(i)]; }
    SEGOPS_HD int32_t& e_at(int i) { return e[i]; }
    SEGOPS_HD const int32_t& e_at(int i) const { return e[i]; }
  };
  Load load;
  int items;      // merge items per thread (W = kBlock * items <= kW)
  int64_t N;
  int64_t total;  // B * N (vector loads never pass it)
  bool vec_ok;    // the input pointers are aligned for 16-byte loads
  OutT* out;
  int64_t* arg;
  State* carry;    // [C]
  State* head;     // [C]
  int64_t* ckey;   // [C]
  int64_t* hkey;   // [C]
  const MergeCoord* coord;  // [B, cpb + 1]
  Validate val;

  template <class Blk> SEGOPS_HD void operator()(Blk& blk, Shared& sh) const {
    const int t = blk.thread();
    const int64_t c = blk.block();
    val.run(c * kBlock + t);
    const int64_t b = c / cpb, ci = c - b * cpb;
    const int64_t* p = indptr + bmap.offset(b);
    const int64_t p0 = rd_async(p), pS = rd_async(p + S);
    const MergeCoord m0 = rd_async(coord + b * (cpb + 1) + ci), m1 = rd_async(coord + b * (cpb + 1) + ci + 1);
    SEGOPS_TRACE_USE();
    const int64_t base = iclamp(p0, 0, N), end = iclamp(pS, base, N), nnz = end - base;
    if (ci * W >= S + nnz) {  // the whole block: nothing in this chunk
      if (t == 0) {
        wr(carry + c, Op::identity());  // (merge_run_left loads states before their keys)
        wr(ckey + c, int64_t(-1));
        wr(hkey + c, int64_t(-1));
      }
      return;
    }
    // the tile: rows [r0, r0 + nr) (relative to base), segment ends m0.seg .. m0.seg + ns - 1
    const int64_t r0 = iclamp(m0.row, 0, nnz);
    const int nr = static_cast<int>(iclamp(m1.row - r0, 0, imin(W, nnz - r0)));
    const int64_t sg0 = iclamp(m0.seg, 0, S);
    const int ns = static_cast<int>(iclamp(m1.seg - sg0, 0, imin(W - nr, S - sg0)));
    stage(blk, sh, p, b, base, end, r0, nr, sg0, ns);
    blk.sync();

    // 2. this thread's items [d, d1) of the tile's ns + nr
    const int nt = ns + nr;
    const int d = static_cast<int>(imin(int64_t(t) * items, nt)), d1 = static_cast<int>(imin(d + items, nt));
    int seg = search(sh, ns, nr, d), row = d - seg;
    FS first{Op::identity(), 0, 0};  // the partial of this thread's first segment, before its end
    int first_seg = -1;              // its index in the tile if it ends here (-1: no end in this range)
    State st = Op::identity();
    int seg_end = seg < ns ? SEGOPS_SH_LD(sh.e_at(seg + 1)) : 0;  // the end of segment seg (read once)
    for (int i = d; i < d1; ++i) {
      SEGOPS_TRACE_STEP();
      const bool is_end = seg < ns && (row >= nr || seg_end <= row);
      if (is_end) {
        if (first_seg < 0) {
          first.st = st;
          first_seg = seg;
        } else {
          write_segment(sh, st, b, sg0, seg, base + r0);
        }
        st = Op::identity();
        ++seg;
        if (seg < ns) seg_end = SEGOPS_SH_LD(sh.e_at(seg + 1));
      } else {
        Op::step(st, SEGOPS_SH_LD(sh.x_at(row)), base + r0 + row);
        ++row;
      }
    }
    // 3. inclusive segmented scan of the threads' trailing partials: flag = the thread ended a segment
    FS mine{st, first_seg >= 0 ? 1 : 0, 0};
    FS incl = mine;
    const int lane = t & 31, warp = t >> 5;
SEGOPS_UNROLL
    for (int k = 1; k < 32; k *= 2) {
      const FS up = blk.shfl_up(incl, k);
      if (lane >= k) incl = seg_combine<Op>(up, incl);
    }
    if (lane == 31) {
      SEGOPS_SH_ST(sh.warp_total[warp], incl);
    }
    const FS before_in_warp = blk.shfl_up(incl, 1);  // exclusive, inside the warp (lane 0: unused)
    blk.sync();
    FS excl{Op::identity(), 0, 0};  // everything before this thread in the block
    for (int w = 0; w < warp; ++w) excl = seg_combine<Op>(excl, SEGOPS_SH_LD(sh.warp_total[w]));
    if (lane > 0) excl = seg_combine<Op>(excl, before_in_warp);
    // 4. the first segment: the threads before this one hold its beginning
    if (first_seg >= 0) {
      State whole = excl.st;
      Op::merge(whole, first.st);
      if (first_seg == 0 && sh.start0 - base < r0) {  // started in an earlier chunk: the chunk's head
        wr(head + c, whole);
      } else {
        write_segment(sh, whole, b, sg0, first_seg, base + r0);
      }
    }
    if (t == kBlock - 1) {  // the segment open at the chunk's end (rows of it in the tile): the carry
      const FS all = seg_combine<Op>(excl, mine);
      const bool open = sg0 + ns < S && nr > 0 && (ns == 0 || sh.e_at(ns) < nr);
      wr(carry + c, open ? all.st : Op::identity());
      wr(ckey + c, open ? b * S + sg0 + ns : int64_t(-1));
      wr(hkey + c, ns > 0 && sh.start0 - base < r0 ? b * S + sg0 : int64_t(-1));
    }
  }

  // Rows (as A) and clamped offsets of the tile into shared memory; a thread's loads are in flight together.
  template <class Blk>
  SEGOPS_HD void stage(Blk& blk, Shared& sh, const int64_t* p, int64_t b, int64_t base, int64_t end, int64_t r0,
                       int nr, int64_t sg0, int ns) const {
    const int t = blk.thread();
    constexpr int kPer = (kW + kVR - 1) / kVR / kBlock + 1;  // vectors per thread (covers a misaligned tile)
    constexpr int kOff = (kW + 1 + kBlock - 1) / kBlock;     // offsets per thread
    const int64_t e0 = b * N + base + r0, e1 = e0 + nr;       // the tile's elements
    const int64_t q0 = e0 / kVR;                              // first aligned vector
    A v[kPer][kVR];
    int64_t o[kOff];
SEGOPS_UNROLL
    for (int j = 0; j < kPer; ++j) {
      const int64_t q = q0 + t + int64_t(j) * kBlock;
      if (q * kVR < e1) {
        if (vec_ok && (q + 1) * kVR <= total) {
          load.template load<kVR>(q * kVR, v[j]);
        } else {
SEGOPS_UNROLL
          for (int i = 0; i < kVR; ++i) {
            const int64_t e = q * kVR + i;
            A one[1] = {A(0)};
            if (e >= e0 && e < e1) load.template load<1>(e, one);
            v[j][i] = one[0];
          }
        }
      }
    }
SEGOPS_UNROLL
    for (int j = 0; j < kOff; ++j) {
      const int i = t + j * kBlock;
      if (i <= ns) o[j] = rd_async(p + sg0 + i);
    }
    SEGOPS_TRACE_USE();
SEGOPS_UNROLL
    for (int j = 0; j < kPer; ++j) {
      const int64_t q = q0 + t + int64_t(j) * kBlock;
SEGOPS_UNROLL
      for (int i = 0; i < kVR; ++i) {
        const int64_t e = q * kVR + i;
        if (e >= e0 && e < e1) {
          SEGOPS_SH_ST(sh.x_at(static_cast<int>(e - e0)), v[j][i]);
        }
      }
    }
SEGOPS_UNROLL
    for (int j = 0; j < kOff; ++j) {
      const int i = t + j * kBlock;
      if (i == 0) sh.start0 = iclamp(o[j], base, end);
      if (i > 0 && i <= ns) {
        SEGOPS_SH_ST(sh.e_at(i), static_cast<int32_t>(iclamp(iclamp(o[j], base, end) - base - r0, 0, nr)));
      }
    }
  }

  // The segment ends before merge-path diagonal d of the tile (the rest of the d items are rows).
  SEGOPS_HD static int search(const Shared& sh, int ns, int nr, int d) {
    int lo = static_cast<int>(imax(0, d - nr)), hi = static_cast<int>(imin(d, ns));
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (SEGOPS_SH_LD(sh.e_at(mid + 1)) <= d - mid - 1) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }

  // row0: absolute row of tile row 0
  SEGOPS_HD void write_segment(const Shared& sh, const State& st, int64_t b, int64_t sg0, int seg,
                               int64_t row0) const {
    const int64_t count = imax(seg == 0 ? SEGOPS_SH_LD(sh.e_at(1)) + row0 - SEGOPS_SH_LD(sh.start0)
                                        : SEGOPS_SH_LD(sh.e_at(seg + 1)) - SEGOPS_SH_LD(sh.e_at(seg)), 0);
    write_result<Op>(st, count, N, out, arg, b * S + sg0 + seg);
  }
};

}  // namespace cuda
}  // namespace torch_segops
