// Typed CPU kernels of scatter (docs/design.md, "scatter on the CPU"), compiled once per instruction set
// like kernels.cpp. Every path ends in the chunked reduction of cpu/chunk_reduce.h with the chunk grid
// that segment_csr would use on the stably sorted index, so each target gets exactly the bits it got
// there, whatever the path and the thread count:
//   - sorted index: one pass over index and src, the segments read off the index itself
//     (SortedIndexSegments; no offsets, nothing sorted or copied);
//   - any other order: a stable partition of the rows by ranges of targets (one pass over the index and,
//     for rows of at most kCarryBytes, their values), then, per range, a counting sort in cache and the
//     reduction of the range's part of the merge path (its chunk borders where the whole path has them);
//   - a plan (perm, indptr): the reduction along indptr, rows read through perm a chunk at a time.
#include "cpu/scatter_kernels.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "cpu/chunk_reduce.h"
#include "csr_args.h"
#include "index_args.h"
#include "index_math.h"
#include "merge_path.h"
#include "reducers.h"
#include "tensor_ptr.h"

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN
namespace {

constexpr int64_t kBlockRows = 1 << 16;         // rows per partition block: a row's place in it fits uint16
constexpr int64_t kMaxBucketTargets = 1 << 16;  // targets per range: a target's place in it fits uint16
constexpr int64_t kBucketRows = 1 << 15;        // rows a range holds on average (its records stay in L2)
constexpr int64_t kCarryBytes = 16;             // rows of at most this many bytes travel with the partition
const int64_t kZero = 0;                        // the one batch offset of a single indptr row

// ---- where the rows are ---------------------------------------------------------------------------

// Rows taken through a permutation (perm's row for batch b starts at perm_off[b]): a chunk's rows are
// copied into a per-thread buffer before they are reduced (consecutive feature tiles of one chunk reuse
// it). A perm value outside [0, N) sets *bad and reads zeros.
template <typename T> struct GatheredRows {
  const T* src;  // [B, N, F]
  int64_t N, F;
  const int64_t* perm;
  const int64_t* perm_off;
  std::atomic<bool>* bad;
  struct View {
    ArrayLoad<T> load;
    int64_t rb;
  };
  struct Stage {
    std::vector<T> buf;
    int64_t b = -1, r0 = -1, r1 = -1;
  };
  Stage stage(int64_t elems) const {
    Stage s;
    s.buf.resize(static_cast<size_t>(elems));
    return s;
  }
  View chunk(int64_t b, int64_t r0, int64_t r1, Stage& st) const {
    if (st.b != b || st.r0 != r0 || st.r1 != r1) {
      const int64_t* p = perm + perm_off[b];
      const T* sb = src + b * N * F;
      T* o = st.buf.data();
      bool wrong = false;
      if (F == 1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t j = p[r];
          const bool ok = static_cast<uint64_t>(j) < static_cast<uint64_t>(N);
          wrong |= !ok;
          o[r - r0] = sb[ok ? j : 0];
        }
      } else {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t j = p[r];
          const bool ok = static_cast<uint64_t>(j) < static_cast<uint64_t>(N);
          wrong |= !ok;
          std::memcpy(o + (r - r0) * F, sb + (ok ? j : 0) * F, static_cast<size_t>(F) * sizeof(T));
        }
      }
      if (wrong) bad->store(true, std::memory_order_relaxed);
      st.b = b, st.r0 = r0, st.r1 = r1;
    }
    return {ArrayLoad<T>{st.buf.data(), (r1 - r0) * F}, -r0};
  }
};

// The arg of a reduced row: its position in src, perm's value.
struct PermArg {
  const int64_t* perm;
  const int64_t* perm_off;
  int64_t operator()(int64_t b, int64_t row) const { return perm[perm_off[b] + row]; }
};

// ---- a sorted index, read as its own segmentation ---------------------------------------------------

