// Typed CPU kernels of scatter (docs/design.md, "scatter on the CPU"), compiled once per instruction set
// like kernels.cpp. One feature (F == 1, sorted false, no arg): each target's values folded serially in row
// order by Op::step, in one pass or per range of the partition below, or per target along a plan. Otherwise every
// path ends in the chunked reduction of cpu/chunk_reduce.h with the chunk grid that segment_csr would use
// on the stably sorted index, so each target gets exactly the bits it got there, whatever the path and the
// thread count:
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
#include <memory>
#include <type_traits>
#include <vector>

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "cpu/chunk_reduce.h"
#include "cpu/row_order_states.h"
#include "cpu/stream_prefetch.h"
#include "csr_args.h"
#include "index_args.h"
#include "index_math.h"
#include "merge_path.h"
#include "platform.h"
#include "reduction_policies.h"
#include "tensor_ptr.h"

HWY_BEFORE_NAMESPACE();
namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN
namespace {

constexpr int64_t kBlockRows = 1 << 16;         // rows per partition block: a row's place in it fits uint16
constexpr int64_t kMaxBucketTargets = 1 << 16;  // targets per range: a target's place in it fits uint16
constexpr int64_t kBucketRows = 1 << 15;        // rows a range holds on average (its records stay in L2)
constexpr int64_t kCarryBytes = 16;             // rows of at most this many bytes travel with the partition
constexpr int64_t kSerialElems = 1 << 17;       // src elements below which a call opens no parallel region
constexpr int64_t kStateBytes = 8 << 20;        // one feature: the most a one pass keeps in state arrays
constexpr int64_t kCachedOutputBytes = 8 << 20;  // one feature: an output a one pass updates in cache
constexpr int64_t kHintedOutputBytes = 4 << 20;  // one feature: the output below which a narrow index is hinted
const int64_t kZero = 0;                        // the one batch offset of a single indptr row

// body(i0, i1) over [0, n) in pieces of `grain`, each taken by whichever thread is free (threads of a busy
// machine do not wait for one that was descheduled); the results never depend on who took what.
// Each thread's calls share one State (its scratch), made where it runs. serial: on the calling thread.
template <class State, class Body> void parallel_dynamic(int64_t n, int64_t grain, bool serial, const Body& body) {
  const int64_t threads =
      serial ? 1 : std::min<int64_t>(std::max<int64_t>(1, torch::stable::get_num_threads()), ceil_div(n, grain));
  std::atomic<int64_t> next{0};
  auto run = [&](int64_t, int64_t) {
    State state;
    for (int64_t i = next.fetch_add(grain); i < n; i = next.fetch_add(grain)) body(state, i, std::min(n, i + grain));
  };
  if (threads <= 1) return run(0, 1);
  torch::stable::parallel_for(0, threads, 1, run);
}

// ---- scratch --------------------------------------------------------------------------------------

// n elements of scratch, not zeroed (every element is written before it is read); a large one asks for
// huge pages, as outputs do (cpu/fresh_output.h): its first writes are otherwise a page fault per 4 KiB.
template <typename X> class Buffer {
 public:
  explicit Buffer(int64_t n) : p_(n > 0 ? new X[static_cast<size_t>(n)] : nullptr) {
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 0)) * sizeof(X);
    if (bytes >= (size_t{8} << 20)) platform::advise_huge_pages(p_.get(), bytes);
  }
  X* data() const { return p_.get(); }
  X& operator[](int64_t i) const { return p_[static_cast<size_t>(i)]; }

 private:
  std::unique_ptr<X[]> p_;
};

