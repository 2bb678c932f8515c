// Typed CPU kernels: merge-path chunked reductions and row-chunked expansions. This file is compiled
// once per instruction set (SEGOPS_CPU_ISA: baseline, any CPU of the architecture, and avx2 = x86-64-v3
// where the target is x86-64), each object as Google Highway's static target of its flags; cpu/dispatch.cpp
// picks one at run time.
//
// Reductions: the chunked merge-path reduction of cpu/chunk_reduce.h over the indptr rows and src in place.
//
// Expansions (gather, softmax, softmax backward): every output row is written once, by row chunks.
//
// Our own code here is internal (anonymous or per-set inline namespaces). Inline functions of the
// standard library and torch headers that stay out of line are shared across the sets: the baseline
// objects come first at link time, so the linker keeps their baseline copies.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include <hwy/highway.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "cpu/array_loads.h"
#include "cpu/chunk_reduce.h"
#include "cpu/exp_lanes.h"
#include "cpu/kernels.h"
#include "cpu/scatter_kernels.h"
#include "cpu/vec_math.h"
#include "csr_args.h"
#include "index_math.h"
#include "merge_path.h"
#include "reduction_policies.h"
#include "reduction_table.h"
#include "tensor_ptr.h"

#ifndef SEGOPS_CPU_ISA
#error "SEGOPS_CPU_ISA must name the instruction set this file is compiled for"
#endif
#define SEGOPS_CAT2(a, b) a##b
#define SEGOPS_CAT(a, b) SEGOPS_CAT2(a, b)
#define SEGOPS_STR2(a) #a
#define SEGOPS_STR(a) SEGOPS_STR2(a)
// Each object's flags make it Highway's static target (CMakeLists.txt): checked for the x86 objects.
#define SEGOPS_ISA_avx2 1
#define SEGOPS_ISA_avx512 2
#define SEGOPS_ISA_sse4 3
#if SEGOPS_CAT(SEGOPS_ISA_, SEGOPS_CPU_ISA) == 3 && HWY_STATIC_TARGET != HWY_SSE4
#error "the sse4 object's flags must make Highway's static target SSE4 (CMakeLists.txt)"
#elif SEGOPS_CAT(SEGOPS_ISA_, SEGOPS_CPU_ISA) == 1 && HWY_STATIC_TARGET != HWY_AVX2
#error "the avx2 object's flags must make Highway's static target AVX2 (CMakeLists.txt)"
#elif SEGOPS_CAT(SEGOPS_ISA_, SEGOPS_CPU_ISA) == 2 && HWY_STATIC_TARGET != HWY_AVX3
#error "the avx512 object's flags must make Highway's static target AVX3 (CMakeLists.txt)"
#endif

HWY_BEFORE_NAMESPACE();
namespace torch_segops {
namespace cpu {
namespace {

// ---- reductions ------------------------------------------------------------------------------------

// out (and arg) are [B, S, F]; load(i) reads element i of the [B, N, F] input.
template <class Op, class OutT, class Load>
void reduce_csr(const CsrArgs& a, const Load& load, OutT* out, int64_t* arg) {
  if (a.B == 0 || a.S == 0 || a.F == 0) return;
  const CsrSegments segs{cptr<int64_t>(a.indptr), a.batch_offset.data(), a.S};
  reduce_chunks<Op>(segs, DirectRows<Load>{load, a.N}, a.B, a.F, Outputs<OutT>{out, arg, a.S, 0, a.N});
}

// ---- expansions ------------------------------------------------------------------------------------

// out is [B, R, F]. Every row is written once, by row chunks: rows outside [indptr[0], indptr[S]) of their
// batch get 0, and rows(o, p, lo, hi, b) writes rows [lo, hi) of batch b (o: the batch's output, p: its
// indptr row), which lie inside.
template <class OutT, class Rows>
void expand_csr_rows(const CsrArgs& a, int64_t R, OutT* out, const Rows& rows) {
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
      if (lo < hi) rows(o, p, lo, hi, b);
    }
  });
}