// Row j of a sorted index x is merge-path item j + x[j] (the x[j] segment ends before it), so a chunk's
// first row is the first j with j + x[j] >= d0, and the offsets of its segments come from a scan of its
// rows: no offsets array. Each chunk checks its rows (in [0, S), non-decreasing from the row before it) and
// records where it started and ended; a problem sets *bad and skips the chunk, and `tiles` says afterwards
// whether the chunks that ran cover every row once. Only then is the index sorted and the result valid.
template <typename I> struct SortedIndexSegments {
  const I* x;  // [IB, N]
  const int64_t* row_of_batch;
  int64_t N, S;
  int64_t cpb;              // chunks per batch
  int64_t* bounds;          // [B * cpb][2]: the first and the end row of every chunk that ran
  std::atomic<bool>* bad;

  const I* xr(int64_t b) const { return x + row_of_batch[b] * N; }
  int64_t items(int64_t) const { return S + N; }
  int64_t base(int64_t) const { return 0; }
  int64_t phase(int64_t) const { return 0; }
  int64_t count(int64_t b, int64_t s) const {
    const I* r = xr(b);
    const auto range = std::equal_range(r, r + N, static_cast<I>(s));
    return range.second - range.first;
  }
  Cut fail() const {
    bad->store(true, std::memory_order_relaxed);
    return {false, {0, 0}, {0, 0}, nullptr};
  }
  Cut cut(int64_t b, int64_t c, int64_t d0, int64_t d1, const MergeCoord* from, int64_t,
          std::vector<int64_t>& q) const {
    if (bad->load(std::memory_order_relaxed)) return {false, {0, 0}, {0, 0}, nullptr};
    const I* r = xr(b);
    int64_t r0;
    if (from != nullptr) {
      r0 = from->row;
    } else {  // the first j with j + x[j] >= d0 (a sorted index makes j + x[j] increase)
      int64_t lo = 0, hi = std::min(N, d0);
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (mid + static_cast<int64_t>(r[mid]) < d0) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      r0 = lo;
    }
    const int64_t seg0 = d0 - r0;
    if (seg0 < 0 || seg0 > S) return fail();
    if (static_cast<int64_t>(q.size()) < d1 - d0 + 2) q.resize(static_cast<size_t>(d1 - d0 + 2));
    int64_t prev = r0 > 0 ? static_cast<int64_t>(r[r0 - 1]) : 0;
    if (prev > seg0) return fail();
    q[0] = r0 > 0 && prev == seg0 ? r0 - 1 : r0;  // below r0: the segment started in an earlier chunk
    int64_t cur = seg0, j = r0;
    for (; j < N; ++j) {
      const int64_t v = r[j];
      if (j + v >= d1) break;
      if (v < prev || v < 0 || v >= S) return fail();
      while (cur < v) q[++cur - seg0] = j;
      prev = v;
    }
    const int64_t seg1 = d1 - j;
    if (seg1 < cur || seg1 > S) return fail();
    for (const int64_t last = std::min(seg1, S); cur < last;) q[++cur - seg0] = j;
    bounds[2 * c] = r0;
    bounds[2 * c + 1] = j;
    return {true, {seg0, r0}, {seg1, j}, q.data()};
  }
  // Whether the chunks that ran cover the rows [0, N) of every batch, each once and in order.
  bool tiles(int64_t B) const {
    for (int64_t b = 0; b < B; ++b) {
      const int64_t* bd = bounds + 2 * b * cpb;
      if (bd[0] != 0 || bd[2 * cpb - 1] != N) return false;
      for (int64_t k = 0; k + 1 < cpb; ++k) {
        if (bd[2 * k + 1] != bd[2 * k + 2]) return false;
      }
    }
    return true;
  }
};

// ---- any order: a stable partition by ranges of targets ---------------------------------------------

// log2 of the targets of a range: ranges of about kBucketRows rows, at most kMaxBucketTargets targets.
int bucket_shift(int64_t S, int64_t N) {
  const double want = static_cast<double>(S) * static_cast<double>(kBucketRows) / static_cast<double>(std::max<int64_t>(N, 1));
  int shift = 0;
  while (shift < 16 && static_cast<double>(int64_t{1} << (shift + 1)) <= want) ++shift;
  return shift;
}