// A row of F elements (a short one: rows that travel with the partition hold at most kCarryBytes).
template <typename T> inline void copy_row(T* to, const T* from, int64_t F) {
  if (F == 1) {
    *to = *from;
    return;
  }
  for (int64_t f = 0; f < F; ++f) to[f] = from[f];
}

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
  // The first j in [lo, hi) with j + x[j] >= d (hi if none; a sorted index makes j + x[j] increase).
  static int64_t first_at(const I* r, int64_t lo, int64_t hi, int64_t d) {
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (mid + static_cast<int64_t>(r[mid]) < d) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }
  Cut cut(int64_t b, int64_t c, int64_t d0, int64_t d1, const MergeCoord* from, int64_t,
          std::vector<int64_t>& q) const {
    if (bad->load(std::memory_order_relaxed)) return {false, {0, 0}, {0, 0}, nullptr};
    const I* r = xr(b);
    const int64_t r0 = from != nullptr ? from->row : first_at(r, 0, std::min(N, d0), d0);
    const int64_t r1 = first_at(r, r0, std::min(N, r0 + (d1 - d0)), d1);  // a chunk holds at most d1 - d0 rows
    const int64_t seg0 = d0 - r0, seg1 = d1 - r1;
    if (seg0 < 0 || seg1 < seg0 || seg1 > S) return fail();
    // the rows: non-decreasing from the row before, in [seg0, min(seg1, S - 1)] (an integer or-reduction, no
    // early exit)
    uint32_t down = 0;
    for (int64_t j = std::max<int64_t>(r0, 1); j < r1; ++j) down |= static_cast<uint32_t>(r[j] < r[j - 1]);
    const int64_t before = r0 > 0 ? static_cast<int64_t>(r[r0 - 1]) : -1;
    if (down != 0 || before > seg0) return fail();
    if (r1 > r0) {
      const int64_t lo = r[r0], hi = r[r1 - 1];
      if (lo < seg0 || hi > seg1 || hi >= S || lo < before) return fail();
    }
    // q[s - seg0] = the first row of the chunk with a value >= s (r1 if none): each row marks its value's
    // first row (backwards, so the first one stays), then a running minimum from the top fills the gaps.
    const int64_t len = std::min(seg1, S) - seg0;
    if (static_cast<int64_t>(q.size()) < len + 2) q.resize(static_cast<size_t>(len + 2));
    int64_t* qp = q.data();
    std::fill(qp, qp + len + 1, r1);
    for (int64_t j = r1 - 1; j >= r0; --j) qp[r[j] - seg0] = j;
    for (int64_t k = len - 1; k >= 0; --k) qp[k] = std::min(qp[k], qp[k + 1]);
    if (before == seg0) qp[0] = r0 - 1;  // below r0: the segment started in an earlier chunk
    bounds[2 * c] = r0;
    bounds[2 * c + 1] = r1;
    return {true, {seg0, r0}, {seg1, r1}, qp};
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

// Calls visit(half, i) for i in [0, n): half 0 for [0, h), half 1 for [h, n) (h = n / 2), each half in order,
// the two interleaved. A counting sort gives each half its own counters, so the counter updates form two
// independent chains (an update waits on the previous one of the same counter) and the order within a
// bucket stays the rows' order (half 0's rows first).
template <class Visit> [[gnu::always_inline]] inline void two_halves(int64_t n, const Visit& visit) {
  const int64_t h = n / 2;
  for (int64_t i = 0; i < h; ++i) {
    visit(std::integral_constant<int, 0>{}, i);
    visit(std::integral_constant<int, 1>{}, h + i);
  }
  if (n > 2 * h) visit(std::integral_constant<int, 1>{}, n - 1);
}

// The same over a concatenation of parts (part p: its elements [lo(p), hi(p))): half 0 is the first
// `parts / 2` parts, half 1 the rest; visit(half, p, i).
template <class Lo, class Hi, class Visit>
[[gnu::always_inline]] inline void two_halves_of_parts(int64_t parts, const Lo& lo, const Hi& hi, const Visit& visit) {
  const int64_t ph = parts / 2;
  for (int64_t p = 0; p < ph; ++p) {
    const int64_t q = ph + p;
    int64_t i = lo(p), j = lo(q);
    const int64_t ie = hi(p), je = hi(q);
    for (const int64_t stop = i + std::min(ie - i, je - j); i < stop; ++i, ++j) {
      visit(std::integral_constant<int, 0>{}, p, i);
      visit(std::integral_constant<int, 1>{}, q, j);
    }
    for (; i < ie; ++i) visit(std::integral_constant<int, 0>{}, p, i);
    for (; j < je; ++j) visit(std::integral_constant<int, 1>{}, q, j);
  }
  if (parts > 2 * ph) {
    for (int64_t i = lo(parts - 1), e = hi(parts - 1); i < e; ++i) visit(std::integral_constant<int, 1>{}, parts - 1, i);
  }
}

// The partition of one index row: ranges of R = 2^shift targets (about kBucketRows rows each, at most
// kMaxBucketTargets targets), NB of them; blocks of kBlockRows rows.
struct Ranges {
  int shift;
  int64_t R, NB, nblocks;
  Ranges(int64_t S, int64_t N) {
    const double want = double(S) * double(kBucketRows) / double(std::max<int64_t>(N, 1));
    shift = 0;
    while (shift < 16 && double(int64_t{1} << (shift + 1)) <= want) ++shift;
    R = int64_t{1} << shift;
    NB = ceil_div(S, R);
    nblocks = ceil_div(N, kBlockRows);
  }
};

// One batch of an index in any order, its values in [0, S) (a value outside sets *bad and nothing is
// written). x, src, out and arg are the batch's own rows. kCarry: the rows travel with the partition;
// kPos: so do their positions (for the arg, or to read rows that do not travel); kF1: F == 1.
template <class Op, bool kCarry, bool kPos, bool kF1, typename T, typename I>
void scatter_any_order(const T* src, const I* x, int64_t N, int64_t S, int64_t F, T* out, int64_t* arg,
                       std::atomic<bool>* bad) {
  const Ranges rg(S, N);
  const bool serial = N * F < kSerialElems;
  const int shift = rg.shift;
  const int64_t R = rg.R, NB = rg.NB, nblocks = rg.nblocks;
  // Pass 1, per block of rows: its rows grouped by range, in their order, at the block's own place of the
  // record arrays; off[blk][k] is range k's first record in the block.
  const Buffer<uint16_t> lt(N), pos(kPos ? N : 0);
  const Buffer<T> vals(kCarry ? N * F : 0);
  const Buffer<uint32_t> off(nblocks * (NB + 1));
  // a block's records are grouped in buffers that stay in cache, then copied out whole (scattered stores
  // straight into the large arrays cost a read of every line from memory, and stalls)
  struct Stage {
    std::vector<uint32_t> cur;
    std::vector<uint16_t> lt, pos;
    std::vector<T> vals;
  };
  parallel_dynamic<Stage>(nblocks, 1, serial, [&](Stage& st, int64_t b0, int64_t b1) {
    st.cur.resize(static_cast<size_t>(2 * NB));
    st.lt.resize(static_cast<size_t>(kBlockRows));
    if (kPos) st.pos.resize(static_cast<size_t>(kBlockRows));
    if (kCarry) st.vals.resize(static_cast<size_t>(kBlockRows * F));
    uint16_t* const slt = st.lt.data();
    uint16_t* const spos = st.pos.data();
    T* const svals = st.vals.data();
    uint32_t* const c = st.cur.data();
    // (locals: stores through the uint32 counters could otherwise change a captured int, reloaded every row)
    const uint64_t size = static_cast<uint64_t>(S), mask = static_cast<uint64_t>(R - 1);
    const int sh = shift;
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t r0 = blk * kBlockRows, r1 = std::min(N, r0 + kBlockRows), n = r1 - r0;
      const I* const xb = x + r0;
      uint32_t* const o = off.data() + blk * (NB + 1);
      uint64_t top = 0;  // the largest value as unsigned (a negative one is huge): one pass, no branch
      for (int64_t j = 0; j < n; ++j) top = std::max(top, static_cast<uint64_t>(static_cast<int64_t>(xb[j])));
      if (n > 0 && top >= size) {
        bad->store(true, std::memory_order_relaxed);
        continue;
      }
      // the counts of the block's two halves (two_halves), o[k + 1] and c1[k], then o the block's offsets and
      // c0, c1 the halves' cursors
      uint32_t* const c0 = c;
      uint32_t* const c1 = c + NB;
      std::fill(o, o + NB + 1, 0u);
      std::fill(c1, c1 + NB, 0u);
      uint32_t* const counts[2] = {o + 1, c1};
      two_halves(n, [&](auto half, int64_t j) {
        ++counts[half][static_cast<uint64_t>(static_cast<int64_t>(xb[j])) >> sh];
      });
      for (int64_t k = 0; k < NB; ++k) {
        const uint32_t first = o[k + 1];
        o[k + 1] = o[k] + first + c1[k];
        c0[k] = o[k];
        c1[k] = o[k] + first;
      }
      const T* const sb = src + r0 * F;
      uint32_t* const cursors[2] = {c0, c1};
      two_halves(n, [&](auto half, int64_t j) {
        const uint64_t v = static_cast<uint64_t>(static_cast<int64_t>(xb[j]));
        const uint32_t d = cursors[half][v >> sh]++;
        slt[d] = static_cast<uint16_t>(v & mask);
        if constexpr (kPos) spos[d] = static_cast<uint16_t>(j);
        if constexpr (kCarry) {
          if (kF1) {
            svals[d] = sb[j];
          } else {
            copy_row(svals + d * F, sb + j * F, F);
          }
        }
      });
      std::copy(slt, slt + n, lt.data() + r0);
      if constexpr (kPos) std::copy(spos, spos + n, pos.data() + r0);
      if constexpr (kCarry) std::copy(svals, svals + n * F, vals.data() + r0 * F);
    }
  });
  if (bad->load()) return;
  if constexpr (kF1) {
    // Pass 2, per range: its records in their order (the rows' order) folded into the range's states.
    struct States {
      std::vector<typename Op::State> st;
      std::vector<int64_t> count;
    };
    parallel_dynamic<States>(NB, 1, serial, [&](States& sc, int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) {
        const int64_t t0 = k << shift, Rk = std::min(R, S - t0);
        auto fold = [&](const auto& states) {
          states.start(Rk);
          for (int64_t blk = 0; blk < nblocks; ++blk) {
            const uint32_t* o = off.data() + blk * (NB + 1);
            for (int64_t i = blk * kBlockRows + o[k], e = blk * kBlockRows + o[k + 1]; i < e; ++i) {
              states.step(lt[i], vals[i], kPos ? blk * kBlockRows + pos[i] : 0);
            }
          }
          states.finish(Rk, Outputs<T>{out, arg, S, t0, N});
        };
        if constexpr (kStateInOutput<Op, T>) {
          fold(OutputStates<Op, T>{out + t0});
        } else {
          sc.st.resize(static_cast<size_t>(R));
          sc.count.resize(static_cast<size_t>(R));
          fold(ArrayStates<Op, T>{sc.st.data(), sc.count.data()});
        }
      }
    });
    return;
  }
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
    std::vector<int64_t> lp, cur, rows;  // cur: two halves' cursors
    std::vector<T> vals;
  };
  auto range = [&](int64_t k, Buffers& sc, bool serial_range) {
    const int64_t t0 = k << shift, Rk = std::min(R, S - t0), nb = g[k + 1] - g[k];
    // the range's records: blocks [0, nblocks) in order, block blk's at [o[k], o[k + 1]) of its own place;
    // a counting sort by target in two halves of the blocks (two_halves_of_parts), as in pass 1
    sc.lp.assign(static_cast<size_t>(Rk) + 1, 0);
    sc.cur.assign(static_cast<size_t>(2 * Rk), 0);
    int64_t* const lp = sc.lp.data();
    const uint16_t* const lts = lt.data();
    auto lo = [&](int64_t blk) { return blk * kBlockRows + off[blk * (NB + 1) + k]; };
    auto hi = [&](int64_t blk) { return blk * kBlockRows + off[blk * (NB + 1) + k + 1]; };
    int64_t* const cur0 = sc.cur.data();
    int64_t* const cur1 = cur0 + Rk;
    int64_t* const counts[2] = {lp + 1, cur1};
    two_halves_of_parts(nblocks, lo, hi, [&](auto half, int64_t, int64_t i) { ++counts[half][lts[i]]; });
    for (int64_t t = 0; t < Rk; ++t) {
      const int64_t first = lp[t + 1];
      lp[t + 1] = lp[t] + first + cur1[t];
      cur0[t] = lp[t];
      cur1[t] = lp[t] + first;
    }
    if constexpr (kPos) sc.rows.resize(static_cast<size_t>(nb));
    if constexpr (kCarry) sc.vals.resize(static_cast<size_t>(nb * F));
    int64_t* const rows = sc.rows.data();
    T* const sv = sc.vals.data();
    const uint16_t* const poss = pos.data();
    const T* const vs = vals.data();
    int64_t* const cursors[2] = {cur0, cur1};
    two_halves_of_parts(nblocks, lo, hi, [&](auto half, int64_t blk, int64_t i) {
      const int64_t d = cursors[half][lts[i]]++;
      if constexpr (kPos) rows[d] = blk * kBlockRows + poss[i];
      if constexpr (kCarry) copy_row(sv + d * F, vs + i * F, F);
    });
    const CsrSegments segs{lp, &kZero, Rk, (t0 + g[k]) % W};
    const Outputs<T> o{out, arg, S, t0, N};
    const PermArg map{rows, &kZero};
    if constexpr (kCarry) {
      reduce_chunks<Op>(segs, DirectRows<ArrayLoad<T>>{ArrayLoad<T>{sv, nb * F}, nb}, 1, F, o, map, serial_range);
    } else {
      reduce_chunks<Op>(segs, GatheredRows<T>{src, N, F, rows, &kZero, bad}, 1, F, o, map, serial_range);
    }
  };
  // A range that holds a large share of the rows runs alone, its reduction in parallel; the others run
  // side by side, taken in turn by whichever thread is free.
  const int64_t threads = std::max<int64_t>(1, torch::stable::get_num_threads());
  const int64_t large = std::max<int64_t>(int64_t{1} << 20, N / (2 * threads));
  {
    Buffers sc;
    for (int64_t k = 0; k < NB; ++k) {
      if (g[k + 1] - g[k] >= large) range(k, sc, serial);
    }
  }
  parallel_dynamic<Buffers>(NB, 1, serial, [&](Buffers& sc, int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      if (g[k + 1] - g[k] < large) range(k, sc, true);
    }
  });
}

