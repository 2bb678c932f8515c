// CPU kernels of torch_segops.
//
// Reductions: the merge path of (segment ends, rows) is cut into chunks of a fixed number of items that
// depends only on the feature count, so every core gets the same amount of work whatever the segment
// lengths, and the result does not depend on the thread count. Segments wholly inside a chunk are
// written directly; a segment that crosses chunks leaves per-chunk partial states that a second pass
// merges in chunk order (no atomics). Features are the contiguous inner loop (vectorised); with fewer
// than 8 features, rows are spread over independent lanes so the loop still has parallel chains.
//
// Expansions (gather, softmax, softmax backward): every output row is written once, by row chunks.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "csr_args.h"
#include "merge_path.h"
#include "reducers.h"
#include "cpu/reduce_piece.h"
#include "cpu/vec_math.h"

namespace torch_segops {
namespace {

using cpu::reduce_piece;
using cpu::to_acc;

constexpr int64_t kChunkElems = 1 << 15;  // elements of work per chunk (rows x features)
constexpr int64_t kFeatureTile = cpu::kMaxPieceFeatures;  // features per work unit
constexpr int64_t kMinItems = 64;         // merge-path items per chunk, at least

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename T> const T* cptr(const Tensor& t) { return static_cast<const T*>(t.const_data_ptr()); }
template <typename T> T* mptr(const Tensor& t) { return static_cast<T*>(t.mutable_data_ptr()); }

// ---- indptr validation ------------------------------------------------------------------------------

// Every indptr row must satisfy 0 <= indptr[0] <= ... <= indptr[S] <= limit (limit < 0: no bound).
// Returns the largest indptr[..., -1].
int64_t validate_indptr(const CsrArgs& a, int64_t limit, const char* op, const char* limit_what) {
  const int64_t len = a.S + 1;
  const int64_t total = a.indptr_rows * len;
  const int64_t* p = cptr<int64_t>(a.indptr);
  constexpr int64_t kBlock = 1 << 16;
  const int64_t nblocks = ceil_div(total, kBlock);
  std::atomic<int64_t> first_bad{total};
  std::atomic<int64_t> max_last{0};
  torch::stable::parallel_for(0, nblocks, 1, [&](int64_t b0, int64_t b1) {
    int64_t local_max = 0;
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t i0 = blk * kBlock, i1 = std::min(total, i0 + kBlock);
      int64_t k = i0 % len;  // position inside the indptr row, advanced without division
      for (int64_t i = i0; i < i1; ++i, ++k) {
        if (k == len) k = 0;
        const bool bad = k == 0 ? p[i] < 0 : p[i] < p[i - 1] || (k == len - 1 && limit >= 0 && p[i] > limit);
        if (bad) {
          int64_t cur = first_bad.load();
          while (i < cur && !first_bad.compare_exchange_weak(cur, i)) {
          }
          break;
        }
        if (k == len - 1) local_max = std::max(local_max, p[i]);
      }
    }
    int64_t cur = max_last.load();
    while (local_max > cur && !max_last.compare_exchange_weak(cur, local_max)) {
    }
  });
  const int64_t i = first_bad.load();
  if (i < total) {
    const int64_t row = i / len, k = i % len;
    std::string at = a.indptr_rows > 1 ? "indptr[row " + std::to_string(row) + "][" : "indptr[";
    if (k == 0) fail(op, "indptr must start at a non-negative offset, got ", at, "0] = ", p[i]);
    if (p[i] < p[i - 1])
      fail(op, "indptr must be non-decreasing, got ", at, k, "] = ", p[i], " < ", at, k - 1, "] = ", p[i - 1]);
    fail(op, "indptr[..., -1] must be <= ", limit_what, " = ", limit, ", got ", at, k, "] = ", p[i]);
  }
  return max_last.load();
}

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
  std::vector<State> carry(static_cast<size_t>(nchunks * F)), head(static_cast<size_t>(nchunks * F));
  std::vector<int64_t> carry_seg(static_cast<size_t>(nchunks), -1), head_seg(static_cast<size_t>(nchunks), -1);