// One batch of an index in any order, its values in [0, S) (a value outside sets *bad and nothing is
// written). x, src, out and arg are the batch's own rows.
template <class Op, typename T, typename I>
void scatter_any_order(const T* src, const I* x, int64_t N, int64_t S, int64_t F, T* out, int64_t* arg,
                       std::atomic<bool>* bad) {
  const int shift = bucket_shift(S, N);
  const int64_t R = int64_t{1} << shift, NB = ceil_div(S, R), nblocks = ceil_div(N, kBlockRows);
  const bool carry = F * static_cast<int64_t>(sizeof(T)) <= kCarryBytes;  // values travel with the partition
  const bool need_pos = !carry || Op::kHasArg;
  // Pass 1, per block of rows: its rows grouped by range, in their order, at the block's own place of the
  // record arrays; off[blk][k] is range k's first record in the block.
  std::vector<uint16_t> lt(static_cast<size_t>(N)), pos(need_pos ? static_cast<size_t>(N) : 0);
  std::vector<T> vals(carry ? static_cast<size_t>(N * F) : 0);
  std::vector<uint32_t> off(static_cast<size_t>(nblocks * (NB + 1)));
  torch::stable::parallel_for(0, nblocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<uint32_t> cur(static_cast<size_t>(NB));
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t r0 = blk * kBlockRows, r1 = std::min(N, r0 + kBlockRows);
      uint32_t* o = off.data() + blk * (NB + 1);
      std::fill(o, o + NB + 1, 0u);
      bool wrong = false;
      for (int64_t j = r0; j < r1; ++j) {
        const int64_t v = x[j];
        const bool ok = static_cast<uint64_t>(v) < static_cast<uint64_t>(S);
        wrong |= !ok;
        o[(ok ? v >> shift : 0) + 1] += ok;
      }
      if (wrong) {
        bad->store(true, std::memory_order_relaxed);
        continue;
      }
      for (int64_t k = 0; k < NB; ++k) o[k + 1] += o[k];
      std::copy(o, o + NB, cur.begin());
      for (int64_t j = r0; j < r1; ++j) {
        const int64_t v = x[j];
        const int64_t d = r0 + cur[v >> shift]++;
        lt[d] = static_cast<uint16_t>(v & (R - 1));
        if (need_pos) pos[d] = static_cast<uint16_t>(j - r0);
        if (carry) std::memcpy(&vals[d * F], src + j * F, static_cast<size_t>(F) * sizeof(T));
      }
    }
  });
  if (bad->load()) return;
  // Range k's rows come before range k + 1's on the sorted index: g[k] rows before it.
  std::vector<int64_t> g(static_cast<size_t>(NB) + 1, 0);
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const uint32_t* o = off.data() + blk * (NB + 1);
    for (int64_t k = 0; k < NB; ++k) g[k + 1] += o[k + 1] - o[k];
  }
  for (int64_t k = 0; k < NB; ++k) g[k + 1] += g[k];
  const int64_t W = chunk_items(F);

  // Pass 2, per range: a counting sort of its records by target (stable: blocks in order), then the
  // reduction of its segments, with the chunk borders of the whole merge path (its first item is item
  // t0 + g[k] of it).
  struct Buffers {
    std::vector<int64_t> lp, cur, rows;
    std::vector<T> vals;
  };
  auto range = [&](int64_t k, Buffers& sc) {
    const int64_t t0 = k << shift, Rk = std::min(R, S - t0), nb = g[k + 1] - g[k];
    sc.lp.assign(static_cast<size_t>(Rk) + 1, 0);
    int64_t* lp = sc.lp.data();
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const uint32_t* o = off.data() + blk * (NB + 1);
      for (int64_t i = blk * kBlockRows + o[k], e = blk * kBlockRows + o[k + 1]; i < e; ++i) ++lp[lt[i] + 1];
    }
    for (int64_t t = 0; t < Rk; ++t) lp[t + 1] += lp[t];
    sc.cur.assign(lp, lp + Rk);
    if (need_pos) sc.rows.resize(static_cast<size_t>(nb));
    if (carry) sc.vals.resize(static_cast<size_t>(nb * F));
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const uint32_t* o = off.data() + blk * (NB + 1);
      for (int64_t i = blk * kBlockRows + o[k], e = blk * kBlockRows + o[k + 1]; i < e; ++i) {
        const int64_t d = sc.cur[lt[i]]++;
        if (need_pos) sc.rows[d] = blk * kBlockRows + pos[i];
        if (carry) std::memcpy(&sc.vals[d * F], &vals[i * F], static_cast<size_t>(F) * sizeof(T));
      }
    }
    const CsrSegments segs{lp, &kZero, Rk, (t0 + g[k]) % W};
    const Outputs<T> o{out, arg, S, t0, N};
    const PermArg map{sc.rows.data(), &kZero};
    if (carry) {
      reduce_chunks<Op>(segs, DirectRows<ArrayLoad<T>>{ArrayLoad<T>{sc.vals.data(), nb * F}, nb}, 1, F, o, map);
    } else {
      reduce_chunks<Op>(segs, GatheredRows<T>{src, N, F, sc.rows.data(), &kZero, bad}, 1, F, o, map);
    }
  };
  // A range that holds a large share of the rows runs alone, its reduction in parallel; the others run
  // side by side, taken in turn by whichever thread is free.
  const int64_t threads = std::max<int64_t>(1, torch::stable::get_num_threads());
  const int64_t large = std::max<int64_t>(int64_t{1} << 20, N / (2 * threads));
  {
    Buffers sc;
    for (int64_t k = 0; k < NB; ++k) {
      if (g[k + 1] - g[k] >= large) range(k, sc);
    }
  }
  std::atomic<int64_t> next{0};
  torch::stable::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    Buffers sc;
    for (int64_t k = next++; k < NB; k = next++) {
      if (g[k + 1] - g[k] < large) range(k, sc);
    }
  });
}

// ---- the entry points -------------------------------------------------------------------------------