template <class Op, typename T, typename I>
void scatter_any_order(const T* src, const I* x, int64_t N, int64_t S, int64_t F, T* out, int64_t* arg,
                       std::atomic<bool>* bad) {
  if (F * static_cast<int64_t>(sizeof(T)) > kCarryBytes) {
    return scatter_any_order<Op, false, true, false>(src, x, N, S, F, out, arg, bad);
  }
  return scatter_any_order<Op, true, Op::kHasArg, false>(src, x, N, S, F, out, arg, bad);
}

// ---- one feature: each target's values folded in row order -------------------------------------------

// One batch in one pass: its rows folded in their order into its targets' states, the index checked on the
// way (a value outside [0, S) sets *bad and stops the pass).
template <class Op, typename T, typename I, class States>
void fold_in_row_order(const T* src, const I* x, int64_t N, int64_t S, T* out, int64_t* arg, const States& states,
                       std::atomic<bool>* bad) {
  states.start(S);
  const uint64_t size = static_cast<uint64_t>(S);
  auto fold = [&](int64_t i) {  // false (and *bad set): row i's target is outside [0, S)
    const uint64_t v = static_cast<uint64_t>(static_cast<int64_t>(x[i]));
    if (v >= size) {
      bad->store(true, std::memory_order_relaxed);
      return false;
    }
    states.step(v, src[i], i);
    return true;
  };
  int64_t i = 0;
  // Blocks of kBlock rows, each hinting the index and src kAhead rows on; the same steps in the same order.
  // It pays for an int64 index, and for a narrower one while the output stays in cache (docs/design.md).
  constexpr int64_t kBlock = 16, kAhead = 128;
  const bool hint = sizeof(I) == 8 || S * static_cast<int64_t>(sizeof(T)) <= kHintedOutputBytes;
  for (; hint && i + kBlock + kAhead <= N; i += kBlock) {
    prefetch_rows<kBlock>(x + i + kAhead);
    prefetch_rows<kBlock>(src + i + kAhead);
    for (int64_t r = i; r < i + kBlock; ++r) {
      if (!fold(r)) return;
    }
  }
  for (; i < N; ++i) {
    if (!fold(i)) return;
  }
  states.finish(S, Outputs<T>{out, arg, S, 0, N});
}

