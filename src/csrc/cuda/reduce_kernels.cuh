// The reduction kernels of the merge-path plan and what every reduction kernel shares. Shared: the element
// loaders (src, or grad * out for the softmax backward), the row fetcher of a lane, reduce_rows (rows folded
// into states with several loads in flight) and the result writers. The merge-path plan (docs/cuda.md,
// "Kernels"): Partition (chunk_grid.cuh) finds the chunk borders; ReduceMain (F > 1) or ReduceFlatBlock
// (F == 1, block_kernels.cuh) reduces each chunk, writing the segments that start and end in it and leaving
// a carry (a segment open at the chunk's end) and a head (one that ends in it); LevelCarry combines the
// carries in fixed groups of K, level by level; Fixup merges a crossing segment's carries right to left
// and writes it. The order of every floating-point operation depends only on the shapes.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/chunk_grid.cuh"
#include "cuda/device_primitives.cuh"
#include "cuda/indptr_errors.cuh"
#include "cuda_plans.h"
#include "merge_path.h"
#include "reduction_policies.h"

namespace torch_segops {
namespace cuda {

// ---- element loaders (reductions read src, or grad * out for the softmax backward) ------------------

// The V features of a row as a lane holds them between their load and their use: in T where that takes fewer
// registers than A (16-bit inputs and int32 ones, more than one feature: converted where they are used, so that
// the rows in flight do not hold A-wide copies), else in A (converted at the load, the code as it was: an A[V]
// used in place; a copy of it moved the float sum's ReduceMain from 80 to 99 registers, 3 -> 2 blocks per SM).
template <typename T, typename A, int V>
using Loaded = std::conditional_t<(sizeof(T) < sizeof(A) && V > 1), Vec<T, V>, A[V]>;

// The accumulation values of loaded ones: themselves (A[V]), or converted into tmp (Vec<T, V>).
template <typename A, int V> SEGOPS_HD const A (&to_acc(const A (&r)[V], A (&)[V]))[V] { return r; }
template <typename A, typename T, int V> SEGOPS_HD const A (&to_acc(const Vec<T, V>& r, A (&tmp)[V]))[V] {
SEGOPS_UNROLL
  for (int j = 0; j < V; ++j) tmp[j] = static_cast<A>(r.v[j]);
  return tmp;
}

template <typename T> struct SrcLoad {
  using A = acc_t<T>;
  static constexpr int kVec = static_cast<int>(16 / sizeof(T));  // elements per 16-byte load
  const T* x;
  template <int V> SEGOPS_HD void load(int64_t e, A (&o)[V]) const { load_vec<V>(x, e, o); }
  template <int V> using Raw = Loaded<T, A, V>;
  template <int V> SEGOPS_HD void load_raw(int64_t e, A (&r)[V]) const { load_vec<V>(x, e, r); }
  template <int V> SEGOPS_HD void load_raw(int64_t e, Vec<T, V>& r) const { load_vec<V>(x, e, r.v); }
};

// g * y, multiplied at the load (the product takes half the registers of its two factors).
template <typename T> struct ProdLoad {
  using A = acc_t<T>;
  static constexpr int kVec = static_cast<int>(16 / sizeof(T));
  const T* g;
  const T* y;
  template <int V> SEGOPS_HD void load(int64_t e, A (&o)[V]) const {
    A a[V], b[V];
    load_vec<V>(g, e, a);
    load_vec<V>(y, e, b);
SEGOPS_UNROLL
    for (int j = 0; j < V; ++j) o[j] = a[j] * b[j];
  }
  template <int V> using Raw = A[V];
  template <int V> SEGOPS_HD void load_raw(int64_t e, A (&r)[V]) const { load<V>(e, r); }
};

// ---- reduction kernels -----------------------------------------------------------------------------

// Row fetchers: raw(row, x) loads the features of `row` (absolute along dim) this thread owns (as the loader
// holds them, Loaded), values(x, tmp) gives their V accumulation values where they are used (16-bit inputs stay
// packed two to a register while their loads are in flight: ReduceMain's 16-bit logsumexp at V = 8 spilled, 40
// bytes of stack, holding them as floats).
template <class Load, int V> struct LaneFetch {
  using A = typename Load::A;
  using Raw = typename Load::template Raw<V>;
  Load load;
  int64_t row_elem0;  // (b * N) * F + f0
  int64_t F;
  SEGOPS_HD void raw(int64_t row, Raw& x) const { load.template load_raw<V>(e(row), x); }
  SEGOPS_HD static const A (&values(const Raw& r, A (&tmp)[V]))[V] { return to_acc(r, tmp); }
  SEGOPS_HD int64_t e(int64_t row) const { return row_elem0 + row * F; }
};

// Folds rows [row0, row0 + count) into st[V]; positions are absolute rows along dim.
template <class Op, int V, class Fetch>
SEGOPS_HD void reduce_rows(typename Op::State (&st)[V], Fetch& fetch, int64_t row0, int64_t count) {
  using A = typename Fetch::A;
SEGOPS_UNROLL
  for (int v = 0; v < V; ++v) st[v] = Op::identity();
  int64_t r = 0;
  // Rows loaded before they are folded in: independent loads in flight per thread (the memory model,
  // research/gpu_model/model.py: a thread's rounds of loads, not its bytes, set the time of short segments).
  // Wide vectors move 16 bytes per load.
  constexpr int kU = V >= 4 ? 4 : 8;
  for (; r + kU <= count; r += kU) {
    typename Fetch::Raw x[kU];
SEGOPS_UNROLL
    for (int u = 0; u < kU; ++u) fetch.raw(row0 + r + u, x[u]);
    SEGOPS_TRACE_USE();
SEGOPS_UNROLL
    for (int u = 0; u < kU; ++u) {
      A tmp[V];
      const A(&a)[V] = Fetch::values(x[u], tmp);
SEGOPS_UNROLL
      for (int v = 0; v < V; ++v) Op::step(st[v], a[v], row0 + r + u);
    }
  }
  if (r < count) {  // the last count % kU rows: one more round, not one per row
    typename Fetch::Raw x[kU];
SEGOPS_UNROLL
    for (int u = 0; u < kU; ++u) {
      if (r + u < count) fetch.raw(row0 + r + u, x[u]);
    }
    SEGOPS_TRACE_USE();
SEGOPS_UNROLL
    for (int u = 0; u < kU; ++u) {
      if (r + u < count) {
        A tmp[V];
        const A(&a)[V] = Fetch::values(x[u], tmp);
SEGOPS_UNROLL
        for (int v = 0; v < V; ++v) Op::step(st[v], a[v], row0 + r + u);
      }
    }
  }
}

template <class Op, class OutT>
SEGOPS_HD void write_result(const typename Op::State& st, int64_t count, int64_t N, OutT* out, int64_t* arg,
                            int64_t o) {
  wr(out + o, static_cast<OutT>(Op::finalize(st, count)));
  if constexpr (Op::kHasArg) {
    if (arg != nullptr) wr(arg + o, count > 0 ? st.arg : N);
  }
}

template <class Op, int V, class OutT>
SEGOPS_HD void write_results(const typename Op::State (&st)[V], int64_t count, int64_t N, OutT* out, int64_t* arg,
                             int64_t o) {
  OutT r[V];
SEGOPS_UNROLL
  for (int v = 0; v < V; ++v) r[v] = static_cast<OutT>(Op::finalize(st[v], count));
  store_vec<V>(out, o, r);
  if constexpr (Op::kHasArg) {
    if (arg != nullptr) {
SEGOPS_UNROLL
      for (int v = 0; v < V; ++v) wr(arg + o + v, count > 0 ? st[v].arg : N);
    }
  }
}


// Pass 1 (F > 1, long segments on average). Thread tid = ((chunk * tiles) + tile) * G + lane.
template <class Op, class Load, class OutT, int V>
struct ReduceMain : ChunkGrid {
  using State = typename Op::State;
  Load load;
  int64_t N;
  int64_t G, tiles, ft;  // lanes, tiles, features per tile
  OutT* out;
  int64_t* arg;
  State* carry;    // [C, F]
  State* head;     // [C, F]
  int64_t* ckey;   // [C]: global segment (b * S + s) of carry[c], -1 if none
  int64_t* hkey;   // [C]
  const MergeCoord* coord;  // [B, cpb + 1] (Partition)
  Validate val;

