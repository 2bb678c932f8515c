// Typed CPU kernels: merge-path chunked reductions and row-chunked expansions. This file is compiled
// once per instruction set (SEGOPS_CPU_ISA: baseline x86-64 / any CPU, and avx2 = x86-64-v3 where
// the target is x86-64); kernels.h picks one at run time.
//
// Reductions: the merge path of (segment ends, rows) is cut into chunks of a fixed number of items that
// depends only on the feature count, so every core gets the same amount of work whatever the segment
// lengths, and the result does not depend on the thread count. Segments wholly inside a chunk are
// written directly; a segment that crosses chunks leaves per-chunk partial states that a second pass
// merges in chunk order (no atomics).
//
// Expansions (gather, softmax, softmax backward): every output row is written once, by row chunks.
//
// Our own code here is internal (anonymous or per-set inline namespaces). Inline functions of the
// standard library and torch headers that stay out of line are shared across the sets: the baseline
// objects come first at link time, so the linker keeps their baseline copies.
#include <algorithm>
#include <cstddef>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "cpu/kernels.h"
#include "cpu/reduce_piece.h"
#include "cpu/segment_extrema.h"
#include "cpu/segment_sums.h"
#include "cpu/vec_math.h"
#include "csr_args.h"
#include "index_math.h"
#include "merge_path.h"
#include "reducers.h"
#include "reductions.h"
#include "tensor_ptr.h"

#ifndef SEGOPS_CPU_ISA
#error "SEGOPS_CPU_ISA must name the instruction set this file is compiled for"
#endif
#define SEGOPS_CAT2(a, b) a##b
#define SEGOPS_CAT(a, b) SEGOPS_CAT2(a, b)
#define SEGOPS_STR2(a) #a
#define SEGOPS_STR(a) SEGOPS_STR2(a)

