// The kernels of the CUDA index_to_indptr (coo_cuda.cu; the CPU kernel: cpu/coo_cpu.cpp) and their host
// driver, run on the GPU through CudaCall and on the CPU by the host emulation (tests/cuda_emulation/).
//
// The CPU's contract: offsets[r, t] = the number of entries of index row r smaller than t, t in [0, size] (for a
// sorted row, the first position holding t or more; an unsorted row gets the same counts when check_sorted is
// false). A value outside [0, size), or a decrease along a row when check_sorted, is reported with the CPU's
// message for its first problem (the first decrease, else the first negative value, else the first value >=
// size) through the error word and record of indptr_errors.cuh; the offsets are then unspecified, but always
// non-decreasing inside [0, n], so the CSR op that reads them stays in bounds and reports nothing of its own.
//
// The offsets are counted for every row, sorted or not, in parallel everywhere: the offsets start zeroed; each
// run of equal values adds its length to the bucket of its value (two atomics a run, at its ends: none per
// entry, so a run of a million equal values costs two); an inclusive scan of each row's buckets then gives the
// offsets (chunk sums, one block per row scanning its chunk sums, then every chunk from its prefix). No host
// synchronisation, except for size -1 (max(index) + 1 is read back, and the index checked at the same time).
#pragma once

#include <cstdint>

#include "cuda/device_primitives.cuh"
#include "cuda/indptr_errors.cuh"
#include "index_math.h"
#include "op_names.h"