// Row r of batch b inside [indptr[0], indptr[S]) belongs to segment s and gets fn(row_elem, seg_elem) per
// feature, with row_elem = (b * R + r) * F + f and seg_elem = (b * S + s) * F + f.
template <class OutT, class Fn>
void expand_csr(const CsrArgs& a, int64_t R, OutT* out, const Fn& fn) {
  const int64_t S = a.S, F = a.F;
  expand_csr_rows(a, R, out, [&](OutT* o, const int64_t* p, int64_t lo, int64_t hi, int64_t b) {
    int64_t s = std::upper_bound(p, p + S + 1, lo) - p - 1;
    for (int64_t r = lo; r < hi; ++r) {
      while (p[s + 1] <= r) ++s;
      const int64_t re = (b * R + r) * F, se = (b * S + s) * F;
      for (int64_t f = 0; f < F; ++f) o[r * F + f] = fn(re + f, se + f);
    }
  });
}

// Gather rows [lo, hi) of batch b into o (the batch's output) from x ([B, S, F]), segment by segment: a fill of
// its rows (one feature) or a copy of its row into each (expand_csr's per-row segment step, offsets and
// run-time feature loop took 23 instructions a row at F = 1 on aarch64: benchmarks/aarch64_insns.py).
template <class T>
void gather_rows(T* o, const T* x, const int64_t* p, int64_t lo, int64_t hi, int64_t b, int64_t S, int64_t F) {
  int64_t s = std::upper_bound(p, p + S + 1, lo) - p - 1;  // lo < hi <= p[S]: s < S
  for (int64_t r = lo; r < hi; ++s) {
    const int64_t end = std::min(p[s + 1], hi);
    if (end <= r) continue;  // an empty segment
    const T* xs = x + (b * S + s) * F;
    if (F == 1) {
      // whole vectors of the value's bits, the last one past the segment's end where the chunk allows (rows
      // [end, hi) belong to the next segments, written after): no scalar tail per segment
      using U = std::conditional_t<sizeof(T) == 1, uint8_t, std::conditional_t<sizeof(T) == 2, uint16_t,
                std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
      static_assert(sizeof(U) == sizeof(T), "a lane per value");
      const hn::ScalableTag<U> du;
      constexpr int64_t kL = static_cast<int64_t>(hn::MaxLanes(du));
      U bits;
      std::memcpy(&bits, xs, sizeof bits);
      const auto v = hn::Set(du, bits);
      U* ou = reinterpret_cast<U*>(o);  // the tail stores as U too: no two types stored to one row
      for (; r < end && r + kL <= hi; r += kL) hn::StoreU(v, du, ou + r);
      for (; r < end; ++r) ou[r] = bits;
    } else if (F < 16) {
      for (; r < end; ++r) {
        for (int64_t f = 0; f < F; ++f) o[r * F + f] = xs[f];
      }
    } else {
      for (; r < end; ++r) std::memcpy(o + r * F, xs, static_cast<size_t>(F) * sizeof(T));
    }
    r = end;  // the next segment's first row (rewriting any the F = 1 blocks wrote past this one's end)
  }
}

// Softmax of N vectors of float x into o: exp(x - m) / sum, NaN in the lanes whose m is +inf (kInfLanes).
template <bool kInfLanes, int N, class D, class V = hn::Vec<D>>
HWY_INLINE void softmax_vectors(D d, const float* x, const V (&m)[N], const V (&sum)[N], float* o) {
  V t[N];
  for (int i = 0; i < N; ++i) t[i] = hn::Sub(hn::LoadU(d, x + i * kF32Lanes), m[i]);
  exp_nonpos_lanes(d, t);
  for (int i = 0; i < N; ++i) {
    t[i] = hn::Div(t[i], sum[i]);
    if constexpr (kInfLanes) {
      t[i] = hn::IfThenElse(hn::Eq(m[i], hn::Set(d, std::numeric_limits<float>::infinity())),
                            hn::Set(d, std::numeric_limits<float>::quiet_NaN()), t[i]);
    }
    hn::StoreU(t[i], d, o + i * kF32Lanes);
  }
}