// One batch of one feature: in one pass (one_pass) where the states fit in the output or in arrays of S
// targets that are not much longer than the rows and stay in cache unless the index looks sorted (random
// updates of larger arrays miss twice a row: 1.7x the former path's time at 2M targets); otherwise the
// partition by ranges of targets, each range folding its records in their order: the same bits either way.
template <class Op, typename T, typename I>
void scatter_rows_in_order(const T* src, const I* x, int64_t N, int64_t S, T* out, int64_t* arg, bool one_pass,
                           bool looks_sorted, std::atomic<bool>* bad) {
  if (one_pass) {
    if constexpr (kStateInOutput<Op, T>) {
      return fold_in_row_order<Op>(src, x, N, S, out, arg, OutputStates<Op, T>{out}, bad);
    } else if (S <= 4 * N && (looks_sorted || S * static_cast<int64_t>(sizeof(typename Op::State) + sizeof(int64_t)) <=
                                                 kStateBytes)) {
      const Buffer<typename Op::State> st(S);
      const Buffer<int64_t> count(S);
      return fold_in_row_order<Op>(src, x, N, S, out, arg, ArrayStates<Op, T>{st.data(), count.data()}, bad);
    }
  }
  scatter_any_order<Op, true, Op::kHasArg, true>(src, x, N, S, 1, out, arg, bad);
}

