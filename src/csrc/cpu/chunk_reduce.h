// The chunked merge-path reduction of the CPU kernels: segment_csr (kernels.cpp) and scatter
// (scatter_kernels.cpp) both run it, so a target's result is the same bits on either path.
//
// The merge path of (segment ends, rows) is cut into chunks of a fixed number of items that depends only
// on the feature count (chunk_items), so every core gets the same amount of work whatever the segment
// lengths, and the result does not depend on the thread count. Segments wholly inside a chunk are
// written directly; a segment that crosses chunks leaves per-chunk partial states that a second pass
// merges in chunk order (no atomics).
//
// What reduce_chunks reads is two policies:
//   Segs (the segmentation): S segments per batch; per batch b, items(b) = S + its rows, base(b) (its first
//     row), phase(b) (its first item sits at that item of a chunk: a part of a longer merge path, whose
//     chunk borders the part keeps) and cut(): a chunk's merge coordinates and the offsets of its
//     segments. CsrSegments reads indptr rows; scatter's SortedIndexSegments reads a sorted index.
//   Rows (where the rows are): chunk() gives, for a chunk's rows, a Load and the row base rb such that
//     row r's feature f is element (rb + r) * F + f. DirectRows reads src in place; GatheredRows copies
//     the chunk's rows, taken through a permutation, into a small buffer first.
// A chunk's piece of a segment is reduced by the same code (reduce_piece.h and the kernels it picks;
// segment_sums.h, segment_extrema.h) whatever the policies, with the same lengths and starting items:
// the policies change where the values come from, never the order in which they are folded.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include <torch/csrc/stable/ops.h>

#include "cpu/arg_extremum_rows16.h"
#include "cpu/reduce_piece.h"
#include "cpu/segment_extrema.h"
#include "cpu/segment_sums.h"
#include "index_math.h"
#include "merge_path.h"
#include "reduction_policies.h"

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

constexpr int64_t kChunkElems = 1 << 15;             // elements of work per chunk (rows x features)
constexpr int64_t kFeatureTile = kMaxPieceFeatures;  // features per work unit
constexpr int64_t kMinItems = 64;                    // merge-path items per chunk, at least
// A piece has at most a chunk's rows; the int16 row lanes of min/max (blocks of >= 16 features) hold them.
static_assert(std::max(kMinItems, kChunkElems / 16) <= kMaxRows16, "arg_extremum_rows16's rows fit int16");

// Merge-path items per chunk for F features per row (fixed by F alone).
inline int64_t chunk_items(int64_t F) { return std::max(kMinItems, kChunkElems / std::min(F, kFeatureTile)); }