  auto unit_of = [&](int64_t u, int64_t& c, int64_t& b, int64_t& f0, int64_t& fn) {
    c = u / ntiles;
    f0 = (u % ntiles) * ft;
    fn = std::min(ft, F - f0);
    b = std::upper_bound(chunk_start.begin(), chunk_start.end(), c) - chunk_start.begin() - 1;
  };

  torch::stable::parallel_for(0, nchunks * ntiles, 1, [&](int64_t u0, int64_t u1) {
    std::vector<State> st(static_cast<size_t>(ft));
    for (int64_t u = u0; u < u1; ++u) {
      int64_t c, b, f0, fn;
      unit_of(u, c, b, f0, fn);
      const int64_t* p = ind + a.batch_offset[b];
      const int64_t base = p[0], nnz = p[S] - p[0];
      const int64_t d0 = (c - chunk_start[b]) * W;
      const MergeCoord m0 = merge_path_search(p, S, nnz, d0);
      const MergeCoord m1 = merge_path_search(p, S, nnz, std::min(d0 + W, S + nnz));
      for (int64_t s = m0.seg; s <= m1.seg && s < S; ++s) {
        const int64_t seg_lo = p[s] - base, seg_hi = p[s + 1] - base;
        const int64_t lo = std::max(seg_lo, m0.row), hi = std::min(seg_hi, m1.row);
        const int64_t elem0 = (b * N + base + lo) * F + f0;
        const int64_t count = std::max<int64_t>(hi - lo, 0);
        if (s == m1.seg) {  // still open at the chunk's end
          if (count == 0) continue;
          reduce_piece<Op>(carry.data() + c * F + f0, load, elem0, F, fn, base + lo, count);
          if (f0 == 0) carry_seg[c] = b * S + s;
        } else if (s == m0.seg && seg_lo < m0.row) {  // started in an earlier chunk, ends here
          reduce_piece<Op>(head.data() + c * F + f0, load, elem0, F, fn, base + lo, count);
          if (f0 == 0) head_seg[c] = b * S + s;
        } else {
          reduce_piece<Op>(st.data(), load, elem0, F, fn, base + lo, count);
          write_result<Op>(st.data(), fn, seg_hi - seg_lo, N, out, arg, (b * S + s) * F + f0);
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

template <typename A, typename F>
void dispatch_reduce(Reduce r, const F& f) {
  switch (r) {
    case Reduce::Sum: return f(TypeTag<SumOp<A>>{});
    case Reduce::Mean: return f(TypeTag<MeanOp<A>>{});
    case Reduce::Min: return f(TypeTag<ArgExtremumOp<A, false>>{});
    case Reduce::Max: return f(TypeTag<ArgExtremumOp<A, true>>{});
    case Reduce::LogSumExp: return f(TypeTag<LogSumExpOp<A>>{});
  }
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

// ---- ops -------------------------------------------------------------------------------------------

std::tuple<Tensor, Tensor> segment_reduce_cpu(Tensor src, Tensor indptr, std::string reduce) {
  const char* op = "segment_csr";
  const Reduce r = parse_reduce(reduce, op);
  CsrArgs a = make_csr_args(src, indptr, op);
  const bool with_arg = r == Reduce::Min || r == Reduce::Max;
  const bool allow_int = r == Reduce::Sum || with_arg;
  Tensor out = torch::stable::new_empty(src, sizes_with_dim(src, a.dim, a.S));
  Tensor arg = with_arg ? torch::stable::new_empty(src, sizes_with_dim(src, a.dim, a.S), ScalarType::Long)
                        : torch::stable::new_empty(src, {0}, ScalarType::Long);
  dispatch_dtype(src.scalar_type(), allow_int, op, "src", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    validate_indptr(a, a.N, op, "src.size(dim)");
    const T* x = cptr<T>(a.src);
    auto load = [x](int64_t i) { return to_acc<A>(x[i]); };
    dispatch_reduce<A>(r, [&](auto op_tag) {
      using Op = typename decltype(op_tag)::type;
      reduce_csr<Op>(a, load, mptr<T>(out), with_arg ? mptr<int64_t>(arg) : nullptr);
    });
  });
  return {out, arg};
}

Tensor gather_csr_cpu(Tensor src, Tensor indptr, int64_t size) {
  const char* op = "gather_csr";
  CsrArgs a = make_csr_args(src, indptr, op);
  SEGOPS_CHECK(a.N == a.S, op, "src.size(dim) must equal the number of segments indptr.size(-1) - 1 = ", a.S,
               ", got ", a.N);
  SEGOPS_CHECK(size >= -1, op, "size must be >= 0 (or -1 to read it from indptr), got ", size);
  Tensor out;
  dispatch_dtype(src.scalar_type(), true, op, "src", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t needed = validate_indptr(a, size, op, "size");
    const int64_t R = size >= 0 ? size : needed;
    out = torch::stable::new_empty(src, sizes_with_dim(src, a.dim, R));
    const T* x = cptr<T>(a.src);
    expand_csr(a, R, mptr<T>(out), [x](int64_t, int64_t se) { return x[se]; });
  });
  return out;
}

Tensor segment_softmax_cpu(Tensor src, Tensor indptr) {
  const char* op = "segment_softmax_csr";
  CsrArgs a = make_csr_args(src, indptr, op);
  Tensor out = torch::stable::new_empty(src, src.sizes());
  dispatch_dtype(src.scalar_type(), false, op, "src", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    validate_indptr(a, a.N, op, "src.size(dim)");
    std::vector<A> lse(static_cast<size_t>(a.B * a.S * a.F));
    const T* x = cptr<T>(a.src);
    reduce_csr<LogSumExpOp<A>>(a, [x](int64_t i) { return to_acc<A>(x[i]); }, lse.data(), nullptr);
    const A* l = lse.data();
    // A +inf in the segment makes the whole segment NaN, as torch.softmax does (inf - inf).
    constexpr A kInf = std::numeric_limits<A>::infinity(), kNaN = std::numeric_limits<A>::quiet_NaN();
    expand_csr(a, a.N, mptr<T>(out), [x, l](int64_t re, int64_t se) {
      return static_cast<T>(l[se] == kInf ? kNaN : cpu::exp_approx(to_acc<A>(x[re]) - l[se]));
    });
  });
  return out;
}

Tensor segment_softmax_backward_cpu(Tensor grad, Tensor out, Tensor indptr) {
  const char* op = "segment_softmax_csr (backward)";
  SEGOPS_CHECK(grad.sizes().equals(out.sizes()) && grad.scalar_type() == out.scalar_type(), op,
               "grad and out must have the same shape and dtype");
  CsrArgs a = make_csr_args(out, indptr, op, "out");
  const Tensor g = torch::stable::contiguous(grad);
  Tensor grad_in = torch::stable::new_empty(out, out.sizes());
  dispatch_dtype(out.scalar_type(), false, op, "out", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    validate_indptr(a, a.N, op, "out.size(dim)");
    const T* y = cptr<T>(a.src);
    const T* gp = cptr<T>(g);
    std::vector<A> dot(static_cast<size_t>(a.B * a.S * a.F));
    reduce_csr<SumOp<A>>(
        a, [y, gp](int64_t i) { return static_cast<A>(gp[i]) * static_cast<A>(y[i]); }, dot.data(), nullptr);
    const A* d = dot.data();
    expand_csr(a, a.N, mptr<T>(grad_in), [y, gp, d](int64_t re, int64_t se) {
      return static_cast<T>(static_cast<A>(y[re]) * (static_cast<A>(gp[re]) - d[se]));
    });
  });
  return grad_in;
}

}  // namespace
}  // namespace torch_segops

STABLE_TORCH_LIBRARY_IMPL(torch_segops, CPU, m) {
  m.impl("segment_reduce", TORCH_BOX(&torch_segops::segment_reduce_cpu));
  m.impl("gather_csr", TORCH_BOX(&torch_segops::gather_csr_cpu));
  m.impl("segment_softmax", TORCH_BOX(&torch_segops::segment_softmax_cpu));
  m.impl("segment_softmax_backward", TORCH_BOX(&torch_segops::segment_softmax_backward_cpu));
}