template <class Op, typename T, typename I>
int scatter_index_typed(const ScatterArgs& a, bool sorted, T* out, int64_t* arg) {
  const int64_t B = a.B, N = a.N, S = a.S, F = a.F;
  const T* src = cptr<T>(a.src);
  const I* x = cptr<I>(a.index);
  if (B == 0 || (N == 0 && S == 0)) return kScatterOk;
  if (S == 0) return kIndexOutOfRange;  // every value is >= dim_size = 0
  std::atomic<bool> bad{false};
  const int64_t W = chunk_items(F);
  const int64_t cpb = ceil_div(S + N, W);
  if (F > 0) {  // the sorted index, read as it is
    std::vector<int64_t> bounds(static_cast<size_t>(2 * B * cpb), -1);
    const SortedIndexSegments<I> segs{x, a.row_of_batch.data(), N, S, cpb, bounds.data(), &bad};
    reduce_chunks<Op>(segs, DirectRows<ArrayLoad<T>>{ArrayLoad<T>{src, B * N * F}, N}, B, F, Outputs<T>{out, arg, S, 0, N});
    if (!bad.load() && segs.tiles(B)) return kScatterOk;
  }
  if (sorted) return kIndexUnsorted;  // (or out of range: the host finds which, and where)
  bad = false;
  if (F == 0) {  // nothing to reduce: only the values to check
    for (int64_t r = 0; r < a.rows * N; ++r) {
      if (x[r] < 0 || x[r] >= S) return kIndexOutOfRange;
    }
    return kScatterOk;
  }
  const int64_t threads = std::max<int64_t>(1, torch::stable::get_num_threads());
  auto batch = [&](int64_t b) {
    scatter_any_order<Op>(src + b * N * F, x + a.row_of_batch[b] * N, N, S, F, out + b * S * F,
                          arg != nullptr ? arg + b * S * F : nullptr, &bad);
  };
  if (B >= 2 * threads && N * F <= (int64_t{1} << 20)) {  // many small batches: side by side
    torch::stable::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) batch(b);
    });
  } else {
    for (int64_t b = 0; b < B && !bad.load(); ++b) batch(b);
  }
  return bad.load() ? kIndexOutOfRange : kScatterOk;
}

template <class Op, typename T>
int scatter_plan_typed(const ScatterArgs& a, T* out, int64_t* arg) {
  const int64_t B = a.B, N = a.N, S = a.S, F = a.F;
  if (B == 0 || S == 0 || F == 0) return kScatterOk;
  std::vector<int64_t> perm_off(static_cast<size_t>(B)), ind_off(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    perm_off[b] = a.row_of_batch[b] * N;
    ind_off[b] = a.row_of_batch[b] * (S + 1);
  }
  std::atomic<bool> bad{false};
  const int64_t* perm = cptr<int64_t>(a.perm);
  const CsrSegments segs{cptr<int64_t>(a.indptr), ind_off.data(), S};
  reduce_chunks<Op>(segs, GatheredRows<T>{cptr<T>(a.src), N, F, perm, perm_off.data(), &bad}, B, F,
                    Outputs<T>{out, arg, S, 0, N}, PermArg{perm, perm_off.data()});
  return bad.load() ? kPlanOutOfRange : kScatterOk;
}

template <class Body>
int dispatch_scatter(const ScatterArgs& a, Reduce r, const Body& body) {
  int status = kScatterOk;
  dispatch_dtype(a.src.scalar_type(), true, "scatter", "src", [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_reducer<acc_t<T>>(r, [&](auto op_tag) {
      using Op = typename decltype(op_tag)::type;
      status = body(Op{}, T{});
    });
  });
  return status;
}

}  // namespace

int scatter_index_kernel(const ScatterArgs& a, Reduce r, bool sorted, const Tensor& out, const Tensor* arg) {
  return dispatch_scatter(a, r, [&](auto op, auto t) {
    using Op = decltype(op);
    using T = decltype(t);
    int status = kScatterOk;
    dispatch_index(a.index.scalar_type(), [&](auto itag) {
      using I = typename decltype(itag)::type;
      status = scatter_index_typed<Op, T, I>(a, sorted, mptr<T>(out), arg != nullptr ? mptr<int64_t>(*arg) : nullptr);
    });
    return status;
  });
}

int scatter_plan_kernel(const ScatterArgs& a, Reduce r, const Tensor& out, const Tensor* arg) {
  return dispatch_scatter(a, r, [&](auto op, auto t) {
    using Op = decltype(op);
    using T = decltype(t);
    return scatter_plan_typed<Op, T>(a, mptr<T>(out), arg != nullptr ? mptr<int64_t>(*arg) : nullptr);
  });
}

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