// ---- the entry points -------------------------------------------------------------------------------

template <class Op, typename T, typename I>
int scatter_index_typed(const ScatterArgs& a, bool sorted, T* out, int64_t* arg) {
  const int64_t B = a.B, N = a.N, S = a.S, F = a.F;
  const T* src = cptr<T>(a.src);
  const I* x = cptr<I>(a.index);
  if (B == 0 || (N == 0 && S == 0)) return kScatterOk;
  if (S == 0) return kIndexOutOfRange;  // every value is >= dim_size = 0
  if (F == 0) {  // nothing to reduce (and no chunk grid: its size divides by F): only the index to check
    bool stepped_down = false;
    for (int64_t r = 0; r < a.rows * N; ++r) {
      if (x[r] < 0 || x[r] >= S) return kIndexOutOfRange;
      stepped_down |= r % N != 0 && x[r] < x[r - 1];
    }
    return sorted && stepped_down ? kIndexUnsorted : kScatterOk;
  }
  std::atomic<bool> bad{false};
  const int64_t W = chunk_items(F);
  const int64_t cpb = ceil_div(S + N, W);
  const bool serial = B * N * F < kSerialElems;
  // A step down among the first rows: not sorted (the sorted reading would open a parallel region to find out).
  bool may_be_sorted = true;
  for (int64_t j = 1, e = std::min<int64_t>(N, W); j < e; ++j) may_be_sorted &= !(x[j] < x[j - 1]);
  // (min/max: the same values and args in any order, and the chunked path's vector kernels are faster)
  const bool rows_in_order = F == 1 && !sorted && !Op::kHasArg;
  if (may_be_sorted && !rows_in_order) {  // the sorted index, read as it is
    std::vector<int64_t> bounds(static_cast<size_t>(2 * B * cpb), -1);
    const SortedIndexSegments<I> segs{x, a.row_of_batch.data(), N, S, cpb, bounds.data(), &bad};
    reduce_chunks<Op>(segs, DirectRows<ArrayLoad<T>>{ArrayLoad<T>{src, B * N * F}, N}, B, F, Outputs<T>{out, arg, S, 0, N},
                      SamePosition(), serial);
    if (!bad.load() && segs.tiles(B)) return kScatterOk;
  }
  if (sorted) return kIndexUnsorted;  // (or out of range: the host finds which, and where)
  bad = false;
  const int64_t threads = std::max<int64_t>(1, torch::stable::get_num_threads());
  // A sum or product folds into an output that fits in cache in one pass on 2 threads too: the partition's
  // passes cost about 3 one-pass rows a row there (1.75 beyond; measured on 1 and 2 threads, docs/design.md),
  // so it pays from 3 threads on (a mean's state arrays make its one pass dearer: 2 threads partition it).
  const bool cached_output = S * static_cast<int64_t>(sizeof(T)) <= kCachedOutputBytes;
  const bool one_pass =
      serial || threads == 1 || may_be_sorted || (kStateInOutput<Op, T> && threads == 2 && cached_output);
  auto batch = [&](int64_t b, bool alone) {
    const T* sb = src + b * N * F;
    const I* xb = x + a.row_of_batch[b] * N;
    int64_t* ab = arg != nullptr ? arg + b * S * F : nullptr;
    if (rows_in_order) {
      return scatter_rows_in_order<Op>(sb, xb, N, S, out + b * S, ab, one_pass || alone, may_be_sorted, &bad);
    }
    scatter_any_order<Op>(sb, xb, N, S, F, out + b * S * F, ab, &bad);
  };
  if (!serial && B >= 2 * threads && N * F <= (int64_t{1} << 20)) {  // many small batches: side by side
    torch::stable::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) batch(b, true);
    });
  } else {
    for (int64_t b = 0; b < B && !bad.load(); ++b) batch(b, false);
  }
  return bad.load() ? kIndexOutOfRange : kScatterOk;
}