  SEGOPS_HD void operator()(int64_t tid) const {
    val.run(tid);
    const LaneSlot ls = lane_slot(tid, G, tiles, cpb, ft, V);
    const int64_t c = ls.group, b = ls.b, ci = ls.i, f0 = ls.f0;
    if (f0 >= F) return;  // idle lane of the last tile (never the key writer: tile 0 lane 0 has f0 = 0)
    const bool key_writer = ls.tile == 0 && ls.lane == 0;
    const int64_t* p = indptr + bmap.offset(b);
    // four independent loads, in flight together
    const int64_t p0 = rd_async(p), pS = rd_async(p + S);
    const MergeCoord m0 = rd_async(coord + b * (cpb + 1) + ci), m1 = rd_async(coord + b * (cpb + 1) + ci + 1);
    SEGOPS_TRACE_USE();
    const int64_t base = iclamp(p0, 0, N), end = iclamp(pS, base, N), nnz = end - base;
    const int64_t d0 = ci * W;
    int64_t ck = -1, hk = -1;
    if (d0 < S + nnz) {
      LaneFetch<Load, V> fetch{load, b * N * F + f0, F};
      walk(fetch, p, b, c, f0, base, end, m0, m1, ck, hk);
    }
    if (ck < 0) store_identity<Op, V>(carry, c * F + f0);  // (merge_run_left loads states before their keys)
    if (key_writer) {
      wr(ckey + c, ck);
      wr(hkey + c, hk);
    }
  }

