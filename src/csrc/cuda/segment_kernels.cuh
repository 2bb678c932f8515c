// The CUDA kernels of torch_segops, written as functors plus host-side drivers.
//
// Most kernels are per-thread functors with `operator()(int64_t tid)` that one GPU thread runs; their
// threads never talk to each other. Block kernels (ReduceFlatBlock) are functors run by a whole block,
// whose threads cooperate through shared memory, block barriers and warp shuffles, all through a `Blk`
// object (see "cooperative (block) kernels" below). No kernel uses float atomics. segment_cuda.cu launches
// them with two generic __global__ templates; the host emulation test (tests/cuda_emulation/
// emulate_kernels.cpp, built with g++) runs the very same functors and drivers on the CPU under
// AddressSanitizer/UBSan: per-thread kernels thread by thread in any order, block kernels block by block
// with each thread a fiber, phase by phase between barriers (tests/cuda_emulation/block_emulation.h). That
// is how the index arithmetic, the barriers and the clamping of invalid offsets are tested without a GPU.
//
// Reductions (the segment_<reduction> ops, and the per-segment parts of softmax and its backward), three
// plans chosen from the shapes and the process's allowed set (TORCH_SEGOPS_CUDA_PLANS, cuda_plans.h;
// plan_reduce), never from the data. By default:
//   - short segments (F > 1 and N <= Tuning::short_avg_max * S, an average of at most 16 rows): ReduceShort,
//     one pass. A group of G lanes (features across lanes, 16-byte vector loads) owns about 64 rows' worth
//     of whole segments and reads their rows 8 at a time across segment borders (rows in flight per thread
//     whatever the segment lengths); the segment offsets of the next 8 segments travel with those rows.
//     No carries. Segments longer than Tuning::short_long_rows (P) rows are left out by their group: the
//     same launch's first threads (ReduceShortPieces) reduce every piece of P rows of such segments in
//     parallel, and a pass after it (FinishLongSegments) merges each one's piece states in order, so a
//     huge segment among short ones is read at full parallelism, not by one group.
//   - F == 1: the merge-path plan below with ReduceFlatBlock as pass 1: a block stages its chunk of 3840
//     items (rows and segment ends) in shared memory with coalesced 16-byte loads, each thread walks 15
//     items (2048 and 8 for 8-byte accumulators), and a block segmented scan (warp shuffles) joins the pieces of segments that cross threads.
//   - otherwise (long segments on average, F > 1): the merge-path plan with ReduceMain as pass 1.
// The merge-path plan:
//   0. Partition: the merge-path coordinate of every chunk border (an 8-ary search).
//   1. main: the merge path of (segment ends, rows) of every batch is cut into chunks of W items
//      (merge_path.h), so a chunk costs the same whether it holds one piece of a huge segment or
//      hundreds of empty ones. ReduceMain: a group of G lanes owns a chunk and a tile of G*V features (lane
//      j reads V contiguous features of each row with one vector load). Segments that start and end in the
//      chunk are written directly. A segment still open at the chunk's end leaves a `carry` partial state,
//      one that started before the chunk and ends in it a `head` state.
//   2. levels: carries are combined in fixed groups of K consecutive chunks, level by level, in order
//      (a group's carry = its trailing run of carries of one segment), until one level has <= K entries.
//   3. fixup: the chunk holding a crossing segment's end merges, right to left, the carries of its run
//      using at most K entries per level, then finalizes the segment.
//   The plan (W, G, V, K, the kernel) depends only on the shapes and dtype, never on the GPU or timing,
//   so the order of every floating-point operation is fixed: results are bitwise identical run to run.
// Expansions (gather, softmax, softmax backward): the same merge-path chunks over (segment ends,
// output rows); 32 lanes per chunk write each output row once (features or rows across lanes, so
// stores are coalesced); rows outside [indptr[0], indptr[-1]) are zero-filled in row blocks.
//
// Invalid indptr: every offset read by a kernel is clamped into the valid row range, so no kernel reads
// or writes out of bounds whatever indptr holds (the results are then unspecified). The first kernel of
// each op also validates indptr exactly like the CPU backend (a slice of offsets per thread) and
// records the first bad position with an integer atomicMin in a per-device error word; a later kernel
// of the same op copies the details into a host-mapped ErrorRecord, which the host reports at its next
// call (see docs/cuda.md).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

// ---- access tracing (the memory-access model, research/gpu_model/model.py; compiled out everywhere else) -----
// Kernels read and write global memory through load_vec/store_vec and rd/rd_async/wr below, which report
// each access to the host tracer (research/gpu_model/trace_kernels.cpp) when SEGOPS_TRACE_ACCESSES is
// defined. Kinds: 0 a load whose value is used later (at SEGOPS_TRACE_USE(): the thread then waits for
// every load it has in flight), 1 a load used at once (an offset deciding the next address), 2 a store.
// Shared memory of block kernels (the tracer counts its bank conflicts): SEGOPS_SH_LOAD(lvalue) is the
// lvalue's value, reported as a load; SEGOPS_TRACE_SH_STORE(lvalue) reports a store to it;
// SEGOPS_TRACE_STEP() marks a point every lane of a warp passes together (a loop iteration): the k-th
// shared access of a site after the same number of steps is one warp instruction.
#if defined(SEGOPS_TRACE_ACCESSES) && !defined(__CUDA_ARCH__)
void segops_trace_access(const void* p, int bytes, int kind, int site);
void segops_trace_use();
void segops_trace_shared(const void* p, int bytes, bool store, int site);
void segops_trace_step();
#define SEGOPS_TRACE(p, n, kind) ::segops_trace_access((p), static_cast<int>(n), (kind), __LINE__)
#define SEGOPS_TRACE_USE() ::segops_trace_use()
#define SEGOPS_TRACE_INDEX(p) SEGOPS_TRACE((p), 8, 1)
#define SEGOPS_SH_LOAD(x) (::segops_trace_shared(&(x), static_cast<int>(sizeof(x)), false, __LINE__), (x))
#define SEGOPS_TRACE_SH_STORE(x) ::segops_trace_shared(&(x), static_cast<int>(sizeof(x)), true, __LINE__)
#define SEGOPS_TRACE_STEP() ::segops_trace_step()
#else
#define SEGOPS_TRACE(p, n, kind) ((void)0)
#define SEGOPS_TRACE_USE() ((void)0)
#define SEGOPS_SH_LOAD(x) (x)
#define SEGOPS_TRACE_SH_STORE(x) ((void)0)
#define SEGOPS_TRACE_STEP() ((void)0)
#endif

#include "cuda_plans.h"
#include "index_math.h"
#include "merge_path.h"
#include "op_names.h"
#include "reducers.h"