// Softmax rows [lo, hi) of batch b of float x into o (the batch's output): exp(x - max) / sum per element,
// NaN where the segment's max is +inf, in float vectors (exp_nonpos_lanes: exp_approx's bits), kGroup at a
// time where there are that many.
template <class State>
void softmax_rows(float* o, const float* x, const State* st, const int64_t* p, int64_t lo, int64_t hi, int64_t b,
                  int64_t R, int64_t S, int64_t F) {
  static_assert(sizeof(State) == 2 * sizeof(float), "{max, sum} pairs");
  constexpr int kGroup = 4;
  constexpr float kInf = std::numeric_limits<float>::infinity(), kNaN = std::numeric_limits<float>::quiet_NaN();
  using D = hn::ScalableTag<float>;
  using V = hn::Vec<D>;
  const D d;
  auto one = [&](float xv, const State& s) { return s.m == kInf ? kNaN : exp_approx(xv - s.m) / s.s; };
  int64_t s = std::upper_bound(p, p + S + 1, lo) - p - 1;
  for (int64_t r = lo; r < hi; ++s) {
    const int64_t end = std::min(p[s + 1], hi);
    const int64_t se = (b * S + s) * F;
    if (F == 1) {
      const float* xb = x + b * R;
      const State& sst = st[se];
      int64_t i = r;
      if (sst.m == kInf) {
        std::fill(o + r, o + end, kNaN);
        i = end;
      }
      V m[kGroup], sum[kGroup];
      for (int g = 0; g < kGroup; ++g) m[g] = hn::Set(d, sst.m), sum[g] = hn::Set(d, sst.s);
      constexpr int64_t kGroupLanes = kGroup * kF32Lanes;
      for (; i + kGroupLanes <= end; i += kGroupLanes) softmax_vectors<false>(d, xb + i, m, sum, o + i);
      for (; i + kF32Lanes <= end; i += kF32Lanes) softmax_vectors<false, 1>(d, xb + i, {m[0]}, {sum[0]}, o + i);
      for (; i < end; ++i) o[i] = one(xb[i], sst);
    } else {
      const float* sf = reinterpret_cast<const float*>(st + se);
      auto group = [&](auto n, const float* xr, float* orow, int64_t& f) {  // N vectors from feature f on
        constexpr int N = decltype(n)::value;
        V m[N], sum[N];
        for (int i = 0; i < N; ++i) hn::LoadInterleaved2(d, sf + 2 * (f + i * kF32Lanes), m[i], sum[i]);
        softmax_vectors<true>(d, xr + f, m, sum, orow + f);
        f += N * kF32Lanes;
      };
      for (; r < end; ++r) {
        const float* xr = x + (b * R + r) * F;
        float* orow = o + r * F;
        int64_t f = 0;
        while (f + kGroup * kF32Lanes <= F) group(std::integral_constant<int, kGroup>{}, xr, orow, f);
        while (f + kF32Lanes <= F) group(std::integral_constant<int, 1>{}, xr, orow, f);
        for (; f < F; ++f) orow[f] = one(xr[f], st[se + f]);
      }
    }
    r = end;
  }
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
    expand_csr_rows(a, R, mptr<T>(out), [&](T* o, const int64_t* p, int64_t lo, int64_t hi, int64_t b) {
      gather_rows(o, x, p, lo, hi, b, a.S, a.F);
    });
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
    reduce_csr<Stats>(a, ArrayLoad<T>{x, a.src.numel()}, stats.get(), nullptr);  // whole-vector loads
    const State* st = stats.get();
    // exp(x - max) / sum in A, never exp(x - lse) (see StateResult). A +inf in the segment makes the
    // whole segment NaN, as torch.softmax does (inf - inf).
    if constexpr (std::is_same_v<T, float> && kF32Lanes >= 4) {
      float* o = mptr<T>(out);
      expand_csr_rows(a, a.N, o, [&](float* ob, const int64_t* p, int64_t lo, int64_t hi, int64_t b) {
        softmax_rows(ob, x, st, p, lo, hi, b, a.N, a.S, a.F);
      });
    } else {
      constexpr A kInf = std::numeric_limits<A>::infinity(), kNaN = std::numeric_limits<A>::quiet_NaN();
      expand_csr(a, a.N, mptr<T>(out), [x, st](int64_t re, int64_t se) {
        const State& s = st[se];
        return static_cast<T>(s.m == kInf ? kNaN : exp_approx(to_acc<A>(x[re]) - s.m) / s.s);
      });
    }
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
  // by name, not by position: two entries of one signature cannot trade places unseen
  static constexpr Kernels k = [] {
    Kernels t{};
    t.isa = SEGOPS_STR(SEGOPS_CPU_ISA);
    t.target = HWY_STATIC_TARGET;
    t.segment_reduce = segment_reduce_kernel;
    t.gather = gather_kernel;
    t.softmax = softmax_kernel;
    t.softmax_backward = softmax_backward_kernel;
    t.scatter = scatter_index_kernel;
    t.scatter_plan = scatter_plan_kernel;
    return t;
  }();
  static_assert(k.complete(), "every entry of Kernels is set");
  return k;
}

}  // namespace cpu
}  // namespace torch_segops
HWY_AFTER_NAMESPACE();