// Memory for the partial states, kept by each calling thread between calls (up to kKeptScratchBytes):
// allocated anew per call, it was faulted in page by page every time (18% of a 2M x 64 max in `perf`,
// whose states take 8 MB). Larger requests, and a nested request while the thread's buffer is in use, get
// memory of their own. The contents are never read before written.
constexpr size_t kKeptScratchBytes = size_t{64} << 20;
class Scratch {
 public:
  explicit Scratch(size_t bytes) {
    const size_t words = (bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
    Kept& kept = kept_buffer();
    if (bytes <= kKeptScratchBytes && !kept.in_use) {
      if (kept.buf.size() < words) kept.buf.resize(words);
      kept.in_use = true;
      kept_ = &kept;
      ptr_ = kept.buf.data();
    } else {
      own_.reset(new std::max_align_t[words]);
      ptr_ = own_.get();
    }
  }
  ~Scratch() {
    if (kept_ != nullptr) kept_->in_use = false;
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <class T> T* as() const { return static_cast<T*>(ptr_); }

 private:
  struct Kept {
    std::vector<std::max_align_t> buf;
    bool in_use = false;
  };
  static Kept& kept_buffer() {
    thread_local Kept kept;
    return kept;
  }
  Kept* kept_ = nullptr;
  std::unique_ptr<std::max_align_t[]> own_;
  void* ptr_ = nullptr;
};

// Where a reduction writes: out (and arg, unless null) viewed as [B, rows, F]; segment s of batch b is
// row seg0 + s; an empty segment's arg is no_arg.
template <class OutT> struct Outputs {
  OutT* out;
  int64_t* arg;
  int64_t rows, seg0, no_arg;
  int64_t at(int64_t b, int64_t s, int64_t F) const { return (b * rows + seg0 + s) * F; }
};

// The arg of a min/max is the row that holds the value: as the rows are numbered (CSR), or through a map.
struct SamePosition {
  int64_t operator()(int64_t, int64_t row) const { return row; }
};

template <class Op, class OutT, class ArgMap>
inline void write_result(const typename Op::State* st, int64_t fn, int64_t count, const Outputs<OutT>& o, int64_t e,
                         int64_t b, const ArgMap& map) {
  for (int64_t f = 0; f < fn; ++f) o.out[e + f] = static_cast<OutT>(Op::finalize(st[f], count));
  if constexpr (Op::kHasArg) {
    if (o.arg != nullptr) {
      for (int64_t f = 0; f < fn; ++f) o.arg[e + f] = count > 0 ? map(b, st[f].arg) : o.no_arg;
    }
  }
}

// Segments s0 + [k0, k1) of batch b, wholly inside one chunk (q[k]: the first row of segment s0 + k),
// features [f0, f0 + fn); row r's feature f is element (rb + r) * F + f of load. kFn > 0 fixes fn.
template <class Op, int kFn, class OutT, class Load, class ArgMap>
inline void reduce_whole_segments(typename Op::State* st, const Load& load, int64_t rb, const int64_t* q, int64_t k0,
                                  int64_t k1, int64_t b, int64_t s0, int64_t F, int64_t f0, int64_t fn_rt,
                                  const Outputs<OutT>& o, const ArgMap& map) {
  const int64_t fn = kFn > 0 ? kFn : fn_rt;
  if constexpr (kFn == 1 && kSumsSegmentsF1<Op, Load>) {
    if (F == 1) {
      OutT* out = o.out + o.at(b, s0, 1);
      sum_segments_f1(load, q, k0, k1, rb, [&](int64_t k, float sum, int64_t count) {
        out[k] = static_cast<OutT>(Op::finalize(typename Op::State{sum}, count));
      });
      return;
    }
  }
  if constexpr (kFn == 1 && kArgExtremaSegmentsF1<Op, Load>) {
    if (F == 1) {
      OutT* out = o.out + o.at(b, s0, 1);
      int64_t* arg = o.arg != nullptr ? o.arg + o.at(b, s0, 1) : nullptr;
      arg_extrema_segments_f1<ArgExtremumF32<Op>::kIsMax>(
          load, q, k0, k1, rb,
          [out, arg, x = load.x, rb, q, map, b](int64_t k, int64_t r) {  // copies: kept in registers
            out[k] = x[rb + q[k] + r];  // the element itself: OutT is the input type
            if (arg != nullptr) arg[k] = map(b, q[k] + r);
          },
          [out, arg, no_arg = o.no_arg](int64_t k) {
            out[k] = OutT(0);
            if (arg != nullptr) arg[k] = no_arg;
          });
      return;
    }
  }
  for (int64_t k = k0; k < k1; ++k) {
    const int64_t lo = q[k], count = q[k + 1] - lo;
    reduce_piece<Op>(st, load, (rb + lo) * F + f0, F, fn, lo, count);
    write_result<Op>(st, fn, count, o, o.at(b, s0 + k, F) + f0, b, map);
  }
}

// A chunk's cut: its merge coordinates (relative to the batch's base row), and q[k] = the first row
// (absolute) of segment m0.seg + k for k in [0, min(m1.seg, S) - m0.seg]. ok false: skip the chunk.
struct Cut {
  bool ok;
  MergeCoord m0, m1;
  const int64_t* q;
};

// indptr rows (batch b reads the row at batch_offset[b]); the chunk grid starts `phase` items early.
struct CsrSegments {
  const int64_t* ind;
  const int64_t* batch_offset;
  int64_t S;
  int64_t phase0 = 0;
  const int64_t* row(int64_t b) const { return ind + batch_offset[b]; }
  int64_t items(int64_t b) const { return S + row(b)[S] - row(b)[0]; }
  int64_t base(int64_t b) const { return row(b)[0]; }
  int64_t phase(int64_t) const { return phase0; }
  // from: the previous chunk's end (this chunk's start) or null; hint: the segment ends it held.
  int64_t count(int64_t b, int64_t s) const { return row(b)[s + 1] - row(b)[s]; }
  Cut cut(int64_t b, int64_t, int64_t d0, int64_t d1, const MergeCoord* from, int64_t hint,
          std::vector<int64_t>&) const {
    const int64_t* p = row(b);
    const int64_t nnz = p[S] - p[0];
    const MergeCoord m0 = from != nullptr ? *from : merge_path_search(p, S, nnz, d0);
    const MergeCoord m1 = from != nullptr ? merge_path_search_near(p, S, nnz, d1, m0, hint)
                                          : merge_path_search_from(p, S, nnz, d1, m0);
    return {true, m0, m1, p + m0.seg};
  }
};

// Rows read in place: element (b * N + r) * F + f of load.
template <class Load> struct DirectRows {
  Load load;
  int64_t N;
  struct View {
    const Load& load;
    int64_t rb;
  };
  struct Stage {};
  Stage stage(int64_t) const { return {}; }
  View chunk(int64_t b, int64_t, int64_t, Stage&) const { return {load, b * N}; }
};

// The reduction Op of B batches of F features into o. map turns a reduced row into the arg written.
// serial: on the calling thread alone (no parallel region: a small problem, or a caller's own parallel work).
template <class Op, class OutT, class Segs, class Rows, class ArgMap = SamePosition>
void reduce_chunks(const Segs& segs, const Rows& rows, int64_t B, int64_t F, const Outputs<OutT>& o,
                   const ArgMap& map = ArgMap(), bool serial = false) {
  using State = typename Op::State;
  const int64_t S = segs.S;
  if (B == 0 || S == 0 || F == 0) return;
  const int64_t ft = std::min(F, kFeatureTile);
  const int64_t ntiles = ceil_div(F, ft);
  const int64_t W = chunk_items(F);

  std::vector<int64_t> chunk_start(static_cast<size_t>(B) + 1, 0);
  for (int64_t b = 0; b < B; ++b) chunk_start[b + 1] = chunk_start[b] + ceil_div(segs.phase(b) + segs.items(b), W);
  const int64_t nchunks = chunk_start[B];
  // Partial states of segments that cross chunk borders: `carry` for the segment still open at a
  // chunk's end, `head` for one that started before the chunk and ends in it.
  const size_t nstates = static_cast<size_t>(nchunks * F);
  static_assert(std::is_trivial_v<State>, "partial states live in raw scratch memory");
  const Scratch scratch(2 * nstates * sizeof(State));
  State* const carry = scratch.as<State>();
  State* const head = carry + nstates;
  std::vector<int64_t> carry_seg(static_cast<size_t>(nchunks), -1), head_seg(static_cast<size_t>(nchunks), -1);

  auto unit_of = [&](int64_t u, int64_t& c, int64_t& b, int64_t& f0, int64_t& fn) {
    c = u / ntiles;
    f0 = (u % ntiles) * ft;
    fn = std::min(ft, F - f0);
    b = std::upper_bound(chunk_start.begin(), chunk_start.end(), c) - chunk_start.begin() - 1;
  };

  auto for_units = [&](const auto& body) {
    if (serial) return body(int64_t{0}, nchunks * ntiles);
    torch::stable::parallel_for(0, nchunks * ntiles, 1, body);
  };
  for_units([&](int64_t u0, int64_t u1) {
    std::vector<State> st(static_cast<size_t>(ft));
    std::vector<int64_t> qbuf;
    auto stage = rows.stage(W * F);
    int64_t prev_c = -1, prev_b = -1, prev_segs = 0;
    MergeCoord prev_end{0, 0};
    for (int64_t u = u0; u < u1; ++u) {
      int64_t c, b, f0, fn;
      unit_of(u, c, b, f0, fn);
      const int64_t items = segs.items(b), base = segs.base(b);
      const int64_t d0 = std::max<int64_t>(0, (c - chunk_start[b]) * W - segs.phase(b));
      const int64_t d1 = std::min((c - chunk_start[b] + 1) * W - segs.phase(b), items);
      // the previous chunk's end is this one's start (one feature tile: consecutive units)
      // (and it likely holds as many segment ends as the previous one)
      const bool follows = c == prev_c + 1 && b == prev_b;
      const Cut cut = segs.cut(b, c, d0, d1, follows ? &prev_end : nullptr, prev_segs, qbuf);
      prev_c = ntiles == 1 && cut.ok ? c : -2;
      prev_b = b;
      if (!cut.ok) continue;
      const MergeCoord m0 = cut.m0, m1 = cut.m1;
      const int64_t* q = cut.q;
      prev_end = m1;
      prev_segs = m1.seg - m0.seg;
      const auto rv = rows.chunk(b, base + m0.row, base + m1.row, stage);
      // Segments [m0.seg, m1.seg) end in this chunk; m1.seg (if < S) is still open at its end.
      const int64_t s_end = std::min(m1.seg, S);
      int64_t s = m0.seg;
      if (s < s_end && q[0] - base < m0.row) {  // started in an earlier chunk, ends here
        const int64_t lo = m0.row, count = q[1] - base - lo;
        reduce_piece<Op>(head + c * F + f0, rv.load, (rv.rb + base + lo) * F + f0, F, fn, base + lo, count);
        if (f0 == 0) head_seg[c] = b * S + s;
        ++s;
      }
      if (fn == 1) {  // one feature: the state stays in a register
        State one[1];
        reduce_whole_segments<Op, 1>(one, rv.load, rv.rb, q, s - m0.seg, s_end - m0.seg, b, m0.seg, F, f0, 1, o, map);
      } else {
        reduce_whole_segments<Op, 0>(st.data(), rv.load, rv.rb, q, s - m0.seg, s_end - m0.seg, b, m0.seg, F, f0, fn, o,
                                     map);
      }
      if (m1.seg < S) {  // still open at the chunk's end
        const int64_t lo = std::max(q[m1.seg - m0.seg] - base, m0.row), count = m1.row - lo;
        if (count > 0) {
          reduce_piece<Op>(carry + c * F + f0, rv.load, (rv.rb + base + lo) * F + f0, F, fn, base + lo, count);
          if (f0 == 0) carry_seg[c] = b * S + m1.seg;
        }
      }
    }
  });

  // Second pass: each crossing segment is finished by the chunk holding its end, merging the carries
  // of the chunks before it in chunk order.
  for_units([&](int64_t u0, int64_t u1) {
    std::vector<State> st(static_cast<size_t>(ft));
    for (int64_t u = u0; u < u1; ++u) {
      int64_t c, b, f0, fn;
      unit_of(u, c, b, f0, fn);
      const int64_t gs = head_seg[c];
      if (gs < 0) continue;
      int64_t first = c;
      while (first > 0 && carry_seg[first - 1] == gs) --first;
      for (int64_t f = 0; f < fn; ++f) {
        State x = first < c ? carry[first * F + f0 + f] : Op::identity();
        for (int64_t k = first + 1; k < c; ++k) Op::merge(x, carry[k * F + f0 + f]);
        Op::merge(x, head[c * F + f0 + f]);
        st[f] = x;
      }
      const int64_t s = gs - b * S;
      write_result<Op>(st.data(), fn, segs.count(b, s), o, o.at(b, s, F) + f0, b, map);
    }
  });
}

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