namespace torch_segops {
namespace cuda {

using u64 = unsigned long long;

#if defined(__CUDA_ARCH__)  // device pass only: the host compiler would warn about an unknown pragma
#define SEGOPS_UNROLL _Pragma("unroll")
#else
#define SEGOPS_UNROLL
#endif

// ---- device primitives (with host stand-ins, used only by the emulation test) ----------------------

SEGOPS_HD void atomic_min_u64(u64* p, u64 v) {
#if defined(__CUDA_ARCH__)
  atomicMin(p, v);
#else
  if (v < *p) *p = v;
#endif
}

SEGOPS_HD void atomic_cas_u64(u64* p, u64 expected, u64 desired) {
#if defined(__CUDA_ARCH__)
  atomicCAS(p, expected, desired);
#else
  if (*p == expected) *p = desired;
#endif
}

SEGOPS_HD void fence_system() {
#if defined(__CUDA_ARCH__)
  __threadfence_system();
#endif
}

SEGOPS_HD int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
SEGOPS_HD int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }
SEGOPS_HD int64_t iclamp(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : (x > hi ? hi : x); }

// Global memory accesses outside the vector loads: rd (value used at once), rd_async (used later, after
// SEGOPS_TRACE_USE), wr. Plain dereferences; only the tracer sees a difference.
template <typename X> SEGOPS_HD X rd(const X* p) {
  SEGOPS_TRACE(p, sizeof(X), 1);
  return *p;
}
template <typename X> SEGOPS_HD X rd_async(const X* p) {
  SEGOPS_TRACE(p, sizeof(X), 0);
  return *p;
}
template <typename X> SEGOPS_HD void wr(X* p, const X& v) {
  SEGOPS_TRACE(p, sizeof(X), 2);
  *p = v;
}

// V contiguous elements, aligned so that one load/store instruction moves them (16 bytes for V*T).
template <typename T, int V> struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <int V, typename T, typename A>
SEGOPS_HD void load_vec(const T* p, int64_t e, A (&o)[V]) {
  SEGOPS_TRACE(p + e, sizeof(T) * V, 0);
  if constexpr (V == 1) {
    o[0] = static_cast<A>(p[e]);
  } else {
    const Vec<T, V> v = *reinterpret_cast<const Vec<T, V>*>(p + e);
SEGOPS_UNROLL
    for (int j = 0; j < V; ++j) o[j] = static_cast<A>(v.v[j]);
  }
}

template <int V, typename T>
SEGOPS_HD void store_vec(T* p, int64_t e, const T (&o)[V]) {
  SEGOPS_TRACE(p + e, sizeof(T) * V, 2);
  if constexpr (V == 1) {
    p[e] = o[0];
  } else {
    Vec<T, V> v;
SEGOPS_UNROLL
    for (int j = 0; j < V; ++j) v.v[j] = o[j];
    *reinterpret_cast<Vec<T, V>*>(p + e) = v;
  }
}

// V consecutive reduction states of a workspace (partials, element e a multiple of V; the workspaces are
// 256-byte aligned), with load_vec/store_vec: in 16-byte pieces when a state's size divides 16, else one
// state at a time.
template <class X, int V> constexpr int state_width() {
  return 16 % sizeof(X) != 0 ? 1 : (V < int(16 / sizeof(X)) ? V : int(16 / sizeof(X)));
}
template <int V, class X> SEGOPS_HD void load_states(const X* p, int64_t e, X (&o)[V]) {
  constexpr int kw = state_width<X, V>();
SEGOPS_UNROLL
  for (int j = 0; j < V; j += kw) {
    X t[kw];
    load_vec<kw>(p, e + j, t);
SEGOPS_UNROLL
    for (int u = 0; u < kw; ++u) o[j + u] = t[u];
  }
}
template <int V, class X> SEGOPS_HD void store_states(X* p, int64_t e, const X (&o)[V]) {
  constexpr int kw = state_width<X, V>();
SEGOPS_UNROLL
  for (int j = 0; j < V; j += kw) {
    X t[kw];
SEGOPS_UNROLL
    for (int u = 0; u < kw; ++u) t[u] = o[j + u];
    store_vec<kw>(p, e + j, t);
  }
}
// acc = x (+) acc for each of V states: x holds the rows just before acc's.
template <class Op, int V>
SEGOPS_HD void merge_before(typename Op::State (&x)[V], typename Op::State (&acc)[V]) {
SEGOPS_UNROLL
  for (int v = 0; v < V; ++v) {
    Op::merge(x[v], acc[v]);
    acc[v] = x[v];
  }
}
// The identity in V consecutive states of a workspace. Every entry of a keyed workspace (carries, piece
// states) is written, the ones without a key too: their readers load states together with the keys (one
// round of loads, not two) and then use only the states whose key matches, so no kernel reads memory that
// was never written (compute-sanitizer initcheck; the host emulation's written-bytes check).
template <class Op, int V> SEGOPS_HD void store_identity(typename Op::State* p, int64_t e) {
  typename Op::State id[V];
SEGOPS_UNROLL
  for (int v = 0; v < V; ++v) id[v] = Op::identity();
  store_states<V>(p, e, id);
}
// Entries of V states each that fit in `bytes` of registers (at least 1, at most cap).
template <class X, int V> constexpr int states_in(int bytes, int cap) {
  const int n = bytes / int(sizeof(X) * V);
  return n < 1 ? 1 : (n > cap ? cap : n);
}

// ---- batch -> indptr row ---------------------------------------------------------------------------

// Maps batch b (row-major over src's leading dims) to the element offset of its indptr row. Leading
// dims where indptr has size 1 broadcast (stride 0). Built on the host with adjacent dims collapsed.
struct BatchMap {
  static constexpr int kMaxDims = 12;
  int ndims = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
  SEGOPS_HD int64_t offset(int64_t b) const {
    int64_t off = 0;
SEGOPS_UNROLL
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d < ndims) {
        const int64_t q = b / size[d];
        off += (b - q * size[d]) * stride[d];
        b = q;
      }
    }
    return off;
  }
};

// ---- indptr errors ---------------------------------------------------------------------------------

constexpr u64 kNoError = ~0ull;  // value of an empty error word
constexpr int kTagBits = 16;     // low bits of the error word: the tag of the op call that found it

// Written by the device into host memory mapped into its address space; `code` last.
struct ErrorRecord {
  int32_t code;    // 0: empty, 1: an invalid indptr was found
  int32_t op;      // OpId
  int32_t device;
  int32_t pad;
  int64_t pos;     // flat position in indptr
  int64_t len;     // offsets per indptr row (S + 1)
  int64_t rows;    // indptr rows
  int64_t value;   // indptr[pos]
  int64_t prev;    // indptr[pos - 1] (0 when pos starts a row)
  int64_t limit;   // bound of the last offset, -1: none
};

// The offset checks of the CPU backend, for position i of a flattened [rows, len] indptr.
SEGOPS_HD bool indptr_bad(const int64_t* p, int64_t i, int64_t k, int64_t len, int64_t limit) {
  const int64_t v = rd(p + i);
  return k == 0 ? v < 0 : (v < p[i - 1] || (k == len - 1 && limit >= 0 && v > limit));
}

// Thread tid checks offsets [tid * per_thread, (tid + 1) * per_thread) and keeps the smallest bad
// position in *err as (pos << 16 | tag), so that the op call that found it can claim it.
struct Validate {
  const int64_t* p = nullptr;
  int64_t total = 0, len = 1, limit = -1, per_thread = 0;
  u64* err = nullptr;
  uint32_t tag = 0;
  SEGOPS_HD void run(int64_t tid) const {
    if (per_thread <= 0 || err == nullptr) return;
    const int64_t i0 = tid * per_thread;
    if (i0 >= total) return;
    const int64_t i1 = imin(total, i0 + per_thread);
    int64_t k = i0 % len;
    int64_t prev = k > 0 ? rd(p + i0 - 1) : 0;
    constexpr int kBatch = 8;  // offsets loaded together (in flight at once), then checked in order
    for (int64_t i = i0; i < i1; i += kBatch) {
      int64_t v[kBatch];
SEGOPS_UNROLL
      for (int j = 0; j < kBatch; ++j) v[j] = i + j < i1 ? rd_async(p + i + j) : 0;
      SEGOPS_TRACE_USE();
      for (int j = 0; j < kBatch && i + j < i1; ++j, ++k) {
        if (k == len) k = 0;
        const int64_t x = v[j];
        const bool bad = k == 0 ? x < 0 : (x < prev || (k == len - 1 && limit >= 0 && x > limit));
        if (bad) {
          atomic_min_u64(err, (static_cast<u64>(i + j) << kTagBits) | tag);
          return;
        }
        prev = x;
      }
    }
  }
};

// Where one op call records an invalid indptr: the error word (nullptr: no checks) and its tag in it,
// the host record, and what the record says about the call.
struct ErrorSlot {
  u64* err = nullptr;
  ErrorRecord* rec = nullptr;
  uint32_t tag = 0;
  int32_t op = 0, device = 0;
  int64_t limit = -1;  // bound of the last offset, -1: none
};

// Copies this call's error (if the error word holds one with our tag) into the host record, then
// empties the word. Run by one thread of a kernel that follows the validating one.
struct Publish {
  ErrorSlot to;
  const int64_t* p = nullptr;
  int64_t len = 1, rows = 0;
  SEGOPS_HD void run() const {
    if (to.err == nullptr || to.rec == nullptr) return;
    const u64 v = *static_cast<volatile u64*>(to.err);
    if (v == kNoError || (v & ((1u << kTagBits) - 1)) != to.tag) return;
    const int64_t pos = static_cast<int64_t>(v >> kTagBits);
    volatile ErrorRecord* r = to.rec;
    if (r->code == 0) {  // keep an earlier, not yet reported error
      r->op = to.op;
      r->device = to.device;
      r->pos = pos;
      r->len = len;
      r->rows = rows;
      r->value = p[pos];
      r->prev = pos % len != 0 ? p[pos - 1] : 0;
      r->limit = to.limit;
      fence_system();
      r->code = 1;
    }
    atomic_cas_u64(to.err, v, kNoError);
  }
};

