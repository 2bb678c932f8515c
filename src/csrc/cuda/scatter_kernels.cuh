// The kernels and host drivers of the CUDA scatter ops (scatter_cuda.cu runs them through CudaCall; the host
// emulation, tests/cuda_emulation/emulate_scatter.cpp, runs the same drivers and functors on the CPU).
//
// A scatter is the CSR reduction of drivers.cuh (run_reduce) over the stable order of the index: the offsets are
// coo_kernels.cuh's (the counts of an unsorted row are those of its sorted row), src's rows are read through the
// order (PermLoad: no permuted copy of src), and an arg found in the order is mapped back to src's row (MapArg).
// Every target so gets the bits the CSR ops give on the gathered copy of the stably sorted rows, which is what
// scatter gave on CUDA before these ops (torch.sort, a gather, the CSR ops). The order itself is the caller's
// (torch's stable sort on the GPU, std::stable_sort in the emulation): a stable order is unique.
#pragma once

#include <cstdint>

#include "cuda/coo_kernels.cuh"
#include "cuda/drivers.cuh"

namespace torch_segops {
namespace cuda {

// The [B, N, F] input read through an order ([rows, N] positions): element e of the ordered rows (row r = e / F of
// batch b = r / N) is element f of src's row order[batch_rows[b] + r - b * N] of batch b (batch_rows: the element
// offset of each batch's row of the order, a table that perm_load makes; null for one batch). order null: src as
// it is. A vector of V elements stays inside one row where F % V == 0 (the lanes of the CSR kernels); other
// vectors (F == 1: ReduceFlatBlock's V rows) are loaded element by element, each row read through the order.
// (A position costs at most two 64-bit divisions a vector: with BatchMap::offset's divisions inlined into every
// element load of the unrolled kernels, ptxas's input was 100 MB and its run longer than 30 minutes an
// architecture; called out of line instead, every kernel got a 248-808 byte stack frame.)
template <typename T> struct PermLoad {
  using A = acc_t<T>;
  static constexpr int kVec = static_cast<int>(16 / sizeof(T));  // elements per 16-byte load
  const T* x = nullptr;
  const int64_t* order = nullptr;
  const int64_t* batch_rows = nullptr;
  int64_t N = 0, F = 1;
  // src's row of row r of the ordered rows.
  SEGOPS_HD int64_t src_row(int64_t r) const {
    if (batch_rows == nullptr) return rd(order + r);
    const int64_t b = r / N;
    return b * N + rd(order + rd(batch_rows + b) + (r - b * N));
  }
  SEGOPS_HD int64_t at(int64_t e) const {
    if (order == nullptr) return e;
    const int64_t r = F == 1 ? e : e / F;
    return src_row(r) * F + (e - r * F);
  }
  template <int V> SEGOPS_HD void load(int64_t e, A (&o)[V]) const {
    if (V == 1 || F % V == 0) {
      load_vec<V>(x, at(e), o);
    } else if (F == 1 && order != nullptr) {  // V rows (ReduceFlatBlock's vectors), walked from e's
      int64_t b = 0, k = e, q = e;               // batch, its row, the row's position in the order
      if (batch_rows != nullptr) {
        b = e / N;
        k = e - b * N;
        q = rd(batch_rows + b) + k;
      }
SEGOPS_UNROLL
      for (int i = 0; i < V; ++i) {
        if (i > 0) {  // the next row (every row of the vector is one of the input's)
          ++q;
          if (batch_rows != nullptr && ++k == N) {
            k = 0;
            q = rd(batch_rows + ++b);
          }
        }
        A one[1];
        load_vec<1>(x, b * N + rd(order + q), one);
        o[i] = one[0];
      }
    } else {  // element by element (no order, or F > 1 with F % V != 0, which no kernel loads: ReduceMain and
              // ReduceShort take V > 1 only where F % V == 0)
SEGOPS_UNROLL
      for (int i = 0; i < V; ++i) {
        A one[1];
        load_vec<1>(x, at(e + i), one);
        o[i] = one[0];
      }
    }
  }
  template <int V> using Raw = A[V];
  template <int V> SEGOPS_HD void load_raw(int64_t e, A (&r)[V]) const { load<V>(e, r); }
};

// Thread b writes the element offset of batch b's row of the order (PermLoad's batch_rows).
struct BatchRows {
  BatchMap map;
  int64_t* rows = nullptr;
  SEGOPS_HD void operator()(int64_t b) const { wr(rows + b, map.offset(b)); }
};

// An arg found in the ordered rows (a position in the order) as the position in src: thread tid maps element
// tid of the [B, S, F] arg; N (an empty target) stays.
struct MapArg {
  int64_t* arg = nullptr;
  const int64_t* order = nullptr;
  const int64_t* batch_rows = nullptr;  // as PermLoad's
  int64_t N = 0, SF = 1;                // SF: S * F, the elements of a batch
  SEGOPS_HD void operator()(int64_t tid) const {
    const int64_t a = rd(arg + tid);
    if (a < 0 || a >= N) return;
    wr(arg + tid, rd(order + (batch_rows == nullptr ? 0 : rd(batch_rows + tid / SF)) + a));
  }
};

// Thread tid checks positions tid, tid + threads, ... of a [rows, N] plan order: the first value outside [0, N)
// goes to *bad (the smallest such position of all threads; the host reads it back before the reduction reads
// anything through the order).
struct OrderCheck {
  const int64_t* order = nullptr;
  int64_t total = 0, N = 0, threads = 1;
  u64* bad = nullptr;
  SEGOPS_HD void operator()(int64_t tid) const {
    for (int64_t i = tid; i < total; i += threads) {
      const int64_t p = rd(order + i);
      if (p < 0 || p >= N) {
        atomic_min_u64(bad, static_cast<u64>(i));
        return;
      }
    }
  }
};

// ---- drivers (host) ------------------------------------------------------------------------------------
// Exec as in drivers.cuh, plus zero() (coo_kernels.cuh).

// The [B, N, F] input x read through order ([rows, N]; null: x as it is), batch b's row of the order at element
// map.offset(b): with several batches, their offsets go to a table in ex's workspace (BatchRows).
template <class Exec, typename T>
PermLoad<T> perm_load(Exec& ex, const T* x, const int64_t* order, const BatchMap& map, int64_t B, int64_t N,
                      int64_t F) {
  PermLoad<T> load{x, order, nullptr, N, F};
  if (order != nullptr && B > 1) {
    int64_t* rows = static_cast<int64_t*>(ex.workspace(static_cast<size_t>(B) * sizeof(int64_t)));
    ex.launch(BatchRows{map, rows}, B);
    load.batch_rows = rows;
  }
  return load;
}

// The first problem of a [rows, n] index (the CPU's order: a decrease along a row when check_sorted, else a
// negative value, else a value >= size when size >= 0) into words[0] (index_error_key, tag 0) and
// max(index) + 1 into words[1] (as launch_index_max leaves them); both words start at kNoError (~0).
template <class Exec, typename I>
void launch_index_check(Exec& ex, const IndexRows<I>& ix, u64* words, int64_t max_threads = kIndexThreadsMax) {
  const IndexCount<I> k{ix, imax(1, imin(ix.total(), max_threads)), nullptr, words, 0, words + 1};
  ex.launch(k, ix.total() > 0 ? k.threads : 0);
}

// (problem, position) of words[0] as launch_index_check leaves it (problem -1: none).
struct IndexProblemAt {
  int32_t what = -1;
  int64_t pos = 0;
};
inline IndexProblemAt decode_index_problem(u64 word, int64_t total) {
  if (word == kNoError || total <= 0) return {};
  const u64 key = word >> kTagBits;
  return {static_cast<int32_t>(key / static_cast<u64>(total)), static_cast<int64_t>(key % static_cast<u64>(total))};
}

// The reduction along offsets that are known to be valid (a checked plan, or offsets made from a checked
// index), src read through load's order (run_reduce), the args mapped back (MapArg). Returns the plan that ran
// (ReducePlanKind).
template <class Op, class Exec, typename T, typename OutT>
int run_plan(Exec& ex, const Geometry& g, const PermLoad<T>& load, OutT* out, int64_t* arg, bool in_aligned,
             const Tuning& t = Tuning()) {
  const int kind = run_reduce<Op>(ex, g, load, out, arg, ErrorContext{}, in_aligned, t);
  if (arg != nullptr && load.order != nullptr && g.N > 0) {
    ex.launch(MapArg{arg, load.order, load.batch_rows, g.N, g.S * g.F}, g.B * g.S * g.F);
  }
  return kind;
}

// A checked index's reduction (ix.size = g.S): off ([rows, S + 1], g.indptr) gets the offsets of ix, then
// run_plan reads src through load's order (null for a sorted index). Returns the plan that ran.
template <class Op, class Exec, typename I, typename T, typename OutT>
int run_scatter(Exec& ex, const Geometry& g, int64_t* off, const IndexRows<I>& ix, const PermLoad<T>& load,
                OutT* out, int64_t* arg, bool in_aligned, const Tuning& t = Tuning(),
                int64_t max_threads = kIndexThreadsMax) {
  IndexRows<I> counted = ix;
  counted.check_sorted = false;
  run_index_to_indptr(ex, counted, ErrorSlot{}, off, max_threads);
  return run_plan<Op>(ex, g, load, out, arg, in_aligned, t);
}


// A plan's offsets ([rows, S + 1], limit N: the CPU's checks) and order ([rows, N] in [0, N)) checked into
// words[0] (the first bad offset, as launch_validate keeps it) and words[1] (the first bad position of the
// order); both words start at kNoError.
template <class Exec>
void launch_plan_check(Exec& ex, const Geometry& g, const int64_t* order, int64_t order_rows, u64* words,
                       int64_t max_threads = kIndexThreadsMax) {
  ErrorContext ec;
  ec.err = words;
  ec.limit = g.N;
  launch_validate(ex, g, ec, nullptr, Tuning());
  const int64_t total = order_rows * g.N;
  if (total == 0) return;
  const OrderCheck k{order, total, g.N, imax(1, imin(total, max_threads)), words + 1};
  ex.launch(k, k.threads);
}

}  // namespace cuda
}  // namespace torch_segops