namespace torch_segops {
namespace cpu {
namespace {

constexpr int64_t kChunkElems = 1 << 15;  // elements of work per chunk (rows x features)
constexpr int64_t kFeatureTile = kMaxPieceFeatures;  // features per work unit
constexpr int64_t kMinItems = 64;         // merge-path items per chunk, at least
// A piece has at most a chunk's rows; the int16 row lanes of min/max (blocks of >= 16 features) hold them.
static_assert(std::max(kMinItems, kChunkElems / 16) <= kMaxRows16, "arg_extremum_rows16's rows fit int16");


// Memory for reduce_csr's partial states, kept by each calling thread between calls (up to
// kKeptScratchBytes): allocated anew per call, it was faulted in page by page every time (18% of a
// 2M x 64 max in `perf`, whose states take 8 MB). Larger requests, and a nested request while the
// thread's buffer is in use, get memory of their own. The contents are never read before written.
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


// ---- reductions ------------------------------------------------------------------------------------

template <class Op, class OutT>
inline void write_result(const typename Op::State* st, int64_t fn, int64_t count, int64_t N, OutT* out,
                         int64_t* arg, int64_t o) {
  for (int64_t f = 0; f < fn; ++f) out[o + f] = static_cast<OutT>(Op::finalize(st[f], count));
  if constexpr (Op::kHasArg) {
    if (arg != nullptr) {
      for (int64_t f = 0; f < fn; ++f) arg[o + f] = count > 0 ? st[f].arg : N;
    }
  }
}

// Segments [s, s_end) of batch b, wholly inside one chunk, features [f0, f0 + fn); kFn > 0 fixes fn.
template <class Op, int kFn, class OutT, class Load>
inline void reduce_whole_segments(typename Op::State* st, const Load& load, const int64_t* p, int64_t s,
                                  int64_t s_end, int64_t b, const CsrArgs& a, int64_t f0, int64_t fn_rt,
                                  OutT* out, int64_t* arg) {
  const int64_t fn = kFn > 0 ? kFn : fn_rt, N = a.N, F = a.F;
#if defined(__AVX2__)
  if constexpr (kFn == 1 && kSumsSegmentsF1<Op, Load>) {
    if (F == 1) {
      sum_segments_f1(load, p, s, s_end, b * N, [&](int64_t k, float sum, int64_t count) {
        out[b * a.S + k] = static_cast<OutT>(Op::finalize(typename Op::State{sum}, count));
      });
      return;
    }
  }
  if constexpr (kFn == 1 && kArgExtremaSegmentsF1<Op, Load>) {
    if (F == 1) {
      const int64_t o = b * a.S;
      arg_extrema_segments_f1<ArgExtremumF32<Op>::kIsMax>(
          load, p, s, s_end, b * N,
          [&](int64_t k, int64_t r) {
            out[o + k] = load.x[b * N + p[k] + r];  // the element itself: OutT is the input type
            if (arg != nullptr) arg[o + k] = p[k] + r;
          },
          [&](int64_t k) {
            out[o + k] = OutT(0);
            if (arg != nullptr) arg[o + k] = N;
          });
      return;
    }
  }
#endif
  for (; s < s_end; ++s) {
    const int64_t lo = p[s], count = p[s + 1] - lo;
    reduce_piece<Op>(st, load, (b * N + lo) * F + f0, F, fn, lo, count);
    write_result<Op>(st, fn, count, N, out, arg, (b * a.S + s) * F + f0);
  }
}

// out (and arg) are [B, S, F]; load(i) reads element i of the [B, N, F] input.
template <class Op, class OutT, class Load>
void reduce_csr(const CsrArgs& a, const Load& load, OutT* out, int64_t* arg) {
  using State = typename Op::State;
  const int64_t B = a.B, N = a.N, S = a.S, F = a.F;
  if (B == 0 || S == 0 || F == 0) return;
  const int64_t* ind = cptr<int64_t>(a.indptr);
  const int64_t ft = std::min(F, kFeatureTile);
  const int64_t ntiles = ceil_div(F, ft);
  const int64_t W = std::max(kMinItems, kChunkElems / ft);

  std::vector<int64_t> chunk_start(static_cast<size_t>(B) + 1, 0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* p = ind + a.batch_offset[b];
    chunk_start[b + 1] = chunk_start[b] + ceil_div(S + p[S] - p[0], W);
  }
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

  torch::stable::parallel_for(0, nchunks * ntiles, 1, [&](int64_t u0, int64_t u1) {
    std::vector<State> st(static_cast<size_t>(ft));
    int64_t prev_c = -1, prev_b = -1, prev_segs = 0;
    MergeCoord prev_end{0, 0};
    for (int64_t u = u0; u < u1; ++u) {
      int64_t c, b, f0, fn;
      unit_of(u, c, b, f0, fn);
      const int64_t* p = ind + a.batch_offset[b];
      const int64_t base = p[0], nnz = p[S] - p[0];
      const int64_t d0 = (c - chunk_start[b]) * W;
      // the previous chunk's end is this one's start (one feature tile: consecutive units)
      // (and it likely holds as many segment ends as the previous one)
      const bool follows = c == prev_c + 1 && b == prev_b;
      const MergeCoord m0 = follows ? prev_end : merge_path_search(p, S, nnz, d0);
      const int64_t d1 = std::min(d0 + W, S + nnz);
      const MergeCoord m1 = follows ? merge_path_search_near(p, S, nnz, d1, m0, prev_segs)
                                    : merge_path_search_from(p, S, nnz, d1, m0);
      prev_c = ntiles == 1 ? c : -2;
      prev_b = b;
      prev_end = m1;
      prev_segs = m1.seg - m0.seg;
      // Segments [m0.seg, m1.seg) end in this chunk; m1.seg (if < S) is still open at its end.
      const int64_t s_end = std::min(m1.seg, S);
      int64_t s = m0.seg;
      if (s < s_end && p[s] - base < m0.row) {  // started in an earlier chunk, ends here
        const int64_t lo = m0.row, count = p[s + 1] - base - lo;
        reduce_piece<Op>(head + c * F + f0, load, (b * N + base + lo) * F + f0, F, fn, base + lo, count);
        if (f0 == 0) head_seg[c] = b * S + s;
        ++s;
      }
      if (fn == 1) {  // one feature: the state stays in a register
        State one[1];
        reduce_whole_segments<Op, 1>(one, load, p, s, s_end, b, a, f0, 1, out, arg);
      } else {
        reduce_whole_segments<Op, 0>(st.data(), load, p, s, s_end, b, a, f0, fn, out, arg);
      }
      if (m1.seg < S) {  // still open at the chunk's end
        const int64_t lo = std::max(p[m1.seg] - base, m0.row), count = m1.row - lo;
        if (count > 0) {
          reduce_piece<Op>(carry + c * F + f0, load, (b * N + base + lo) * F + f0, F, fn, base + lo, count);
          if (f0 == 0) carry_seg[c] = b * S + m1.seg;
        }
      }
    }
  });

  // Second pass: each crossing segment is finished by the chunk holding its end, merging the carries
  // of the chunks before it in chunk order.
  torch::stable::parallel_for(0, nchunks * ntiles, 1, [&](int64_t u0, int64_t u1) {
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
      const int64_t* p = ind + a.batch_offset[b];
      const int64_t s = gs - b * S;
      write_result<Op>(st.data(), fn, p[s + 1] - p[s], N, out, arg, gs * F + f0);
    }
  });
}

// ---- expansions ------------------------------------------------------------------------------------

// out is [B, R, F]. Row r of batch b inside [indptr[0], indptr[S]) belongs to segment s and gets
// fn(row_elem, seg_elem) per feature, with row_elem = (b * R + r) * F + f and seg_elem = (b * S + s) * F + f;
// other rows get 0.
template <class OutT, class Fn>
void expand_csr(const CsrArgs& a, int64_t R, OutT* out, const Fn& fn) {
  const int64_t B = a.B, S = a.S, F = a.F;
  if (B == 0 || R == 0 || F == 0) return;
  const int64_t* ind = cptr<int64_t>(a.indptr);
  const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkElems / F);
  const int64_t chunks_per_batch = ceil_div(R, rows_per_chunk);
  torch::stable::parallel_for(0, B * chunks_per_batch, 1, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t b = u / chunks_per_batch;
      const int64_t r0 = (u % chunks_per_batch) * rows_per_chunk, r1 = std::min(R, r0 + rows_per_chunk);
      const int64_t* p = ind + a.batch_offset[b];
      const int64_t lo = std::min(std::max(r0, p[0]), r1), hi = std::max(std::min(r1, p[S]), lo);
      OutT* o = out + b * R * F;
      std::fill(o + r0 * F, o + lo * F, OutT(0));
      std::fill(o + hi * F, o + r1 * F, OutT(0));
      if (lo == hi) continue;
      int64_t s = std::upper_bound(p, p + S + 1, lo) - p - 1;
      for (int64_t r = lo; r < hi; ++r) {
        while (p[s + 1] <= r) ++s;
        const int64_t re = (b * R + r) * F, se = (b * S + s) * F;
        for (int64_t f = 0; f < F; ++f) o[r * F + f] = fn(re + f, se + f);
      }
    }
  });
}

