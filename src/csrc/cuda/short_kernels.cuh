// The short-segment plan (average segment length <= Tuning::short_avg_max, F > 1): ReduceShort, whose lane
// groups own whole segments and read their rows across segment borders in one pass, no carries. Segments
// longer than Tuning::short_long_rows (P) rows are left out by their group: the same launch's first threads
// (ReduceShortPieces) reduce every piece of P rows of such segments in parallel, and FinishLongSegments
// merges each one's piece states in order (through LevelCarry's levels when there are many pieces).
#pragma once

#include <cstdint>

#include "cuda/chunk_grid.cuh"
#include "cuda/device_primitives.cuh"
#include "cuda/indptr_errors.cuh"
#include "cuda/reduce_kernels.cuh"

namespace torch_segops {
namespace cuda {

// The pieces of the short-segment plan's long segments: thread tid = ((piece * tiles) + tile) * G + lane, piece k
// of batch b covers rows [k P, (k + 1) P); lanes, tiles and features per tile as in ReduceShort.
struct PieceGrid {
  const int64_t* indptr;
  BatchMap bmap;
  int64_t S, F, N;
  int64_t P, ppb;        // rows per piece, pieces per batch
  int64_t G, tiles, ft;  // lanes, tiles, features per tile
};

// The first threads of the short-segment plan's pass (ReduceShort) when N > P (Tuning::short_long_rows): the
// rows of segments longer than P (which ReduceShort's groups leave out), in pieces of P rows, read in
// parallel with the short segments; FinishLongSegments then merges each long segment's pieces in order.
// A segment of more than P rows never lies inside one piece, so a piece meets
// at most two of them: slot 0 holds the part of the one containing the piece's first row, slot 1 the part
// of the one starting inside the piece, each with its segment (b * S + s) as key, -1 when the slot is empty
// (every key is written, by the piece or the next one). A long segment's slot-0 parts are consecutive
// entries of part0, so LevelCarry combines them in groups of K like the merge-path plan's carries.
// Empty slots hold the identity and key -1, and FinishLongSegments merges a slot only when its key names the
// segment it finishes, whatever indptr holds.
template <class Op, class Load, int V> struct ReduceShortPieces : PieceGrid {
  using State = typename Op::State;
  static constexpr int kWays = 8;  // 8-ary search: 7 probes in flight per round
  Load load;
  State* part0;    // [B * ppb, F]: slot 0 of every piece
  int64_t* key0;   // [B * ppb]
  State* part1;    // [B * ppb, F]: slot 1
  int64_t* key1;   // [B * ppb]

  // Piece k finds the segment s holding its first row r0 and, when s is long, writes slot 0 of piece k (s's
  // rows in the piece) and slot 1 of piece k - 1 (s's rows there, when s starts inside piece k - 1: a long
  // segment starting inside a piece always reaches the next one's first row). The last piece also empties
  // its own slot 1, which no later piece writes.
  SEGOPS_HD void operator()(int64_t tid) const {
    const LaneSlot ls = lane_slot(tid, G, tiles, ppb, ft, V);
    const int64_t b = ls.b, k = ls.i, f0 = ls.f0;
    if (f0 >= F) return;  // idle lane of the last tile
    const int64_t* p = indptr + bmap.offset(b);
    const int64_t r0 = k * P, r1 = imin(N, r0 + P);
    // the largest s in [0, S) with p[s] <= r0 (any s in [0, S) when indptr is invalid)
    int64_t lo = 0, hi = S - 1;
    const int64_t p0 = rd_async(p), pS = rd_async(p + S);
    while (lo < hi) {
      int64_t m[kWays - 1], v[kWays - 1];
SEGOPS_UNROLL
      for (int j = 0; j < kWays - 1; ++j) {
        m[j] = lo + ((hi - lo) * (j + 1) + kWays - 1) / kWays;  // in (lo, hi]
        v[j] = rd_async(p + m[j]);
      }
      SEGOPS_TRACE_USE();
      int64_t nlo = lo, nhi = hi;
SEGOPS_UNROLL
      for (int j = 0; j < kWays - 1; ++j) {
        if (v[j] <= r0) nlo = imax(nlo, m[j]);
        else nhi = imin(nhi, m[j] - 1);
      }
      lo = nlo;
      hi = imax(nhi, nlo);  // (non-monotonic offsets could cross them)
    }
    const int64_t s = iclamp(lo, 0, S - 1);
    const int64_t s_lo_raw = rd_async(p + s), s_hi_raw = rd_async(p + s + 1);
    SEGOPS_TRACE_USE();
    const int64_t base = iclamp(p0, 0, N), end = iclamp(pS, base, N);
    const int64_t s_lo = iclamp(s_lo_raw, base, end), s_hi = iclamp(s_hi_raw, s_lo, end);
    const bool is_long = s_hi - s_lo > P && s_lo <= r0 && r0 < s_hi;
    const bool starts_before = is_long && k > 0 && s_lo > r0 - P && s_lo < r0;  // inside piece k - 1
    const int64_t at = b * ppb + k;  // piece k's entry; slot 1 of piece k - 1 is entry at - 1 of part1
    if (ls.tile == 0 && ls.lane == 0) {
      wr(key0 + at, is_long ? b * S + s : int64_t(-1));
      if (k > 0) wr(key1 + at - 1, starts_before ? b * S + s : int64_t(-1));
      if (k == ppb - 1) wr(key1 + at, int64_t(-1));
    }
    const LaneFetch<Load, V> fetch{load, b * N * F + f0, F};
    State st[V];
    if (is_long) {
      reduce_rows<Op, V>(st, fetch, r0, imin(s_hi, r1) - r0);
      store_states<V>(part0, at * F + f0, st);
    } else {
      store_identity<Op, V>(part0, at * F + f0);
    }
    if (starts_before) {
      reduce_rows<Op, V>(st, fetch, s_lo, r0 - s_lo);
      store_states<V>(part1, (at - 1) * F + f0, st);
    } else if (k > 0) {
      store_identity<Op, V>(part1, (at - 1) * F + f0);
    }
    if (k == ppb - 1) store_identity<Op, V>(part1, at * F + f0);
  }
};


// Pass 1 of the short-segment plan (average segment length <= Tuning::short_avg_max, F > 1): no chunks,
// no carries. Thread tid = ((group * tiles) + tile) * G + lane; group gi of batch b owns the segments
// [gi * Sg, (gi + 1) * Sg) whole, in batches of kSegBatch. A batch's offsets are loaded together with the
// rows of the batch before (one round), and its rows are read kU at a time across segment borders (the
// loads of a round are independent of where segments end), so a run of 8-row segments costs a round per
// kU rows and nothing per segment. Offsets are clamped to a non-decreasing sequence inside [base, end].
template <class Op, class Load, class OutT, int V> struct ReduceShort {
  using State = typename Op::State;
  using A = typename Load::A;
  static constexpr int kSegBatch = 8;
  static constexpr int kU = V >= 8 ? 4 : 8;  // rows in flight per thread (16-byte loads: 64-128 B per lane)
  const int64_t* indptr;
  BatchMap bmap;
  int64_t S, F;
  int64_t Sg, gpb;       // segments per group, groups per batch
  int64_t G, tiles, ft;  // lanes, tiles, features per tile
  Load load;
  int64_t N;
  OutT* out;
  int64_t* arg;
  Validate val;
  // Segments of more than long_rows rows are skipped (their rows not read, their result not written): the
  // first piece_threads threads run `pieces` instead, and FinishLongSegments completes them.
  int64_t long_rows;
  int64_t piece_threads;
  ReduceShortPieces<Op, Load, V> pieces;

  SEGOPS_HD void operator()(int64_t tid) const {
    if (tid < piece_threads) {
      pieces(tid);
      return;
    }
    tid -= piece_threads;
    val.run(tid);
    const LaneSlot ls = lane_slot(tid, G, tiles, gpb, ft, V);
    const int64_t b = ls.b, gi = ls.i, f0 = ls.f0;
    if (f0 >= F) return;  // idle lane of the last tile
    const int64_t s_begin = gi * Sg, s_stop = imin(S, s_begin + Sg);
    if (s_begin >= s_stop) return;
    const int64_t* p = indptr + bmap.offset(b);
    const int64_t p0 = rd_async(p), pS = rd_async(p + S);
    int64_t nxt[kSegBatch + 1];
    load_ends(p, s_begin, s_stop, nxt);
    SEGOPS_TRACE_USE();
    const int64_t base = iclamp(p0, 0, N), end = iclamp(pS, base, N);
    const LaneFetch<Load, V> fetch{load, b * N * F + f0, F};
    int64_t lo = iclamp(nxt[0], base, end);  // clamped start of the current batch
    for (int64_t s0 = s_begin; s0 < s_stop; s0 += kSegBatch) {
      const int nseg = static_cast<int>(imin(kSegBatch, s_stop - s0));
      // clamped, non-decreasing ends of the batch's segments (e[0] = start), repeated past the last one so that
      // e[kSegBatch] is the batch's end: indexed by constants only, e stays in registers (e[nseg] put it in the
      // stack frame: 72-104 bytes in every instance, a local store per end and a load per use)
      int64_t e[kSegBatch + 1];
      e[0] = lo;
SEGOPS_UNROLL
      for (int k = 1; k <= kSegBatch; ++k) e[k] = k <= nseg ? iclamp(nxt[k], e[k - 1], end) : e[k - 1];
      const int64_t e_end = e[kSegBatch];
      lo = e_end;
      // the next batch's offsets travel with this batch's first rows
      if (s0 + kSegBatch < s_stop) load_ends(p, s0 + kSegBatch, s_stop, nxt);
      int k = 0;                           // current segment of the batch
      int64_t e_k = e[0], hi = e[1];       // its clamped start and end
      State st[V];
SEGOPS_UNROLL
      for (int v = 0; v < V; ++v) st[v] = Op::identity();
      for (int64_t r = e[0]; r < e_end; r += kU) {
        if (hi - e_k > long_rows) {  // a long segment is not read here (ReduceShortPieces)
          r = hi;
          if (r >= e_end) break;
        }
        const int64_t n = imin(kU, e_end - r);
        typename LaneFetch<Load, V>::Raw x[kU];  // (as loaded: 16-bit values two to a register)
SEGOPS_UNROLL
        for (int u = 0; u < kU; ++u) {
          if (u < n) fetch.raw(r + u, x[u]);
        }
        SEGOPS_TRACE_USE();
SEGOPS_UNROLL
        for (int u = 0; u < kU; ++u) {
          if (u >= n) break;
          const int64_t row = r + u;
          while (row >= hi) {  // k < nseg - 1 here: row < e_end
            flush(st, b, s0 + k, hi - e_k, f0);
            ++k;
            e_k = hi;
            hi = pick(e, k + 1);
          }
          A tmp[V];
          const A(&a)[V] = fetch.values(x[u], tmp);
SEGOPS_UNROLL
          for (int v = 0; v < V; ++v) Op::step(st[v], a[v], row);
        }
      }
      SEGOPS_TRACE_USE();  // (the prefetched offsets, when the batch had no rows)
      for (; k < nseg; ++k) {
        flush(st, b, s0 + k, hi - e_k, f0);
        e_k = hi;
        hi = pick(e, k + 2);
      }
    }
  }

  // e[i] without dynamic register indexing (i <= kSegBatch; larger i: e[kSegBatch])
  SEGOPS_HD static int64_t pick(const int64_t (&e)[kSegBatch + 1], int i) {
    int64_t r = e[0];
SEGOPS_UNROLL
    for (int j = 1; j <= kSegBatch; ++j) r = j == i ? e[j] : r;
    return i > kSegBatch ? e[kSegBatch] : r;
  }

  // o[k] = p[min(s + k, s_stop)], k = 0..kSegBatch: independent loads, in flight together.
  SEGOPS_HD void load_ends(const int64_t* p, int64_t s, int64_t s_stop, int64_t (&o)[kSegBatch + 1]) const {
SEGOPS_UNROLL
    for (int k = 0; k <= kSegBatch; ++k) o[k] = rd_async(p + imin(s + k, s_stop));
  }

  // Writes segment s (unless it is long: FinishLongSegments writes it) and starts the next one.
  SEGOPS_HD void flush(State (&st)[V], int64_t b, int64_t s, int64_t count, int64_t f0) const {
    if (count <= long_rows) write_results<Op, V>(st, count, N, out, arg, (b * S + s) * F + f0);
SEGOPS_UNROLL
    for (int v = 0; v < V; ++v) st[v] = Op::identity();
  }
};

// Pass 3 of the short-segment plan when N > P (after LevelCarry over part0, when there are more than K pieces):
// the piece holding a long segment's last row (its slot 0 names a segment ending inside the piece) merges the
// segment's parts right to left, the later pieces' slot 0 through the levels (at most K entries per level,
// as the merge-path Fixup does), then slot 1 of piece lo / P unless the segment starts at that piece's first
// row, and writes the result. Threads as in ReduceShortPieces; a slot whose key is not the segment counts as
// empty.
template <class Op, class OutT, int V> struct FinishLongSegments : PieceGrid {
  using State = typename Op::State;
  KeyedLevels<State> lv;  // level 0: ReduceShortPieces' part0 / key0
  const State* part1;
  const int64_t* key1;
  OutT* out;
  int64_t* arg;

  SEGOPS_HD void operator()(int64_t tid) const {
    const LaneSlot ls = lane_slot(tid, G, tiles, ppb, ft, V);
    const int64_t b = ls.b, k = ls.i, f0 = ls.f0;
    if (f0 >= F) return;
    const int64_t c = b * ppb + k;
    const int64_t sk = rd(lv.key[0] + c);
    if (sk < 0) return;  // no long segment holds the piece's first row
    const int64_t s = iclamp(sk - b * S, 0, S - 1);
    const int64_t* p = indptr + bmap.offset(b);
    const int64_t p0 = rd_async(p), pS = rd_async(p + S), lo_raw = rd_async(p + s), hi_raw = rd_async(p + s + 1);
    SEGOPS_TRACE_USE();
    const int64_t base = iclamp(p0, 0, N), end = iclamp(pS, base, N);
    const int64_t lo = iclamp(lo_raw, base, end), hi = iclamp(hi_raw, lo, end);
    if (hi <= lo || (hi - 1) / P != k) return;  // the segment goes on in a later piece
    const int64_t c0 = b * ppb + lo / P;
    const bool first_in_slot1 = lo % P != 0;
    State acc[V];
    load_states<V>(lv.carry[0], c * F + f0, acc);
    merge_levels_left<Op, V>(lv, c - 1, sk, F, f0, acc);
    if (first_in_slot1 && c0 < c) {
      const int64_t k1 = rd_async(key1 + c0);
      State x[V];
      load_states<V>(part1, c0 * F + f0, x);
      SEGOPS_TRACE_USE();
      if (k1 == sk) merge_before<Op, V>(x, acc);
    }
    write_results<Op, V>(acc, hi - lo, N, out, arg, (b * S + s) * F + f0);
  }
};

}  // namespace cuda
}  // namespace torch_segops
