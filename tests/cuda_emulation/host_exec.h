// What the host emulations of the CUDA kernels share (emulate_kernels.cpp, emulate_scatter.cpp): the check
// counters and EXPECT, exact-size buffers, the initcheck shadow of the workspaces (the trace hooks of
// device_primitives.cuh, so include this after the kernels with SEGOPS_TRACE_ACCESSES defined) and HostExec, the
// Exec of the drivers that runs per-thread kernels in forward, reverse or shuffled order and block kernels as
// fibers (block_emulation.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "block_emulation.h"
#include "cuda/indptr_errors.cuh"

using namespace torch_segops;
using namespace torch_segops::cuda;

static long g_checks = 0, g_failures = 0;
static std::string g_ctx;

#define EXPECT(cond, ...)                                                   \
  do {                                                                      \
    ++g_checks;                                                             \
    if (!(cond)) {                                                          \
      if (++g_failures <= 40) {                                             \
        std::fprintf(stderr, "FAIL line %d [%s]: ", __LINE__, g_ctx.c_str()); \
        std::fprintf(stderr, __VA_ARGS__);                                  \
        std::fputc('\n', stderr);                                           \
      }                                                                     \
    }                                                                       \
  } while (0)

// ---- exact-size buffers (AddressSanitizer sees every overrun) -------------------------------------------