// ---- typed entry points -----------------------------------------------------------------------------

void segment_reduce_kernel(const CsrArgs& a, Reduce r, const Tensor& out, const Tensor* arg) {
  dispatch_dtype(a.src.scalar_type(), true, "segment_csr", "src", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const ArrayLoad<T> load{cptr<T>(a.src), a.src.numel()};
    visit_reducer<A>(r, [&](auto op_tag) {
      using Op = typename decltype(op_tag)::type;
      reduce_csr<Op>(a, load, mptr<T>(out), arg != nullptr ? mptr<int64_t>(*arg) : nullptr);
    });
  });
}

void gather_kernel(const CsrArgs& a, int64_t R, const Tensor& out) {
  dispatch_dtype(a.src.scalar_type(), true, "gather_csr", "src", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = cptr<T>(a.src);
    expand_csr(a, R, mptr<T>(out), [x](int64_t, int64_t se) { return x[se]; });
  });
}

void softmax_kernel(const CsrArgs& a, const Tensor& out) {
  dispatch_dtype(a.src.scalar_type(), false, "segment_softmax_csr", "src", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    using Stats = StateResult<LogSumExpOp<A>>;  // per segment and feature: max and sum of exp(x - max)
    using State = typename Stats::State;
    const std::unique_ptr<State[]> stats(new State[static_cast<size_t>(a.B * a.S * a.F)]);  // all written
    const T* x = cptr<T>(a.src);
    reduce_csr<Stats>(a, [x](int64_t i) { return to_acc<A>(x[i]); }, stats.get(), nullptr);
    const State* st = stats.get();
    // exp(x - max) / sum in A, never exp(x - lse) (see StateResult). A +inf in the segment makes the
    // whole segment NaN, as torch.softmax does (inf - inf).
    constexpr A kInf = std::numeric_limits<A>::infinity(), kNaN = std::numeric_limits<A>::quiet_NaN();
    expand_csr(a, a.N, mptr<T>(out), [x, st](int64_t re, int64_t se) {
      const State& s = st[se];
      return static_cast<T>(s.m == kInf ? kNaN : exp_approx(to_acc<A>(x[re]) - s.m) / s.s);
    });
  });
}

// a.src is the softmax output y; grad_in = y * (grad - sum(grad * y)).
void softmax_backward_kernel(const CsrArgs& a, const Tensor& grad, const Tensor& grad_in) {
  dispatch_dtype(a.src.scalar_type(), false, "segment_softmax_csr (backward)", "out", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* y = cptr<T>(a.src);
    const T* gp = cptr<T>(grad);
    const std::unique_ptr<A[]> dot(new A[static_cast<size_t>(a.B * a.S * a.F)]);  // all written by reduce_csr
    reduce_csr<SumOp<A>>(
        a, [y, gp](int64_t i) { return to_acc<A>(gp[i]) * to_acc<A>(y[i]); }, dot.get(), nullptr);
    const A* d = dot.get();
    expand_csr(a, a.N, mptr<T>(grad_in), [y, gp, d](int64_t re, int64_t se) {
      return static_cast<T>(to_acc<A>(y[re]) * (to_acc<A>(gp[re]) - d[se]));
    });
  });
}

}  // namespace

const Kernels& SEGOPS_CAT(kernels_, SEGOPS_CPU_ISA)() {
  static const Kernels k{SEGOPS_STR(SEGOPS_CPU_ISA), segment_reduce_kernel, gather_kernel, softmax_kernel,
                         softmax_backward_kernel};
  return k;
}

}  // namespace cpu
}  // namespace torch_segops