namespace torch_segops {
namespace cuda {

SEGOPS_HD void atomic_add_i64(int64_t* p, int64_t v) {
#if defined(__CUDA_ARCH__)
  atomicAdd(reinterpret_cast<u64*>(p), static_cast<u64>(v));
#else
  *p += v;
#endif
}

// The index as the kernels see it: rows of n entries, offsets of size + 1 per row (size -1: not known yet).
template <typename I> struct IndexRows {
  const I* x = nullptr;
  int64_t rows = 0, n = 0, size = -1;
  bool check_sorted = false;
  SEGOPS_HD int64_t total() const { return rows * n; }
  // The first problem (IndexProblem, in the CPU's order of reporting) of entry i (v = x[i], k = i % n), or -1.
  SEGOPS_HD int32_t problem(int64_t i, int64_t k, int64_t v) const {
    if (check_sorted && k != 0 && v < static_cast<int64_t>(rd(x + i - 1))) return kIndexUnsorted;
    if (v < 0) return kIndexNegative;
    if (size >= 0 && v >= size) return kIndexTooLarge;
    return -1;
  }
};

// The error word's position of problem `what` at entry i: the problems sort as the CPU reports them.
SEGOPS_HD u64 index_error_key(int32_t what, int64_t i, int64_t total) {
  return static_cast<u64>(what) * static_cast<u64>(total) + static_cast<u64>(i);
}

// Pass 1. Thread tid takes entries tid, tid + threads, ...: checks each (keeping the smallest error key in
// *err, tagged), adds the length of each run of equal values to its value's bucket (off: zeroed offsets, bucket
// of v: off[row][clamp(v, -1, size) + 1] when that is <= size; nullptr: no counting) and, with max_last, keeps
// the largest value plus one (as atomicMin(~(max + 1)), so the word starts at ~0; max + 1 in u64, where the int64
// maximum plus one does not overflow).
template <typename I> struct IndexCount {
  IndexRows<I> ix;
  int64_t threads = 1;
  int64_t* off = nullptr;
  u64* err = nullptr;
  uint32_t tag = 0;
  u64* max_last = nullptr;
  SEGOPS_HD void operator()(int64_t tid) const {
    const int64_t total = ix.total(), n = ix.n, len = ix.size + 1;
    if (tid >= total) return;
    int64_t m = -1;
    u64 bad = kNoError;  // the smallest error key of this thread's entries
    // entry i = row * n + k, advanced by threads = dr rows and dk entries with a carry (no division per entry)
    const int64_t dr = threads / n, dk = threads - dr * n;
    int64_t row = tid / n, k = tid - row * n;
    for (int64_t i = tid; i < total; i += threads) {
      const int64_t v = rd(ix.x + i);
      m = v > m ? v : m;
      const int32_t what = ix.problem(i, k, v);
      if (what >= 0) {
        const u64 key = (index_error_key(what, i, total) << kTagBits) | tag;
        bad = key < bad ? key : bad;
      }
      const int64_t bucket = iclamp(v, -1, ix.size) + 1;
      if (off != nullptr && bucket <= ix.size) {
        int64_t* o = off + row * len + bucket;
        if (k == 0 || static_cast<int64_t>(rd(ix.x + i - 1)) != v) atomic_add_i64(o, -k);  // a run starts at k
        if (k == n - 1 || static_cast<int64_t>(rd(ix.x + i + 1)) != v) atomic_add_i64(o, k + 1);  // and ends
      }
      row += dr;
      k += dk;
      if (k >= n) {
        k -= n;
        ++row;
      }
    }
    if (bad != kNoError && err != nullptr) atomic_min_u64(err, bad);
    if (max_last != nullptr) atomic_min_u64(max_last, ~(static_cast<u64>(m) + 1));  // (m >= -1)
  }
};

// Copies this call's index error (if the error word holds one with our tag) into the host record, then empties
// the word; as Publish (indptr_errors.cuh), a word whose entry does not have the problem it names in this
// index was left by another call, and is emptied unread.
template <typename I> struct PublishIndex {
  ErrorSlot to;
  IndexRows<I> ix;
  SEGOPS_HD void run() const {
    const u64 v = own_error(to);
    if (v == kNoError) return;
    const u64 key = v >> kTagBits, total = static_cast<u64>(ix.total());
    const int64_t what = total == 0 ? -1 : static_cast<int64_t>(key / total);
    const int64_t pos = total == 0 ? 0 : static_cast<int64_t>(key % total);
    if (what < 0 || what > kIndexTooLarge || ix.problem(pos, pos % ix.n, rd(ix.x + pos)) != what) {
      atomic_cas_u64(to.err, v, kNoError);
      return;
    }
    publish_error(to, v, static_cast<int32_t>(what), pos, ix.n, ix.rows, rd(ix.x + pos),
                  pos % ix.n != 0 ? static_cast<int64_t>(rd(ix.x + pos - 1)) : 0);
  }
};

// Pass 2. Thread tid = row * chunks + c: the sum of chunk c (kChunk buckets) of its row.
struct ChunkSums {
  static constexpr int kChunk = 64;
  const int64_t* v;
  int64_t len, chunks;
  int64_t* sums;  // [rows, chunks]
  SEGOPS_HD void operator()(int64_t tid) const {
    const int64_t row = tid / chunks, c = tid - row * chunks;
    const int64_t i0 = row * len + c * kChunk, n = imin(kChunk, len - c * kChunk);
    int64_t s = 0;
    for (int64_t j = 0; j < n; j += 8) {  // eight loads in flight
      int64_t x[8];
SEGOPS_UNROLL
      for (int u = 0; u < 8; ++u) x[u] = j + u < n ? rd_async(v + i0 + j + u) : 0;
      SEGOPS_TRACE_USE();
SEGOPS_UNROLL
      for (int u = 0; u < 8; ++u) s += x[u];
    }
    wr(sums + tid, s);
  }
};

// Pass 3, a block kernel (block_kernels.cuh's contract): block r scans row r of the chunk sums in place
// (inclusive), kItems contiguous entries a thread, a tile of kBlock * kItems entries at a time, carrying the
// tiles' totals.
struct ScanRows {
  static constexpr int kBlock = 256, kWarps = kBlock / 32, kMinBlocks = 1, kItems = 8;
  struct Shared {
    int64_t warp_total[kWarps];
  };
  int64_t* v;
  int64_t len;
  template <class Blk> SEGOPS_HD void operator()(Blk& blk, Shared& sh) const {
    const int t = blk.thread(), lane = t % 32, w = t / 32;
    int64_t* row = v + blk.block() * len;
    int64_t carry = 0;
    for (int64_t tile = 0; tile < len; tile += kBlock * kItems) {  // the same trips for every thread
      const int64_t i0 = tile + static_cast<int64_t>(t) * kItems;
      int64_t x[kItems];
      int64_t s = 0;
SEGOPS_UNROLL
      for (int j = 0; j < kItems; ++j) {
        x[j] = i0 + j < len ? rd_async(row + i0 + j) : 0;
      }
      SEGOPS_TRACE_USE();
SEGOPS_UNROLL
      for (int j = 0; j < kItems; ++j) s += x[j];
      int64_t incl = s;  // inclusive scan of the warp's sums
SEGOPS_UNROLL
      for (int d = 1; d < 32; d *= 2) {
        const int64_t y = blk.shfl_up(incl, d);
        if (lane >= d) incl += y;
      }
      if (lane == 31) SEGOPS_SH_ST(sh.warp_total[w], incl);
      blk.sync();
      int64_t run = carry + incl - s, tile_total = 0;
SEGOPS_UNROLL
      for (int u = 0; u < kWarps; ++u) {
        const int64_t wt = SEGOPS_SH_LD(sh.warp_total[u]);
        run += u < w ? wt : 0;
        tile_total += wt;
      }
SEGOPS_UNROLL
      for (int j = 0; j < kItems; ++j) {
        run += x[j];
        if (i0 + j < len) wr(row + i0 + j, run);
      }
      carry += tile_total;
      blk.sync();  // (the next tile's warp totals overwrite these)
    }
  }
};

// Pass 4. Thread tid = row * chunks + c: the inclusive scan of chunk c from the scanned sums of the chunks
// before it; thread 0 also publishes this call's index error.
template <class Pub> struct ChunkScan {
  int64_t* v;
  int64_t len, chunks;
  const int64_t* scanned;  // [rows, chunks]: inclusive scan of ChunkSums' sums
  Pub pub;
  SEGOPS_HD void operator()(int64_t tid) const {
    if (tid == 0) pub.run();
    const int64_t row = tid / chunks, c = tid - row * chunks;
    const int64_t i0 = row * len + c * ChunkSums::kChunk, n = imin(ChunkSums::kChunk, len - c * ChunkSums::kChunk);
    int64_t run = c > 0 ? rd(scanned + tid - 1) : 0;
    for (int64_t j = 0; j < n; j += 8) {
      int64_t x[8];
SEGOPS_UNROLL
      for (int u = 0; u < 8; ++u) x[u] = j + u < n ? rd_async(v + i0 + j + u) : 0;
      SEGOPS_TRACE_USE();
SEGOPS_UNROLL
      for (int u = 0; u < 8; ++u) {
        run += x[u];
        if (j + u < n) wr(v + i0 + j + u, run);
      }
    }
  }
};

// max(index) (-1 for an empty or all-negative index) from the word IndexCount's max_last leaves.
inline int64_t index_max_of_word(u64 word) { return ~word == 0 ? -1 : static_cast<int64_t>(~word - 1); }

// ---- drivers (host) ------------------------------------------------------------------------------------
// Exec as in drivers.cuh, plus void zero(void* p, size_t bytes) (stream-ordered).

constexpr int64_t kIndexThreadsMax = int64_t(1) << 20;  // threads of IndexCount; each takes total / threads entries

// size -1: checks the index (no upper bound) into words[0] (an error key as the error word holds it, tag 0)
// and max(index) + 1 into words[1] (as its complement: 0 for an empty or all-negative index); both words
// start at kNoError (~0).
template <class Exec, typename I>
void launch_index_max(Exec& ex, IndexRows<I> ix, u64* words, int64_t max_threads = kIndexThreadsMax) {
  ix.size = -1;
  IndexCount<I> k;
  k.ix = ix;
  k.threads = imax(1, imin(ix.total(), max_threads));
  k.err = words;
  k.max_last = words + 1;
  ex.launch(k, ix.total() > 0 ? k.threads : 0);
}

// The [rows, size + 1] offsets of ix (size >= 0) into off, the index's problems reported through `to` (this
// call's slot of the error word, limit = size); IndexCount's threads at most max_threads (the host emulation
// makes each take many entries). Every launch after the first that checks runs under
// PublishOnAbort, so a call that ends early still publishes.
template <class Exec, typename I>
void run_index_to_indptr(Exec& ex, const IndexRows<I>& ix, const ErrorSlot& to, int64_t* off,
                         int64_t max_threads = kIndexThreadsMax) {
  const int64_t len = ix.size + 1, total = ix.total();
  ex.zero(off, static_cast<size_t>(ix.rows * len) * sizeof(int64_t));
  if (total == 0 || ix.rows * len == 0) return;
  const PublishIndex<I> pub{to, ix};
  PublishOnAbort<Exec, PublishIndex<I>> guard(ex);
  guard.arm(pub);
  IndexCount<I> count;
  count.ix = ix;
  count.threads = imax(1, imin(total, max_threads));
  count.off = off;
  count.err = to.err;
  count.tag = to.tag;
  ex.launch(count, count.threads);
  const int64_t chunks = ceil_div(len, int64_t{ChunkSums::kChunk});
  int64_t* sums = static_cast<int64_t*>(ex.workspace(static_cast<size_t>(ix.rows * chunks) * sizeof(int64_t)));
  ex.launch(ChunkSums{off, len, chunks, sums}, ix.rows * chunks);
  ex.launch_blocks(ScanRows{sums, chunks}, ix.rows);
  ex.launch(ChunkScan<PublishIndex<I>>{off, len, chunks, sums, pub}, ix.rows * chunks);
  guard.disarm();
}

}  // namespace cuda
}  // namespace torch_segops