template <typename X> struct Buf {
  X* base = nullptr;
  X* p = nullptr;
  size_t n = 0;
  Buf() = default;
  // misalign: place the data one element after a 16-byte boundary
  explicit Buf(size_t count, bool misalign = false) : n(count) {
    void* m = nullptr;
    const size_t extra = misalign ? 1 : 0;
    if (posix_memalign(&m, 64, (count + extra) * sizeof(X) + (count + extra == 0 ? 1 : 0)) != 0) std::abort();
    base = static_cast<X*>(m);
    p = base + extra;
    std::memset(static_cast<void*>(base), 0xA5, (count + extra) * sizeof(X));
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  Buf(Buf&& o) noexcept : base(o.base), p(o.p), n(o.n) { o.base = o.p = nullptr; }
  Buf& operator=(Buf&& o) noexcept {
    std::swap(base, o.base);
    std::swap(p, o.p);
    std::swap(n, o.n);
    return *this;
  }
  ~Buf() { std::free(base); }
  X& operator[](size_t i) { return p[i]; }
  const X& operator[](size_t i) const { return p[i]; }
};

// ---- initcheck: which workspace bytes have been written --------------------------------------------------

struct WrittenShadow {
  const char* lo;
  const char* hi;
  std::vector<uint8_t> written;
};
static std::vector<WrittenShadow> g_shadows;  // the workspaces alive (HostExec)
static long g_uninit_reads = 0;

void segops_trace_use() {}
// shared memory: the block emulation's race check (the tracer counts bank conflicts here)
void segops_trace_shared(const void* p, int bytes, bool store, int) {
  segops_emu::BlockRunner::shared_access(p, bytes, store);
}
void segops_trace_step() {}

void segops_trace_access(const void* p, int bytes, int kind, int site) {
  const char* c = static_cast<const char*>(p);
  for (auto& w : g_shadows) {
    if (c < w.lo || c >= w.hi) continue;
    const size_t off = static_cast<size_t>(c - w.lo), n = std::min<size_t>(bytes, w.written.size() - off);
    if (kind == 2) {
      std::memset(w.written.data() + off, 1, n);
    } else if (std::find(w.written.begin() + off, w.written.begin() + off + n, 0) != w.written.begin() + off + n) {
      ++g_uninit_reads;
      EXPECT(false, "a kernel read %d workspace bytes never written (device_primitives.cuh line %d)", bytes, site);
    }
    return;
  }
}

struct ExecFailure {};  // what HostExec throws where a test makes an op call end between its launches

struct HostExec {
  int order = 0;  // 0 forward, 1 reverse, 2 shuffled (fixed seed)
  std::vector<void*> mem;
  int64_t launches = 0;
  bool fail_workspace = false;  // workspace() throws
  int64_t fail_launch = -1;     // launch number fail_launch (counting from 0) throws
  ErrorSlot call_slot;          // slot(): the op call's slot of the error word (CallErrors)
  ErrorSlot slot(int64_t limit) const {
    ErrorSlot s = call_slot;
    s.limit = limit;
    return s;
  }
  void zero(void* p, size_t bytes) { std::memset(p, 0, bytes); }
  void* workspace(size_t bytes) {
    if (fail_workspace) throw ExecFailure{};
    void* m = nullptr;
    if (posix_memalign(&m, 256, bytes == 0 ? 1 : bytes) != 0) std::abort();
    std::memset(m, 0xA5, bytes);  // garbage: any use of an unwritten partial state shows up
    mem.push_back(m);
    g_shadows.push_back({static_cast<const char*>(m), static_cast<const char*>(m) + bytes,
                         std::vector<uint8_t>(bytes, 0)});
    return m;
  }
  template <class K> void launch(const K& k, int64_t n) {
    if (launches++ == fail_launch) throw ExecFailure{};
    if (n <= 0) return;
    if (order == 0) {
      for (int64_t t = 0; t < n; ++t) k(t);
    } else if (order == 1) {
      for (int64_t t = n - 1; t >= 0; --t) k(t);
    } else {
      std::vector<int64_t> ids(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; ++t) ids[t] = t;
      std::mt19937_64 rng(12345 + n);
      std::shuffle(ids.begin(), ids.end(), rng);
      for (int64_t t : ids) k(t);
    }
  }
  // block kernels: blocks in forward (order 0, 2) or reverse order, threads of a block as fibers in `order`
  template <class K> void launch_blocks(const K& k, int64_t blocks) {
    if (launches++ == fail_launch) throw ExecFailure{};
    segops_emu::BlockRunner runner;
    runner.order = order;
    segops_emu::run_blocks(runner, k, blocks, 0xA5);
  }
  ~HostExec() {
    for (void* m : mem) {
      g_shadows.erase(std::remove_if(g_shadows.begin(), g_shadows.end(),
                                     [m](const WrittenShadow& w) { return w.lo == static_cast<const char*>(m); }),
                      g_shadows.end());
      std::free(m);
    }
  }
};

// The tunings the kernels are checked under: the default, and small chunks and groups that force every plan,
// deep carry levels and the long-segment pieces on small inputs.
struct Tunings {
  Tuning dflt, tiny, tiny_short, mid, tiny_merge_only, tiny_short_only;
};

inline Tunings make_tunings() {
  Tunings ts;
  Tuning& tiny = ts.tiny;  // tiny chunks and groups: many crossing segments, 3+ carry levels on small inputs
  tiny.reduce_w_min = tiny.reduce_w_max = 3;
  tiny.flat_items = 1;  // F == 1: 256-item chunks
  tiny.level_k = 2;
  tiny.expand_w_min = 3;
  tiny.expand_work_max = 4;
  tiny.max_lanes = 3;
  tiny.validate_per_thread = 3;
  tiny.short_avg_max = 0;  // the merge-path kernels with tiny chunks, whatever the segment lengths
  Tuning& tiny_short = ts.tiny_short = tiny;  // the short-segment kernel on every F > 1 input, with tiny groups
  tiny_short.short_avg_max = int64_t(1) << 40;
  tiny_short.short_rows = 3;
  tiny_short.short_long_rows = 5;  // segments of more than 5 rows: in pieces of 5 rows (ReduceShortPieces)
  Tuning& mid = ts.mid;
  mid.reduce_w_min = mid.reduce_w_max = 8;
  mid.flat_items = 3;
  mid.level_k = 3;
  mid.expand_w_min = 8;
  mid.max_lanes = 16;
  mid.target_threads = 64;
  mid.reduce_threads = 64;
  // One-feature inputs on the plans that TORCH_SEGOPS_CUDA_PLANS can force instead of the block kernel.
  ts.tiny_merge_only = tiny;
  ts.tiny_short_only = tiny_short;
  ts.tiny_merge_only.plans = plan_bit(kPlanMerge);
  ts.tiny_short_only.plans = plan_bit(kPlanShort);
  return ts;
}
