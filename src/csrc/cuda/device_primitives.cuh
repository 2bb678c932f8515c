// Device primitives of the CUDA kernels, with host stand-ins (the host emulation and the memory-access
// tracer run the same kernels on the CPU with g++): atomics, the global-memory accesses rd / rd_async / wr /
// load_vec / store_vec and their reduction-state forms, and the shared-memory accesses of block kernels.
// Every global access of a kernel, and every shared access the tracer counts, goes through one of these,
// and these are the only places that report accesses to the research model's tracer (research/gpu_model/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

// ---- access tracing (the memory-access model, research/gpu_model/model.py; compiled out everywhere else) -----
// The primitives below report each access to the host tracer (research/gpu_model/trace_kernels.cpp) when
// SEGOPS_TRACE_ACCESSES is defined. Global memory, kinds: 0 a load whose value is used later (at
// SEGOPS_TRACE_USE(): the thread then waits for every load it has in flight), 1 a load used at once (an offset
// deciding the next address), 2 a store. Shared memory of block kernels (SEGOPS_SH_LD / SEGOPS_SH_ST; the
// tracer counts their bank conflicts): each call site is its own instruction (site: its line), and
// SEGOPS_TRACE_STEP() marks a point every lane of a warp passes together (a loop iteration): the k-th shared
// access of a site after the same number of steps is one warp instruction. SEGOPS_TRACE_USE and
// SEGOPS_TRACE_STEP are the two hooks kernels write themselves: they mark program points (where loaded values
// are first used, where a warp's lanes meet), which no access can know.
#if defined(SEGOPS_TRACE_ACCESSES) && !defined(__CUDA_ARCH__)
void segops_trace_access(const void* p, int bytes, int kind, int site);
void segops_trace_use();
void segops_trace_shared(const void* p, int bytes, bool store, int site);
void segops_trace_step();
#define SEGOPS_TRACE(p, n, kind) ::segops_trace_access((p), static_cast<int>(n), (kind), __LINE__)
#define SEGOPS_TRACE_USE() ::segops_trace_use()
#define SEGOPS_TRACE_INDEX(p) SEGOPS_TRACE((p), 8, 1)
#define SEGOPS_TRACE_SHARED(x, store) ::segops_trace_shared(&(x), static_cast<int>(sizeof(x)), (store), __LINE__)
#define SEGOPS_SH_LD(x) (SEGOPS_TRACE_SHARED(x, false), (x))
#define SEGOPS_SH_ST(x, v) (SEGOPS_TRACE_SHARED(x, true), (x) = (v))
#define SEGOPS_TRACE_STEP() ::segops_trace_step()
#else
#define SEGOPS_TRACE(p, n, kind) ((void)0)
#define SEGOPS_TRACE_USE() ((void)0)
#define SEGOPS_SH_LD(x) (x)
#define SEGOPS_SH_ST(x, v) ((x) = (v))
#define SEGOPS_TRACE_STEP() ((void)0)
#endif

#include "index_math.h"
#include "reduction_policies.h"

namespace torch_segops {
namespace cuda {

using u64 = unsigned long long;

#if defined(__CUDA_ARCH__)  // device pass only: the host compiler would warn about an unknown pragma
#define SEGOPS_UNROLL _Pragma("unroll")
#else
#define SEGOPS_UNROLL
#endif


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


// The Blk of a block kernel on the GPU (the contract: block_kernels.cuh; the host's: the emulation's HostBlock).
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

// Shared memory of block kernels: SEGOPS_SH_LD(x) (the tracing block above) is the value of the shared
// lvalue x, SEGOPS_SH_ST(x, v) stores v in it. Macros, not functions: a site is the line that accesses, and
// outside the tracer they are the plain access itself (functions taking and returning references changed
// the block kernel's code).

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

}  // namespace cuda
}  // namespace torch_segops
