// Invalid indptr on the GPU, device and host halves: the offset checks of the CPU backend run by the first
// kernel of an op (Validate, or ValidateKernel alone), which keeps the first bad position in a per-device
// error word (an integer atomicMin, tagged by the op call), and Publish, run by a later kernel of the same
// op, which copies that call's error into a host-mapped ErrorRecord the host reports at its next call
// (docs/cuda.md, "Invalid indptr on the GPU"). Every offset a kernel reads is clamped into the valid row
// range, so no kernel reads or writes out of bounds whatever indptr holds. The COO index kernels
// (coo_kernels.cuh) report through the same word and record.
#pragma once

#include <cstdint>

#include "cuda/device_primitives.cuh"
#include "op_names.h"

namespace torch_segops {
namespace cuda {

constexpr u64 kNoError = ~0ull;  // value of an empty error word
constexpr int kTagBits = 16;     // low bits of the error word: the tag of the op call that found it

// The tag of the n-th op call: it comes back every 2^16 calls.
inline uint32_t call_tag(uint32_t n) { return n & ((1u << kTagBits) - 1); }

// Written by the device into host memory mapped into its address space; `code` last.
struct ErrorRecord {
  int32_t code;    // 0: empty, 1: an error was found
  int32_t op;      // OpId
  int32_t device;
  int32_t what;    // kWhatIndptr, or the IndexProblem (op_names.h) of an invalid COO index
  int64_t pos;     // flat position in indptr (in the index)
  int64_t len;     // offsets per indptr row (S + 1); index: entries per row
  int64_t rows;    // indptr (index) rows
  int64_t value;   // indptr[pos]
  int64_t prev;    // indptr[pos - 1] (0 when pos starts a row)
  int64_t limit;   // bound of the last offset, -1: none; index: dim_size
};
constexpr int32_t kWhatIndptr = -1;

// The offset checks of the CPU backend, for offset v at position k of a row of len (prev: the offset before it).
SEGOPS_HD bool offset_bad(int64_t v, int64_t prev, int64_t k, int64_t len, int64_t limit) {
  return k == 0 ? v < 0 : (v < prev || (k == len - 1 && limit >= 0 && v > limit));
}

// The same for position i of a flattened [rows, len] indptr.
SEGOPS_HD bool indptr_bad(const int64_t* p, int64_t i, int64_t k, int64_t len, int64_t limit) {
  return offset_bad(rd(p + i), k != 0 ? p[i - 1] : 0, k, len, limit);
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
        if (offset_bad(x, prev, k, len, limit)) {
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

// The error word's value when it holds an error tagged by this call, else kNoError.
SEGOPS_HD u64 own_error(const ErrorSlot& to) {
  if (to.err == nullptr || to.rec == nullptr) return kNoError;
  const u64 v = *static_cast<volatile u64*>(to.err);
  return v != kNoError && (v & ((1u << kTagBits) - 1)) == to.tag ? v : kNoError;
}

// Copies an error that the word holds (v) into the host record, unless the record holds an earlier one not
// yet reported, then empties the word.
SEGOPS_HD void publish_error(const ErrorSlot& to, u64 v, int32_t what, int64_t pos, int64_t len, int64_t rows,
                             int64_t value, int64_t prev) {
  volatile ErrorRecord* r = to.rec;
  if (r->code == 0) {
    r->op = to.op;
    r->device = to.device;
    r->what = what;
    r->pos = pos;
    r->len = len;
    r->rows = rows;
    r->value = value;
    r->prev = prev;
    r->limit = to.limit;
    fence_system();
    r->code = 1;
  }
  atomic_cas_u64(to.err, v, kNoError);
}

// Copies this call's error (if the error word holds one with our tag) into the host record, then
// empties the word. Run by one thread of a kernel that follows the validating one. A word with our tag
// whose position is not a bad offset of this indptr was left by another call (one that ended before its
// publish, 2^16 calls earlier): it is emptied, never read from or reported.
struct Publish {
  ErrorSlot to;
  const int64_t* p = nullptr;
  int64_t len = 1, rows = 0;
  SEGOPS_HD void run() const {
    const u64 v = own_error(to);
    if (v == kNoError) return;
    const int64_t pos = static_cast<int64_t>(v >> kTagBits), k = pos % len;
    const int64_t value = pos < rows * len ? rd(p + pos) : 0, prev = pos < rows * len && k != 0 ? p[pos - 1] : 0;
    if (pos >= rows * len || !offset_bad(value, prev, k, len, to.limit)) {
      atomic_cas_u64(to.err, v, kNoError);
      return;
    }
    publish_error(to, v, kWhatIndptr, pos, len, rows, value, prev);
  }
};

// Pub::run() as a launch of its own (one thread): the publish of an op call that ended between a launch that
// validates and the one that publishes (PublishOnAbort, below).
template <class Pub> struct PublishKernel {
  Pub pub;
  SEGOPS_HD void operator()(int64_t) const { pub.run(); }
};

// An op call's guarantee that the error word keeps nothing of it once the call has ended: armed with the
// call's publish when the call hands out its error slot, disarmed when it ends normally (its last kernel
// publishes); a call that leaves early (an exception between the launch that validates and the one that
// publishes, such as gather's out= check after its validation) gets the publish launched alone here. A word
// left holding (pos << 16 | tag) would hide every later error at a larger position (atomicMin), and 2^16
// calls later the call with the same tag would take it for its own.
template <class Exec, class Pub> class PublishOnAbort {
 public:
  explicit PublishOnAbort(Exec& ex) : ex_(ex) {}
  PublishOnAbort(const PublishOnAbort&) = delete;
  PublishOnAbort& operator=(const PublishOnAbort&) = delete;
  void arm(const Pub& pub) {
    pub_ = pub;
    armed_ = true;
  }
  void disarm() { armed_ = false; }
  ~PublishOnAbort() {
    if (!armed_) return;
    try {
      ex_.launch(PublishKernel<Pub>{pub_}, 1);
    } catch (...) {  // a launch that fails now has a broken context behind it, already being reported
    }
  }

 private:
  Exec& ex_;
  Pub pub_{};
  bool armed_ = false;
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

}  // namespace cuda
}  // namespace torch_segops