  template <class Fetch>
  SEGOPS_HD void walk(Fetch& fetch, const int64_t* p, int64_t b, int64_t c, int64_t f0, int64_t base, int64_t end,
                      MergeCoord m0, MergeCoord m1, int64_t& ck, int64_t& hk) const {
    const int64_t s_end = imin(m1.seg, S - 1);
    if (m0.seg > s_end) return;
    // p[s] and p[s + 1] of the current segment; p[s + 2] is loaded with the current segment's rows, so a
    // segment costs no round of its own
    int64_t lo_raw = rd_async(p + m0.seg), hi_raw = rd_async(p + m0.seg + 1);
    for (int64_t s = m0.seg; s <= s_end; ++s) {
      SEGOPS_TRACE_USE();
      const int64_t nxt = s + 2 <= S ? rd_async(p + s + 2) : hi_raw;
      const int64_t seg_lo = iclamp(lo_raw, base, end) - base, seg_hi = iclamp(hi_raw, base, end) - base;
      lo_raw = hi_raw;
      hi_raw = nxt;
      const int64_t lo = imax(seg_lo, m0.row), hi = imin(seg_hi, m1.row);
      const int64_t count = imax(hi - lo, 0);
      // where the piece goes: 0 complete segment, 1 carry (open at the chunk's end), 2 head (started
      // in an earlier chunk, ends here). One reduce_rows call site keeps the kernel small.
      const int kind = s == m1.seg ? 1 : (s == m0.seg && seg_lo < m0.row ? 2 : 0);
      if (kind == 1 && count == 0) continue;
      State st[V];
      reduce_rows<Op, V>(st, fetch, base + lo, count);
      if (kind == 0) {
        write_results<Op, V>(st, imax(seg_hi - seg_lo, 0), N, out, arg, (b * S + s) * F + f0);
      } else {
        store_states<V>(kind == 1 ? carry : head, c * F + f0, st);
        (kind == 1 ? ck : hk) = b * S + s;
      }
    }
  }
};

// acc = carry[i] (+) ... (+) carry[j] (+) acc for the run of entries i..j (going left from j, not below lo)
// whose key is k, merged right to left, for the V features from f; returns the first entry left of the run
// (lo - 1 if it reached lo). Keys and states are loaded kBatch entries at a time (independent loads in
// flight together), so a run of K carries costs K / kBatch rounds of loads, not K; the merge order is that
// of the one-by-one walk.
template <class Op, int V, int kBatch>
SEGOPS_HD int64_t merge_run_left(const typename Op::State* carry, const int64_t* key, int64_t j, int64_t lo,
                                 int64_t k, int64_t F, int64_t f, typename Op::State (&acc)[V]) {
  using State = typename Op::State;
  while (j >= lo) {
    int64_t kk[kBatch];
    State t[kBatch][V];
SEGOPS_UNROLL
    for (int u = 0; u < kBatch; ++u) {
      if (j - u >= lo) {
        kk[u] = rd_async(key + j - u);
        load_states<V>(carry, (j - u) * F + f, t[u]);
      }
    }
    SEGOPS_TRACE_USE();
SEGOPS_UNROLL
    for (int u = 0; u < kBatch; ++u) {
      if (j < lo || kk[u] != k) return j;
      merge_before<Op, V>(t[u], acc);
      --j;
    }
  }
  return j;
}

// Keyed partial states in L levels (F states an entry): level 0 written by a pass over chunks or pieces,
// entry g of level l + 1 by LevelCarry from entries [g K, (g + 1) K) of level l.
template <class State> struct KeyedLevels {
  const State* carry[kMaxLevels];
  const int64_t* key[kMaxLevels];
  int L;
  int64_t K;
};

// Continues acc leftwards from level-0 entry j over the run of entries keyed k: level 0 down to the start of
// j's group of K, then one level up from the group before (whose entry there is that group's trailing run
// of one key), and so on; at most K entries per level. A run is merged in order, right to left.
template <class Op, int V>
SEGOPS_HD void merge_levels_left(const KeyedLevels<typename Op::State>& lv, int64_t j, int64_t k, int64_t F,
                                 int64_t f, typename Op::State (&acc)[V]) {
  using State = typename Op::State;
  int l = 0;
  while (j >= 0) {
    const bool top = l + 1 >= lv.L;
    const int64_t gs = top ? 0 : (j / lv.K) * lv.K;
    j = merge_run_left<Op, V, states_in<State, V>(128, 8)>(lv.carry[l], lv.key[l], j, gs, k, F, f, acc);
    if (j >= gs || top) break;  // another key stopped the walk, or the top level is done
    j = gs / lv.K - 1;          // the group before, one level up
    ++l;
  }
}

// Pass 2 (one launch per level): entry g of level l+1 = the trailing run of level-l carries of group g
// (entries [g*K, min((g+1)*K, n_in))) that share the key of the group's last entry, merged in order.
template <class Op> struct LevelCarry {
  using State = typename Op::State;
  const State* carry_in;
  const int64_t* key_in;
  int64_t n_in;
  State* carry_out;
  int64_t* key_out;
  int64_t n_out, F, K;
  SEGOPS_HD void operator()(int64_t tid) const {
    const int64_t g = tid / F, f = tid - g * F;
    if (g >= n_out) return;
    const int64_t last = imin((g + 1) * K, n_in) - 1;
    const int64_t k = rd_async(key_in + last);
    State acc[1] = {rd_async(carry_in + last * F + f)};  // (loaded before the key: every entry is written)
    SEGOPS_TRACE_USE();
    if (f == 0) wr(key_out + g, k);
    if (k < 0) {
      wr(carry_out + g * F + f, Op::identity());  // (the next level loads states before their keys)
      return;
    }
    merge_run_left<Op, 1, 16>(carry_in, key_in, last - 1, g * K, k, F, f, acc);
    wr(carry_out + g * F + f, acc[0]);
  }
};

// Pass 3. Thread (chunk c, features [f, f + V)): if a crossing segment ends in chunk c, merge its carries
// right to left (at most K per level, climbing a level at each group start) and write the result. Thread 0
// also publishes this call's indptr error. V as in pass 1 (F % V == 0), so a chunk's F features take F / V
// threads whose state loads move 16 bytes each.
template <class Op, class OutT, int V> struct Fixup : ChunkGrid {
  using State = typename Op::State;
  KeyedLevels<State> lv;  // level 0: the chunks' carries (pass 1)
  const State* head;
  const int64_t* hkey;
  int64_t C, N;
  OutT* out;
  int64_t* arg;
  Publish pub;

  SEGOPS_HD void operator()(int64_t tid) const {
    if (tid == 0) pub.run();
    const int64_t nfv = F / V;
    if (tid >= C * nfv) return;
    const int64_t c = tid / nfv, f = (tid - c * nfv) * V;
    // round 1: the head's key and the keys of the kPre chunks before (most crossing segments end within a
    // few chunks); a chunk with no head (most chunks inside a huge segment) stops here
    constexpr int kPre = states_in<State, V>(64, 4);
    const int64_t k = rd_async(hkey + c);
    int64_t kk[kPre];
SEGOPS_UNROLL
    for (int u = 0; u < kPre; ++u) kk[u] = c - 1 - u >= 0 ? rd_async(lv.key[0] + c - 1 - u) : int64_t(-1);
    SEGOPS_TRACE_USE();
    if (k < 0) return;
    // round 2: the head's state, the carries of the segment among those kPre, and the segment's offsets
    State acc[V];
    load_states<V>(head, c * F + f, acc);
    State pre[kPre][V];
SEGOPS_UNROLL
    for (int u = 0; u < kPre; ++u) {
      if (kk[u] == k) {
        load_states<V>(lv.carry[0], (c - 1 - u) * F + f, pre[u]);
      } else {
SEGOPS_UNROLL
        for (int v = 0; v < V; ++v) pre[u][v] = Op::identity();
      }
    }
    const int64_t b = k / S, s = k - b * S;
    const int64_t* p = indptr + bmap.offset(b);
    const int64_t p0 = rd_async(p), pS = rd_async(p + S), ps = rd_async(p + s), ps1 = rd_async(p + s + 1);
    int64_t j = c - 1;
    // the preloaded carries, down to (not including) the first entry of the level-0 group, which the
    // walk below takes (it climbs a level after it)
    const int64_t gs0 = lv.L <= 1 || j < 0 ? 0 : (j / lv.K) * lv.K;
    bool stopped = false;
SEGOPS_UNROLL
    for (int u = 0; u < kPre; ++u) {
      if (stopped || j <= gs0) break;
      if (kk[u] != k) {
        stopped = true;
      } else {
        merge_before<Op, V>(pre[u], acc);
        --j;
      }
    }
    if (!stopped) merge_levels_left<Op, V>(lv, j, k, F, f, acc);
    const int64_t base = iclamp(p0, 0, N), end = iclamp(pS, base, N);
    const int64_t count = imax(iclamp(ps1, base, end) - iclamp(ps, base, end), 0);
    write_results<Op, V>(acc, count, N, out, arg, k * F + f);
  }
};

}  // namespace cuda
}  // namespace torch_segops