// ---- element loaders (reductions read src, or grad * out for the softmax backward) ------------------

template <typename T> struct SrcLoad {
  using A = acc_t<T>;
  static constexpr int kVec = static_cast<int>(16 / sizeof(T));  // elements per 16-byte load
  const T* x;
  template <int V> SEGOPS_HD void load(int64_t e, A (&o)[V]) const { load_vec<V>(x, e, o); }
};

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
};

// ---- reduction kernels -----------------------------------------------------------------------------

// Row fetchers: fetch(row, x) fills x[V] with the features of `row` (absolute along dim) this thread owns.
template <class Load, int V> struct LaneFetch {
  using A = typename Load::A;
  Load load;
  int64_t row_elem0;  // (b * N) * F + f0
  int64_t F;
  SEGOPS_HD void operator()(int64_t row, A (&x)[V]) const { load.template load<V>(e(row), x); }
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
    A x[kU][V];
SEGOPS_UNROLL
    for (int u = 0; u < kU; ++u) fetch(row0 + r + u, x[u]);
    SEGOPS_TRACE_USE();
SEGOPS_UNROLL
    for (int u = 0; u < kU; ++u) {
SEGOPS_UNROLL
      for (int v = 0; v < V; ++v) Op::step(st[v], x[u][v], row0 + r + u);
    }
  }
  if (r < count) {  // the last count % kU rows: one more round, not one per row
    A x[kU][V];
SEGOPS_UNROLL
    for (int u = 0; u < kU; ++u) {
      if (r + u < count) fetch(row0 + r + u, x[u]);
    }
    SEGOPS_TRACE_USE();
SEGOPS_UNROLL
    for (int u = 0; u < kU; ++u) {
      if (r + u < count) {
SEGOPS_UNROLL
        for (int v = 0; v < V; ++v) Op::step(st[v], x[u][v], row0 + r + u);
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

// The segments of every batch and their merge-path chunking, shared by the reduction and expansion kernels:
// indptr rows through bmap, S segments of F features, W (segment ends, rows) items per chunk, cpb chunks
// per batch.
struct ChunkGrid {
  const int64_t* indptr;
  BatchMap bmap;
  int64_t S, F;
  int64_t W, cpb;
};

// Pass 0. Thread tid = b * (cpb + 1) + ci: the merge-path coordinate of chunk border ci of batch b, searched
// once here instead of twice by every thread of the chunk (a binary search is a chain of dependent loads).
struct Partition : ChunkGrid {
  int64_t N;
  MergeCoord* coord;  // [B, cpb + 1]
  SEGOPS_HD void operator()(int64_t tid) const {
    const int64_t b = tid / (cpb + 1), ci = tid - b * (cpb + 1);
    const int64_t* p = indptr + bmap.offset(b);
    const int64_t p0 = rd_async(p), pS = rd_async(p + S);
    SEGOPS_TRACE_USE();
    const int64_t base = iclamp(p0, 0, N), end = iclamp(pS, base, N), nnz = end - base;
    wr(coord + tid, search(p, p0, nnz, imin(ci * W, S + nnz)));
  }

  // merge_path_search (the same split for a valid indptr; inside the diagonal's bounds for any indptr), as
  // an 8-ary search: each round loads 7 probes together, so a search over S segments takes log8(S) rounds
  // of dependent loads instead of log2(S).
  SEGOPS_HD MergeCoord search(const int64_t* p, int64_t base, int64_t nnz, int64_t diag) const {
    constexpr int kWays = 8;
    int64_t lo = imax(diag - nnz, 0), hi = imin(diag, S);  // the answer lies in [lo, hi]
    while (lo < hi) {
      const int64_t step = ceil_div(hi - lo, kWays);
      int64_t v[kWays - 1];
SEGOPS_UNROLL
      for (int k = 0; k < kWays - 1; ++k) {
        const int64_t mid = imin(lo + (k + 1) * step - 1, hi - 1);
        v[k] = rd_async(p + mid + 1);
      }
      SEGOPS_TRACE_USE();
      // the first probe where "segment end mid comes before row diag - mid" fails bounds the answer
      // branch-free (a branch per probe let nvcc issue a probe's load behind the previous one's test): for a
      // valid indptr the test holds for a prefix of the probes, so the largest passing and the smallest
      // failing probe are the first failing probe's neighbours
      int64_t nlo = lo, nhi = hi;
SEGOPS_UNROLL
      for (int k = 0; k < kWays - 1; ++k) {
        const int64_t mid = imin(lo + (k + 1) * step - 1, hi - 1);
        if (v[k] - base <= diag - mid - 1) {
          nlo = imax(nlo, mid + 1);
        } else {
          nhi = imin(nhi, mid);
        }
      }
      lo = nlo;  // the range shrinks to at most ceil((hi - lo) / kWays) - 1 + 1 candidates every round
      hi = imax(nhi, nlo);  // (the probes of an invalid indptr can disagree)
    }
    return {lo, diag - lo};
  }
};

// Thread tid = ((group * tiles) + tile) * G + lane of a kernel whose groups of G lanes own a unit of work
// (group i of batch b, per_batch groups a batch) and a tile of ft features, V per lane from f0.
struct LaneSlot {
  int64_t group, tile, lane, b, i, f0;
};
SEGOPS_HD LaneSlot lane_slot(int64_t tid, int64_t G, int64_t tiles, int64_t per_batch, int64_t ft, int V) {
  LaneSlot s;
  const int64_t unit = tid / G;
  s.lane = tid - unit * G;
  s.group = unit / tiles;
  s.tile = unit - s.group * tiles;
  s.b = s.group / per_batch;
  s.i = s.group - s.b * per_batch;
  s.f0 = s.tile * ft + s.lane * V;
  return s;
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

constexpr int kMaxLevels = 8;

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
      int64_t e[kSegBatch + 1];  // clamped, non-decreasing ends of the batch's segments (e[0] = start)
      e[0] = lo;
SEGOPS_UNROLL
      for (int k = 1; k <= kSegBatch; ++k) e[k] = k <= nseg ? iclamp(nxt[k], e[k - 1], end) : e[k - 1];
      lo = e[nseg];
      // the next batch's offsets travel with this batch's first rows
      if (s0 + kSegBatch < s_stop) load_ends(p, s0 + kSegBatch, s_stop, nxt);
      int k = 0;                           // current segment of the batch
      int64_t e_k = e[0], hi = e[1];       // its clamped start and end
      State st[V];
SEGOPS_UNROLL
      for (int v = 0; v < V; ++v) st[v] = Op::identity();
      for (int64_t r = e[0]; r < e[nseg]; r += kU) {
        if (hi - e_k > long_rows) {  // a long segment is not read here (ReduceShortPieces)
          r = hi;
          if (r >= e[nseg]) break;
        }
        const int64_t n = imin(kU, e[nseg] - r);
        A x[kU][V];
SEGOPS_UNROLL
        for (int u = 0; u < kU; ++u) {
          if (u < n) fetch(r + u, x[u]);
        }
        SEGOPS_TRACE_USE();
SEGOPS_UNROLL
        for (int u = 0; u < kU; ++u) {
          if (u >= n) break;
          const int64_t row = r + u;
          while (row >= hi) {  // k < nseg - 1 here: row < e[nseg]
            flush(st, b, s0 + k, hi - e_k, f0);
            ++k;
            e_k = hi;
            hi = pick(e, k + 1);
          }
SEGOPS_UNROLL
          for (int v = 0; v < V; ++v) Op::step(st[v], x[u][v], row);
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

// ---- cooperative (block) kernels ----------------------------------------------------------------------------
//
// A block kernel has `Shared` (its shared memory), kBlock threads per block and
// `template <class Blk> operator()(Blk& blk, Shared& sh)`, run by every thread of block blk.block().
// Threads talk only through Blk: sync() (a barrier of the whole block, __syncthreads) and shfl_up(v, d)
// (lane l gets lane l - d's v, its own for l < d; __shfl_up_sync over the full warp), and through `sh`
// between barriers. Every thread of a block must reach the same barriers (no thread returns early while
// others wait) and every lane of a warp the same shuffles. segment_cuda.cu runs them with DeviceBlock; the
// host emulation (tests/cuda_emulation/block_emulation.h) runs each thread of a block as a fiber, phase by
// phase between barriers, in forward, reverse or shuffled order, and fails on a barrier or shuffle that
// not every thread reaches.
#if defined(__CUDACC__)
struct DeviceBlock {
  __device__ int thread() const { return static_cast<int>(threadIdx.x); }
  __device__ int64_t block() const { return static_cast<int64_t>(blockIdx.x); }
  __device__ void sync() const { __syncthreads(); }
  template <class X> __device__ X shfl_up(const X& v, int d) const {
    static_assert(sizeof(X) % 4 == 0, "shuffled types are whole 32-bit words");
    constexpr int kWords = static_cast<int>(sizeof(X) / 4);
    uint32_t w[kWords];
    memcpy(w, &v, sizeof(X));
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = __shfl_up_sync(0xffffffffu, w[i], d);
    X r;
    memcpy(&r, w, sizeof(X));
    return r;
  }
};
#endif

// A reduction state with a flag: "a segment starts in this range" (its left part is complete). The
// segmented-scan operator: (f1, a) then (f2, b) = (f1 | f2, f2 ? b : a (+) b); associative, so any fixed
// tree of it gives the same result as the serial fold up to the rounding of the fixed tree.
template <class Op> struct FlagState {
  typename Op::State st;
  int32_t flag;
  int32_t pad;
};

template <class Op> SEGOPS_HD FlagState<Op> seg_combine(const FlagState<Op>& a, const FlagState<Op>& b) {
  if (b.flag) return b;
  FlagState<Op> r = a;
  Op::merge(r.st, b.st);
  return r;
}

// Pass 1 of the flat plan (F == 1) as a block kernel. Block c owns merge-path chunk c (W = kBlock * items
// items of (segment ends, rows)), whose coordinates Partition found. 1. The block loads the chunk's rows
// into shared memory coalesced (consecutive threads, consecutive aligned 16-byte vectors, all of a
// thread's loads in flight together) and its segment ends (clamped offsets, coalesced). 2. Each thread
// walks kItems merge items of the tile in shared memory (a merge-path search there finds its start),
// writing the segments that start and end inside its range and keeping the partial of its first segment
// and of its last (open) one. 3. A block-wide segmented scan (warp shuffles, then the 8 warp totals through
// shared memory) gives every thread the part of its first segment held by the threads before it. 4. The
// first segments are written; the chunk's head (a segment that started in an earlier chunk) and carry (one
// still open at its end) go to the carry workspace exactly like ReduceMain's, for LevelCarry and Fixup.
template <class Op, class Load, class OutT> struct ReduceFlatBlock : ChunkGrid {
  using State = typename Op::State;
  using A = typename Load::A;
  using FS = FlagState<Op>;
  static constexpr int kBlock = 256, kWarps = kBlock / 32, kMinBlocks = 4;
  // Items per thread at most: 15 (31 KiB of shared memory) for 4-byte A, 8 for 8-byte A. Shared layout
  // (x_at / e_at are the one place to change it), chosen with the tracer's bank count over constant segment
  // lengths 0-300, alternating 0/k and random ones (docs/cuda.md, "ReduceFlatBlock's shared-memory layout"):
  // 4-byte rows XOR-swizzled inside each 128-byte line (word i at i ^ ((i >> 5) & 31)), so the staging
  // stores (lanes 4 or 8 words apart) hit 32 banks; segment ends plain, and with an odd item count the
  // threads walking a run of empty segments read ends 15 words apart (32 banks). One long segment still
  // costs about 2.5 wavefronts per row load (1.0 with 16 items, but 16 items conflict at 21-63-row
  // segments). No case of the sweep takes more wavefronts than the plain 16-item layout, which
  // SEGOPS_FLAT_PLAIN_LAYOUT restores for research/gpu_model/test_model.py to compare. 8-byte rows stay plain with
  // 8 items: no layout tried was as good at every segment length.
#ifdef SEGOPS_FLAT_PLAIN_LAYOUT
  static constexpr int kItemsMax = sizeof(A) <= 4 ? 16 : 8;
  static constexpr bool kSwizzleX = false;
#else
  static constexpr int kItemsMax = sizeof(A) <= 4 ? 15 : 8;
  static constexpr bool kSwizzleX = sizeof(A) == 4;
#endif
  static constexpr int kW = kBlock * kItemsMax;
  static constexpr int kVR = Load::kVec;  // elements per 16-byte vector
  static_assert(!kSwizzleX || kW % 32 == 0, "the swizzle stays inside the array");
  struct Shared {
    A x[kW];                // the chunk's rows: row i at x_at(i)
    int32_t e[kW + 1];      // e_at(i), 1 <= i <= ns: end of segment m0.seg + i - 1, in tile rows (clamped)
    int64_t start0;         // clamped start (absolute row) of segment m0.seg
    FS warp_total[kWarps];  // the inclusive scan at each warp's last lane
    SEGOPS_HD static int xi(int i) { return kSwizzleX ? i ^ ((i >> 5) & 31) : i; }
    SEGOPS_HD A& x_at(int i) { return x[xi(i)]; }
    SEGOPS_HD const A& x_at(int i) const { return x[xi(i)]; }
    SEGOPS_HD int32_t& e_at(int i) { return e[i]; }
    SEGOPS_HD const int32_t& e_at(int i) const { return e[i]; }
  };
  Load load;
  int items;      // merge items per thread (W = kBlock * items <= kW)
  int64_t N;
  int64_t total;  // B * N (vector loads never pass it)
  bool vec_ok;    // the input pointers are aligned for 16-byte loads
  OutT* out;
  int64_t* arg;
  State* carry;    // [C]
  State* head;     // [C]
  int64_t* ckey;   // [C]
  int64_t* hkey;   // [C]
  const MergeCoord* coord;  // [B, cpb + 1]
  Validate val;

  template <class Blk> SEGOPS_HD void operator()(Blk& blk, Shared& sh) const {
    const int t = blk.thread();
    const int64_t c = blk.block();
    val.run(c * kBlock + t);
    const int64_t b = c / cpb, ci = c - b * cpb;
    const int64_t* p = indptr + bmap.offset(b);
    const int64_t p0 = rd_async(p), pS = rd_async(p + S);
    const MergeCoord m0 = rd_async(coord + b * (cpb + 1) + ci), m1 = rd_async(coord + b * (cpb + 1) + ci + 1);
    SEGOPS_TRACE_USE();
    const int64_t base = iclamp(p0, 0, N), end = iclamp(pS, base, N), nnz = end - base;
    if (ci * W >= S + nnz) {  // the whole block: nothing in this chunk
      if (t == 0) {
        wr(carry + c, Op::identity());  // (merge_run_left loads states before their keys)
        wr(ckey + c, int64_t(-1));
        wr(hkey + c, int64_t(-1));
      }
      return;
    }
    // the tile: rows [r0, r0 + nr) (relative to base), segment ends m0.seg .. m0.seg + ns - 1
    const int64_t r0 = iclamp(m0.row, 0, nnz);
    const int nr = static_cast<int>(iclamp(m1.row - r0, 0, imin(W, nnz - r0)));
    const int64_t sg0 = iclamp(m0.seg, 0, S);
    const int ns = static_cast<int>(iclamp(m1.seg - sg0, 0, imin(W - nr, S - sg0)));
    stage(blk, sh, p, b, base, end, r0, nr, sg0, ns);
    blk.sync();

    // 2. this thread's items [d, d1) of the tile's ns + nr
    const int nt = ns + nr;
    const int d = static_cast<int>(imin(int64_t(t) * items, nt)), d1 = static_cast<int>(imin(d + items, nt));
    int seg = search(sh, ns, nr, d), row = d - seg;
    FS first{Op::identity(), 0, 0};  // the partial of this thread's first segment, before its end
    int first_seg = -1;              // its index in the tile if it ends here (-1: no end in this range)
    State st = Op::identity();
    int seg_end = seg < ns ? SEGOPS_SH_LOAD(sh.e_at(seg + 1)) : 0;  // the end of segment seg (read once)
    for (int i = d; i < d1; ++i) {
      SEGOPS_TRACE_STEP();
      const bool is_end = seg < ns && (row >= nr || seg_end <= row);
      if (is_end) {
        if (first_seg < 0) {
          first.st = st;
          first_seg = seg;
        } else {
          write_segment(sh, st, b, sg0, seg, base + r0);
        }
        st = Op::identity();
        ++seg;
        if (seg < ns) seg_end = SEGOPS_SH_LOAD(sh.e_at(seg + 1));
      } else {
        Op::step(st, SEGOPS_SH_LOAD(sh.x_at(row)), base + r0 + row);
        ++row;
      }
    }
    // 3. inclusive segmented scan of the threads' trailing partials: flag = the thread ended a segment
    FS mine{st, first_seg >= 0 ? 1 : 0, 0};
    FS incl = mine;
    const int lane = t & 31, warp = t >> 5;
SEGOPS_UNROLL
    for (int k = 1; k < 32; k *= 2) {
      const FS up = blk.shfl_up(incl, k);
      if (lane >= k) incl = seg_combine<Op>(up, incl);
    }
    if (lane == 31) {
      SEGOPS_TRACE_SH_STORE(sh.warp_total[warp]);
      sh.warp_total[warp] = incl;
    }
    const FS before_in_warp = blk.shfl_up(incl, 1);  // exclusive, inside the warp (lane 0: unused)
    blk.sync();
    FS excl{Op::identity(), 0, 0};  // everything before this thread in the block
    for (int w = 0; w < warp; ++w) excl = seg_combine<Op>(excl, SEGOPS_SH_LOAD(sh.warp_total[w]));
    if (lane > 0) excl = seg_combine<Op>(excl, before_in_warp);
    // 4. the first segment: the threads before this one hold its beginning
    if (first_seg >= 0) {
      State whole = excl.st;
      Op::merge(whole, first.st);
      if (first_seg == 0 && sh.start0 - base < r0) {  // started in an earlier chunk: the chunk's head
        wr(head + c, whole);
      } else {
        write_segment(sh, whole, b, sg0, first_seg, base + r0);
      }
    }
    if (t == kBlock - 1) {  // the segment open at the chunk's end (rows of it in the tile): the carry
      const FS all = seg_combine<Op>(excl, mine);
      const bool open = sg0 + ns < S && nr > 0 && (ns == 0 || sh.e_at(ns) < nr);
      wr(carry + c, open ? all.st : Op::identity());
      wr(ckey + c, open ? b * S + sg0 + ns : int64_t(-1));
      wr(hkey + c, ns > 0 && sh.start0 - base < r0 ? b * S + sg0 : int64_t(-1));
    }
  }

  // Rows (as A) and clamped offsets of the tile into shared memory; a thread's loads are in flight together.
  template <class Blk>
  SEGOPS_HD void stage(Blk& blk, Shared& sh, const int64_t* p, int64_t b, int64_t base, int64_t end, int64_t r0,
                       int nr, int64_t sg0, int ns) const {
    const int t = blk.thread();
    constexpr int kPer = (kW + kVR - 1) / kVR / kBlock + 1;  // vectors per thread (covers a misaligned tile)
    constexpr int kOff = (kW + 1 + kBlock - 1) / kBlock;     // offsets per thread
    const int64_t e0 = b * N + base + r0, e1 = e0 + nr;       // the tile's elements
    const int64_t q0 = e0 / kVR;                              // first aligned vector
    A v[kPer][kVR];
    int64_t o[kOff];
SEGOPS_UNROLL
    for (int j = 0; j < kPer; ++j) {
      const int64_t q = q0 + t + int64_t(j) * kBlock;
      if (q * kVR < e1) {
        if (vec_ok && (q + 1) * kVR <= total) {
          load.template load<kVR>(q * kVR, v[j]);
        } else {
SEGOPS_UNROLL
          for (int i = 0; i < kVR; ++i) {
            const int64_t e = q * kVR + i;
            A one[1] = {A(0)};
            if (e >= e0 && e < e1) load.template load<1>(e, one);
            v[j][i] = one[0];
          }
        }
      }
    }
SEGOPS_UNROLL
    for (int j = 0; j < kOff; ++j) {
      const int i = t + j * kBlock;
      if (i <= ns) o[j] = rd_async(p + sg0 + i);
    }
    SEGOPS_TRACE_USE();
SEGOPS_UNROLL
    for (int j = 0; j < kPer; ++j) {
      const int64_t q = q0 + t + int64_t(j) * kBlock;
SEGOPS_UNROLL
      for (int i = 0; i < kVR; ++i) {
        const int64_t e = q * kVR + i;
        if (e >= e0 && e < e1) {
          SEGOPS_TRACE_SH_STORE(sh.x_at(static_cast<int>(e - e0)));
          sh.x_at(static_cast<int>(e - e0)) = v[j][i];
        }
      }
    }
SEGOPS_UNROLL
    for (int j = 0; j < kOff; ++j) {
      const int i = t + j * kBlock;
      if (i == 0) sh.start0 = iclamp(o[j], base, end);
      if (i > 0 && i <= ns) {
        SEGOPS_TRACE_SH_STORE(sh.e_at(i));
        sh.e_at(i) = static_cast<int32_t>(iclamp(iclamp(o[j], base, end) - base - r0, 0, nr));
      }
    }
  }

  // The segment ends before merge-path diagonal d of the tile (the rest of the d items are rows).
  SEGOPS_HD static int search(const Shared& sh, int ns, int nr, int d) {
    int lo = static_cast<int>(imax(0, d - nr)), hi = static_cast<int>(imin(d, ns));
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (SEGOPS_SH_LOAD(sh.e_at(mid + 1)) <= d - mid - 1) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }

  // row0: absolute row of tile row 0
  SEGOPS_HD void write_segment(const Shared& sh, const State& st, int64_t b, int64_t sg0, int seg,
                               int64_t row0) const {
    const int64_t count = imax(seg == 0 ? SEGOPS_SH_LOAD(sh.e_at(1)) + row0 - SEGOPS_SH_LOAD(sh.start0)
                                        : SEGOPS_SH_LOAD(sh.e_at(seg + 1)) - SEGOPS_SH_LOAD(sh.e_at(seg)), 0);
    write_result<Op>(st, count, N, out, arg, b * S + sg0 + seg);
  }
};

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

// Standalone validation (ops with nothing to reduce, and gather). With max_last, also the largest last
// offset of the indptr rows (gather with size -1): stored as atomicMin(~max) so the word starts at ~0.
struct ValidateKernel {
  Validate val;
  u64* max_last = nullptr;
  SEGOPS_HD void operator()(int64_t tid) const {
    val.run(tid);
    if (max_last == nullptr) return;
    const int64_t i0 = tid * val.per_thread;
    if (i0 >= val.total) return;
    const int64_t i1 = imin(val.total, i0 + val.per_thread);
    int64_t m = 0;
    for (int64_t i = i0; i < i1; ++i) {
      if (i % val.len == val.len - 1 && rd(val.p + i) > m) m = val.p[i];
    }
    atomic_min_u64(max_last, ~static_cast<u64>(m));
  }
};

// ---- expansion kernels -----------------------------------------------------------------------------

// Output element e (in [B, R, F]) from the segment element se (in [B, S, F]); V features at once.
template <typename T> struct GatherFn {
  using OutT = T;
  const T* src;
  template <int V> SEGOPS_HD void apply(int64_t, int64_t se, T (&o)[V]) const {
    load_vec<V>(src, se, o);
  }
};

// exp(x - max) / sum in A from the segment's logsumexp state, never exp(x - lse) (see StateResult). A +inf
// in the segment makes the whole segment NaN, as torch.softmax does (inf - inf).
template <typename T> struct SoftmaxFn {
  using OutT = T;
  using A = acc_t<T>;
  using Stats = StateResult<LogSumExpOp<A>>;  // the reducer of the statistics
  using State = typename Stats::State;
  const T* x;
  const State* stats;  // [B, S, F]: max and sum of exp(x - max)
  template <int V> SEGOPS_HD void apply(int64_t e, int64_t se, T (&o)[V]) const {
    A xv[V];
    State sv[V];
    load_vec<V>(x, e, xv);
    load_vec<V>(stats, se, sv);
SEGOPS_UNROLL
    for (int j = 0; j < V; ++j) {
      const A y = std::exp(xv[j] - sv[j].m) / sv[j].s;
      o[j] = static_cast<T>(sv[j].m == std::numeric_limits<A>::infinity() ? std::numeric_limits<A>::quiet_NaN() : y);
    }
  }
};

template <typename T> struct SoftmaxBackwardFn {
  using OutT = T;
  using A = acc_t<T>;
  const T* y;
  const T* g;
  const A* dot;  // [B, S, F]: segment sums of g * y
  template <int V> SEGOPS_HD void apply(int64_t e, int64_t se, T (&o)[V]) const {
    A yv[V], gv[V], dv[V];
    load_vec<V>(y, e, yv);
    load_vec<V>(g, e, gv);
    load_vec<V>(dot, se, dv);
SEGOPS_UNROLL
    for (int j = 0; j < V; ++j) o[j] = static_cast<T>(yv[j] * (gv[j] - dv[j]));
  }
};

// Thread tid = chunk * 32 + lane. Chunk ci of batch b writes the output rows of merge-path items
// [ci * W, (ci + 1) * W) and zero-fills the rows of [ci * Wz, (ci + 1) * Wz) outside [indptr[0], indptr[S]).
template <class Fn, int V> struct Expand : ChunkGrid {
  using OutT = typename Fn::OutT;
  static constexpr int kLanes = 32;
  Fn fn;
  int64_t R;               // output rows per batch
  int64_t Wz, C;           // zero rows per chunk, chunks
  int64_t nfv;             // feature vectors per row (F / V)
  OutT* out;
  Publish pub;

  SEGOPS_HD void operator()(int64_t tid) const {
    if (tid == 0) pub.run();
    const int64_t c = tid / kLanes, lane = tid - c * kLanes;
    if (c >= C) return;
    const int64_t b = c / cpb, ci = c - b * cpb;
    const int64_t* p = indptr + bmap.offset(b);
    const int64_t base = iclamp(rd(p), 0, R), end = iclamp(rd(p + S), base, R), nnz = end - base;
    // Lanes walk (row, feature vector) pairs q = lane, lane + 32, ... of a row range in order; the pair
    // advances by (32 / nfv rows, 32 % nfv vectors) with a carry, so there is no division per item.
    const int64_t dr = kLanes / nfv, dv = kLanes - dr * nfv;
    const int64_t r_first = lane / nfv, v_first = lane - r_first * nfv;

    // 1. zero rows: [z0, z1) minus [base, end), as two row pieces walked as one
    const int64_t z0 = ci * Wz, z1 = imin(z0 + Wz, R);
    const int64_t a0 = z0, n1 = imax(imin(z1, base) - z0, 0);
    const int64_t b0 = imax(z0, end), n2 = imax(z1 - b0, 0);
    OutT z[V];
    SEGOPS_UNROLL
    for (int j = 0; j < V; ++j) z[j] = OutT(0);
    for (int64_t r = r_first, v = v_first; r < n1 + n2;) {
      const int64_t row = r < n1 ? a0 + r : b0 + (r - n1);
      store_vec<V>(out, (b * R + row) * F + v * V, z);
      r += dr;
      v += dv;
      if (v >= nfv) {
        v -= nfv;
        ++r;
      }
    }

    // 2. rows of the chunk's merge-path items, each from its segment
    const int64_t d0 = ci * W;
    if (S == 0 || d0 >= S + nnz) return;
    const MergeCoord m0 = merge_path_search(p, S, nnz, d0);
    const MergeCoord m1 = merge_path_search(p, S, nnz, imin(d0 + W, S + nnz));
    const int64_t r0 = m0.row, nrows = imax(m1.row - m0.row, 0);
    int64_t s = imin(m0.seg, S - 1);
    for (int64_t r = r_first, v = v_first; r < nrows;) {
      const int64_t rr = r0 + r;  // rows only increase along the loop: advance the segment
      while (s < S - 1 && iclamp(rd(p + s + 1), base, end) - base <= rr) ++s;
      const int64_t e = (b * R + base + rr) * F + v * V, se = (b * S + s) * F + v * V;
      OutT o[V];
      fn.template apply<V>(e, se, o);
      store_vec<V>(out, e, o);
      r += dr;
      v += dv;
      if (v >= nfv) {
        v -= nfv;
        ++r;
      }
    }
  }
};

// ---- plans (host) ----------------------------------------------------------------------------------

// Tunables. The plan depends only on shapes and dtype (never on the GPU), so results are reproducible.
struct Tuning {
  int64_t target_threads = int64_t(1) << 19;  // expansions: grow chunks until a launch has at most this many threads
  // merge-path reductions (ReduceMain): the same for pass 1. 2^18 threads are 2.6 waves of an H100 at 24
  // warps per SM; fewer, longer chunks mean fewer segment starts per group and fewer carries to fix up (by
  // the memory model: power-law F = 16 fp32 sum 133.6 -> 126.1 us; 2^17 leaves too few warps: 139.1 us)
  int64_t reduce_threads = int64_t(1) << 18;
  int64_t reduce_w_min = 32, reduce_w_max = 256;
  int flat_items = 0;  // F == 1 (ReduceFlatBlock): merge items per thread; 0: the kernel's kItemsMax
  int64_t expand_w_min = 32, expand_work_max = 8192;  // expand: W * nfv <= this
  int64_t level_k = 64;                               // carries merged per group and level
  int64_t max_lanes = 64;                             // lanes sharing one reduction chunk
  int64_t validate_per_thread = 16;                   // offsets per thread of a standalone validation
  // Short-segment plan (ReduceShort): F > 1 and N <= short_avg_max * S (an average segment of at most that
  // many rows); a group of lanes then owns about short_rows rows' worth of whole segments.
  int64_t short_avg_max = 16, short_rows = 64;
  // ... and segments of more than short_long_rows rows are read in pieces of that many rows (ReduceShortPieces).
  int64_t short_long_rows = 256;
  unsigned plans = kAllPlans;  // the reduction plans allowed (cuda_plans.h; must hold short or merge)
};

struct ReducePlan {
  int kind = kPlanNone;  // ReducePlanKind
  bool flat = false;
  bool short_segs = false;  // ReduceShort: groups own whole segments (Sg per group, gpb groups per batch)
  int64_t Sg = 0, gpb = 0;
  int64_t P = 0, ppb = 0;   // ReduceShortPieces: rows per piece, pieces per batch (0: no segment can be long)
  int V = 1;
  int64_t G = 1, tiles = 1, ft = 1, W = 1, cpb = 0, C = 0, main_threads = 0;
  int L = 1;
  int64_t n[kMaxLevels] = {};
};

// Levels of keyed partial states combined K at a time (LevelCarry): n0 entries at level 0.
inline void plan_levels(ReducePlan& pl, int64_t n0, int64_t K) {
  pl.n[0] = n0;
  pl.L = 1;
  while (pl.n[pl.L - 1] > K && pl.L < kMaxLevels) {
    pl.n[pl.L] = ceil_div(pl.n[pl.L - 1], K);
    ++pl.L;
  }
}

// vmax: elements per 16-byte vector of the input dtype; vec_ok: F % vmax == 0 and pointers aligned.
// Which plan reduces [B, N, F] rows into S segments: the one-feature block kernel for F == 1, short segments
// (at most short_avg_max rows on average), else the merge-path plan; among the plans t.plans allows (short and
// merge each handle every shape).
inline int choose_plan(int64_t N, int64_t S, int64_t F, const Tuning& t) {
  const bool can_short = (t.plans & plan_bit(kPlanShort)) != 0, can_merge = (t.plans & plan_bit(kPlanMerge)) != 0;
  if (F == 1 && (t.plans & plan_bit(kPlanBlock))) return kPlanBlock;
  if (can_short && (N <= t.short_avg_max * S || !can_merge)) return kPlanShort;
  return kPlanMerge;
}

inline ReducePlan plan_reduce(int64_t B, int64_t N, int64_t S, int64_t F, int vmax, bool vec_ok,
                              const Tuning& t = Tuning()) {
  ReducePlan pl;
  if (B == 0 || S == 0 || F == 0) return pl;  // nothing to reduce (validation still runs)
  pl.kind = choose_plan(N, S, F, t);
  pl.flat = pl.kind == kPlanBlock;
  pl.V = (!pl.flat && vec_ok && F % vmax == 0) ? vmax : 1;
  const int64_t nfv = F / pl.V;
  pl.G = pl.flat ? 1 : imin(nfv, t.max_lanes);
  pl.tiles = ceil_div(nfv, pl.G);
  pl.ft = pl.G * pl.V;
  if (pl.kind == kPlanShort) {
    pl.short_segs = true;
    // (at most short_rows segments: many empty segments still spread over many groups)
    pl.Sg = iclamp(ceil_div(t.short_rows * S, imax(N, 1)), 1, imax(1, t.short_rows));
    pl.gpb = ceil_div(S, pl.Sg);
    pl.main_threads = B * pl.gpb * pl.G * pl.tiles;
    pl.P = imax(1, t.short_long_rows);
    pl.ppb = N > pl.P ? ceil_div(N, pl.P) : 0;
    plan_levels(pl, B * pl.ppb, t.level_k);  // the pieces' slot-0 states
    return pl;
  }
  if (pl.flat) {
    pl.W = 256 * imax(1, t.flat_items);  // ReduceFlatBlock: kBlock threads of `items` items
  } else {
    pl.W = t.reduce_w_min;
    while (pl.W < t.reduce_w_max && B * ceil_div(S + N, pl.W) * pl.G * pl.tiles > t.reduce_threads) pl.W *= 2;
  }
  pl.cpb = ceil_div(S + N, pl.W);
  pl.C = B * pl.cpb;
  pl.main_threads = pl.C * (pl.flat ? 256 : pl.G * pl.tiles);
  plan_levels(pl, pl.C, t.level_k);  // the chunks' carries
  return pl;
}

struct ExpandPlan {
  int V = 1;
  int64_t nfv = 0, W = 1, cpb = 0, Wz = 0, C = 0, threads = 0;
};

inline ExpandPlan plan_expand(int64_t B, int64_t R, int64_t S, int64_t F, int vmax, bool vec_ok,
                              const Tuning& t = Tuning()) {
  ExpandPlan pl;
  if (B == 0 || R == 0 || F == 0) return pl;
  pl.V = (vec_ok && F % vmax == 0) ? vmax : 1;
  pl.nfv = F / pl.V;
  const int64_t w_max = imax(t.expand_w_min, t.expand_work_max / pl.nfv);
  pl.W = t.expand_w_min;
  while (pl.W < w_max && B * ceil_div(S + R, pl.W) * 32 > t.target_threads) pl.W *= 2;
  pl.cpb = ceil_div(S + R, pl.W);
  pl.Wz = ceil_div(R, pl.cpb);
  pl.C = B * pl.cpb;
  pl.threads = pl.C * 32;
  return pl;
}

// The 16-byte vector path: V = kVec elements of the input move per load, and V results per store into the
// output. in_aligned says the inputs allow it; the output must too (a user's `out=` may start anywhere, e.g.
// at storage offset 1). The stores are sizeof(OutT) * kVec wide (32 bytes for float states of a 16-bit input).
SEGOPS_HD bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }
template <int kVec, class OutT> SEGOPS_HD bool vector_path_ok(bool in_aligned, const OutT* out) {
  return in_aligned && aligned_to(out, sizeof(OutT) * kVec);
}

// ---- drivers (host): plan, carve the workspace, launch the kernels in order --------------------------
//
// Exec provides: void* workspace(size_t bytes) (device memory alive until the op returns),
// template <class K> void launch(const K& k, int64_t threads) (k(tid) per thread) and
// template <class K> void launch_blocks(const K& k, int64_t blocks) (a block kernel, K::kBlock threads each).

struct Geometry {
  int64_t B = 1, N = 0, S = 0, F = 1;  // src viewed as [B, N, F]; S segments
  const int64_t* indptr = nullptr;     // contiguous int64 rows of S + 1 offsets
  int64_t indptr_rows = 0;
  BatchMap bmap;
};

// An op call's ErrorSlot (err: the per-device error word) and the kernel parts that use it.
struct ErrorContext : ErrorSlot {
  // The same call validating into a private word of its own (tag 0), read back by the host right away.
  ErrorContext with_word(u64* word) const {
    ErrorContext ec = *this;
    ec.err = word;
    ec.tag = 0;
    return ec;
  }
  Validate validate(const Geometry& g, int64_t threads) const {
    Validate v;
    v.p = g.indptr;
    v.len = g.S + 1;
    v.total = g.indptr_rows * v.len;
    v.limit = limit;
    v.err = err;
    v.tag = tag;
    v.per_thread = threads > 0 ? ceil_div(v.total, threads) : 0;
    return v;
  }
  Publish publish(const Geometry& g) const { return Publish{*this, g.indptr, g.S + 1, g.indptr_rows}; }
};

inline ChunkGrid chunk_grid(const Geometry& g, int64_t W, int64_t cpb) {
  return ChunkGrid{g.indptr, g.bmap, g.S, g.F, W, cpb};
}

// Value-initialises a kernel functor of type K and hands it to setup (which fills it in and launches it).
template <class K, class Setup> void with_kernel(const Setup& setup) {
  K k{};
  setup(k);
}

struct Carver {
  char* base = nullptr;
  size_t off = 0;
  template <typename X> X* take(int64_t n) {
    off = (off + 255) / 256 * 256;
    X* p = reinterpret_cast<X*>(base == nullptr ? nullptr : base + off);
    off += static_cast<size_t>(n) * sizeof(X);
    return p;
  }
};

// The keyed partial states of every level (plan_levels) in the workspace, F states an entry.
template <class State>
void take_levels(Carver& cv, const ReducePlan& pl, int64_t F, State* (&carry)[kMaxLevels],
                 int64_t* (&key)[kMaxLevels]) {
  for (int l = 0; l < pl.L; ++l) {
    carry[l] = cv.take<State>(pl.n[l] * F);
    key[l] = cv.take<int64_t>(pl.n[l]);
  }
}

// The levels as the kernels that walk them read them.
template <class State>
KeyedLevels<State> keyed_levels(const ReducePlan& pl, int64_t K, State* const (&carry)[kMaxLevels],
                                int64_t* const (&key)[kMaxLevels]) {
  KeyedLevels<State> lv{};
  for (int l = 0; l < pl.L; ++l) {
    lv.carry[l] = carry[l];
    lv.key[l] = key[l];
  }
  lv.L = pl.L;
  lv.K = K;
  return lv;
}

// Levels 1.. of the keyed partial states, in order (level l reads level l - 1).
template <class Op, class Exec>
void launch_levels(Exec& ex, const ReducePlan& pl, int64_t F, int64_t K, typename Op::State* const (&carry)[kMaxLevels],
                   int64_t* const (&key)[kMaxLevels]) {
  for (int l = 1; l < pl.L; ++l) {
    LevelCarry<Op> lc{carry[l - 1], key[l - 1], pl.n[l - 1], carry[l], key[l], pl.n[l], F, K};
    ex.launch(lc, pl.n[l] * F);
  }
}

template <class Exec>
void launch_validate(Exec& ex, const Geometry& g, const ErrorContext& ec, u64* max_last, const Tuning& t) {
  const int64_t total = g.indptr_rows * (g.S + 1);
  if (total == 0) return;
  ValidateKernel k;
  const int64_t threads = ceil_div(total, t.validate_per_thread);
  k.val = ec.validate(g, threads);
  k.max_last = max_last;
  if (max_last != nullptr) k.val.per_thread = t.validate_per_thread;  // the max needs every thread's slice
  ex.launch(k, threads);
}

// out/arg: [B, S, F]. Load::A must be the reducer's accumulation type.
// in_aligned: the input pointers are 16-byte aligned (the vector path also needs an aligned out and
// F % Load::kVec == 0).
// Returns the plan that ran (ReducePlanKind).
template <class Op, class Load, class OutT, class Exec>
int run_reduce(Exec& ex, const Geometry& g, const Load& load, OutT* out, int64_t* arg, const ErrorContext& ec,
                bool in_aligned, const Tuning& t = Tuning()) {
  using State = typename Op::State;
  const bool vec_ok = vector_path_ok<Load::kVec>(in_aligned, out);
  using FlatK = ReduceFlatBlock<Op, Load, OutT>;
  Tuning tf = t;
  tf.flat_items = t.flat_items > 0 ? static_cast<int>(imin(t.flat_items, FlatK::kItemsMax)) : FlatK::kItemsMax;
  const ReducePlan pl = plan_reduce(g.B, g.N, g.S, g.F, Load::kVec, vec_ok, tf);
  auto fill_fixup = [&](auto& k) {  // (C = 0: it only publishes this call's indptr error)
    static_cast<ChunkGrid&>(k) = chunk_grid(g, pl.W, pl.cpb);
    k.N = g.N;
    k.out = out;
    k.arg = arg;
    k.pub = ec.publish(g);
  };
  Fixup<Op, OutT, 1> publish{};  // the last launch of the plans without carries
  fill_fixup(publish);
  if (pl.main_threads == 0) {  // nothing to reduce: validate, then publish
    launch_validate(ex, g, ec, nullptr, t);
    ex.launch(publish, 1);
    return pl.kind;
  }
  if (pl.short_segs) {  // the pieces of long segments, one pass over whole segments, then publish
    State* carry[kMaxLevels] = {};  // carry[0]: slot 0 of every piece, then its levels
    int64_t* key[kMaxLevels] = {};
    State* part1 = nullptr;
    int64_t* key1 = nullptr;
    if (pl.ppb > 0) {
      Carver cv;
      for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1) cv = Carver{static_cast<char*>(ex.workspace(cv.off)), 0};
        part1 = cv.take<State>(pl.n[0] * g.F);
        key1 = cv.take<int64_t>(pl.n[0]);
        take_levels(cv, pl, g.F, carry, key);
      }
    }
    const PieceGrid pieces{g.indptr, g.bmap, g.S, g.F, g.N, pl.P, pl.ppb, pl.G, pl.tiles, pl.ft};
    const int64_t piece_threads = g.B * pl.ppb * pl.G * pl.tiles;
    auto fill_short = [&](auto& k) {
      k.indptr = g.indptr;
      k.bmap = g.bmap;
      k.S = g.S;
      k.F = g.F;
      k.Sg = pl.Sg;
      k.gpb = pl.gpb;
      k.G = pl.G;
      k.tiles = pl.tiles;
      k.ft = pl.ft;
      k.load = load;
      k.N = g.N;
      k.out = out;
      k.arg = arg;
      k.val = ec.validate(g, pl.main_threads);
      k.long_rows = pl.ppb > 0 ? pl.P : std::numeric_limits<int64_t>::max();
      k.piece_threads = piece_threads;
      static_cast<PieceGrid&>(k.pieces) = pieces;
      k.pieces.load = load;
      k.pieces.part0 = carry[0];
      k.pieces.key0 = key[0];
      k.pieces.part1 = part1;
      k.pieces.key1 = key1;
      ex.launch(k, piece_threads + pl.main_threads);
    };
    auto fill_finish = [&](auto& k) {
      static_cast<PieceGrid&>(k) = pieces;
      k.lv = keyed_levels(pl, t.level_k, carry, key);
      k.part1 = part1;
      k.key1 = key1;
      k.out = out;
      k.arg = arg;
      ex.launch(k, piece_threads);
    };
    if (pl.V > 1) {
      with_kernel<ReduceShort<Op, Load, OutT, Load::kVec>>(fill_short);
    } else {
      with_kernel<ReduceShort<Op, Load, OutT, 1>>(fill_short);
    }
    if (pl.ppb > 0) {
      launch_levels<Op>(ex, pl, g.F, t.level_k, carry, key);
      if (pl.V > 1) {
        with_kernel<FinishLongSegments<Op, OutT, Load::kVec>>(fill_finish);
      } else {
        with_kernel<FinishLongSegments<Op, OutT, 1>>(fill_finish);
      }
    }
    ex.launch(publish, 1);
    return pl.kind;
  }
  // workspace: level-0 carries/heads/keys, then the carries/keys of the higher levels
  State* carry[kMaxLevels] = {};
  int64_t* key[kMaxLevels] = {};
  State* head = nullptr;
  int64_t* hkey = nullptr;
  MergeCoord* coord = nullptr;
  const int64_t n_coord = g.B * (pl.cpb + 1);
  Carver cv;
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) cv = Carver{static_cast<char*>(ex.workspace(cv.off)), 0};
    coord = cv.take<MergeCoord>(n_coord);
    head = cv.take<State>(pl.C * g.F);
    hkey = cv.take<int64_t>(pl.C);
    take_levels(cv, pl, g.F, carry, key);
  }
  Partition part{};
  static_cast<ChunkGrid&>(part) = chunk_grid(g, pl.W, pl.cpb);
  part.N = g.N;
  part.coord = coord;
  ex.launch(part, n_coord);
  auto fill_chunks = [&](auto& k) {  // the fields of every pass-1 kernel of the merge-path plan
    static_cast<ChunkGrid&>(k) = chunk_grid(g, pl.W, pl.cpb);
    k.coord = coord;
    k.load = load;
    k.N = g.N;
    k.out = out;
    k.arg = arg;
    k.carry = carry[0];
    k.head = head;
    k.ckey = key[0];
    k.hkey = hkey;
    k.val = ec.validate(g, pl.main_threads);
  };
  auto fill_main = [&](auto& k) {
    fill_chunks(k);
    k.G = pl.G;
    k.tiles = pl.tiles;
    k.ft = pl.ft;
    ex.launch(k, pl.main_threads);
  };
  if (pl.flat) {
    FlatK k{};
    fill_chunks(k);
    k.items = static_cast<int>(pl.W / FlatK::kBlock);
    k.total = g.B * g.N;
    k.vec_ok = in_aligned;  // (it loads 16-byte vectors; its results are stored one by one)
    ex.launch_blocks(k, pl.C);
  } else if (pl.V > 1) {
    with_kernel<ReduceMain<Op, Load, OutT, Load::kVec>>(fill_main);
  } else {
    with_kernel<ReduceMain<Op, Load, OutT, 1>>(fill_main);
  }
  launch_levels<Op>(ex, pl, g.F, t.level_k, carry, key);
  auto finish = [&](auto& k) {
    fill_fixup(k);
    k.C = pl.C;
    k.lv = keyed_levels(pl, t.level_k, carry, key);
    k.head = head;
    k.hkey = hkey;
    ex.launch(k, imax(1, pl.C * (g.F / pl.V)));
  };
  if (pl.V > 1) {
    with_kernel<Fixup<Op, OutT, Load::kVec>>(finish);
  } else {
    with_kernel<Fixup<Op, OutT, 1>>(finish);
  }
  return pl.kind;
}

// out: [B, R, F]; Fn::apply reads the segment data ([B, S, F]) and, for softmax, the [B, R, F] inputs.
// kVec: elements per 16-byte vector of the element type; in_aligned: Fn's input pointers are 16-byte aligned
// (out is checked here).
template <int kVec, class Fn, class Exec>
void run_expand(Exec& ex, const Geometry& g, int64_t R, const Fn& fn, typename Fn::OutT* out, const Publish& pub,
                bool in_aligned, const Tuning& t = Tuning()) {
  const ExpandPlan pl = plan_expand(g.B, R, g.S, g.F, kVec, vector_path_ok<kVec>(in_aligned, out), t);
  auto go = [&](auto& k) {
    static_cast<ChunkGrid&>(k) = chunk_grid(g, pl.W, pl.cpb);
    k.fn = fn;
    k.R = R;
    k.Wz = pl.Wz;
    k.C = pl.C;
    k.nfv = pl.nfv;
    k.out = out;
    k.pub = pub;
    ex.launch(k, imax(pl.threads, pub.to.err != nullptr ? 1 : 0));
  };
  if (pl.V > 1) {
    with_kernel<Expand<Fn, kVec>>(go);
  } else {
    with_kernel<Expand<Fn, 1>>(go);
  }
}

}  // namespace cuda
}  // namespace torch_segops