// One feature along a plan: each target's rows (perm's, in their order) folded in turn; targets side by side.
template <class Op, typename T>
int scatter_plan_rows_in_order(const ScatterArgs& a, T* out, int64_t* arg) {
  const int64_t B = a.B, N = a.N, S = a.S;
  const T* src = cptr<T>(a.src);
  const int64_t* perm = cptr<int64_t>(a.perm);
  const int64_t* indptr = cptr<int64_t>(a.indptr);
  const Outputs<T> o{out, arg, S, 0, N};
  std::atomic<bool> bad{false};
  auto targets = [&](int64_t u0, int64_t u1) {
    bool wrong = false;
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t b = u / S, t = u % S;
      const int64_t* p = perm + a.row_of_batch[b] * N;
      const int64_t* ip = indptr + a.row_of_batch[b] * (S + 1) + t;
      const T* sb = src + b * N;
      typename Op::State st = Op::identity();
      for (int64_t r = ip[0]; r < ip[1]; ++r) {
        const int64_t j = p[r];
        const bool ok = static_cast<uint64_t>(j) < static_cast<uint64_t>(N);
        wrong |= !ok;
        Op::step(st, to_acc<acc_t<T>>(sb[ok ? j : 0]), j);
      }
      write_result<Op>(&st, 1, ip[1] - ip[0], o, o.at(b, t, 1), b, SamePosition());
    }
    if (wrong) bad.store(true, std::memory_order_relaxed);
  };
  if (B * N < kSerialElems) {
    targets(0, B * S);
  } else {
    const int64_t grain = std::max<int64_t>(64, kSerialElems / 8 / std::max<int64_t>(1, ceil_div(N, S)));
    torch::stable::parallel_for(0, B * S, grain, targets);
  }
  return bad.load() ? kPlanOutOfRange : kScatterOk;
}

template <class Op, typename T>
int scatter_plan_typed(const ScatterArgs& a, T* out, int64_t* arg) {
  const int64_t B = a.B, N = a.N, S = a.S, F = a.F;
  if (B == 0 || S == 0 || F == 0) return kScatterOk;
  if (F == 1 && !Op::kHasArg) return scatter_plan_rows_in_order<Op, T>(a, out, arg);
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
HWY_AFTER_NAMESPACE();
