// CUDA backend of torch_segops: the kernels behind the shared op entry points (segment_ops.h) for the CUDA
// dispatch key, through the stable ABI.
//
// The kernels (per-thread and block functors) and the host drivers that plan and launch them are in
// the headers beside this file (docs/cuda.md, "Source files"); what every CUDA op call does on the host is
// cuda_call.cuh (CudaCall). This file holds the state of the asynchronous error protocol (the per-device error
// word, the host record, the call tags) and CudaBackend. Argument checks, outputs and the order of the work are
// the shared entry points of segment_ops.h (with the [B, N, F] view and dtype dispatch of csr_args.h), so
// errors read exactly as on the CPU.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/csrc/stable/device.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "csr_args.h"
#include "cuda/call_errors.cuh"
#include "cuda/cuda_call.cuh"
#include "cuda/drivers.cuh"
#include "cuda/error_messages.h"
#include "cuda_plans.h"
#include "platform.h"
#include "reduction_policies.h"
#include "reduction_table.h"
#include "segment_ops.h"
#include "tensor_ptr.h"

#ifndef TORCH_SEGOPS_CUDA_ARCHS
#define TORCH_SEGOPS_CUDA_ARCHS "unknown"
#endif
#ifndef TORCH_SEGOPS_CUDA_VERSION
#define TORCH_SEGOPS_CUDA_VERSION "unknown"
#endif

namespace torch_segops {
namespace cuda {

// The per-device error word: the smallest invalid position found, tagged by the op call.
__device__ u64 g_error_word = kNoError;

// ---- CUDA errors -----------------------------------------------------------------------------------

namespace {

GpuInfo gpu_info(int dev) {
  GpuInfo g;
  g.index = dev;
  cudaDeviceGetAttribute(&g.major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&g.minor, cudaDevAttrComputeCapabilityMinor, dev);
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess) g.name = prop.name;
  return g;
}

// Errors that mean "this library has no code the GPU can run" (library built without its architecture,
// or PTX the driver cannot compile): reported with the fix (error_messages.h).
bool ptx_too_new(cudaError_t e) { return e == cudaErrorUnsupportedPtxVersion || e == cudaErrorInvalidPtx; }
bool no_usable_code(cudaError_t e) {
  return e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction || ptx_too_new(e);
}

}  // namespace

[[noreturn]] void throw_cuda(cudaError_t e, const char* op, const char* what) {
  cudaGetLastError();  // clear a non-sticky error so that later, unrelated CUDA calls do not see it
  int dev = -1;
  cudaGetDevice(&dev);
  if (no_usable_code(e)) {
    throw std::runtime_error(no_kernel_image_message(op, what, cudaGetErrorName(e), gpu_info(dev),
                                                     TORCH_SEGOPS_CUDA_ARCHS, TORCH_SEGOPS_CUDA_VERSION,
                                                     ptx_too_new(e)));
  }
  std::ostringstream os;
  os << "torch_segops." << op << ": CUDA error in " << what << " on cuda:" << dev << ": " << cudaGetErrorName(e)
     << " (" << cudaGetErrorString(e) << ")";
  throw std::runtime_error(os.str());
}

// ---- the asynchronous error protocol: the word, the record, the tags -----------------------------------

namespace {

std::atomic<ErrorRecord*> g_host_record{nullptr};
std::atomic<uint32_t> g_call_counter{0};

// One record in pinned host memory mapped into every device's address space (allocated on first use).
ErrorRecord* host_record(const char* op) {
  static std::mutex mu;
  ErrorRecord* r = g_host_record.load();
  if (r != nullptr) return r;
  std::lock_guard<std::mutex> lock(mu);
  r = g_host_record.load();
  if (r == nullptr) {
    void* p = nullptr;
    check_cuda(cudaHostAlloc(&p, sizeof(ErrorRecord), cudaHostAllocMapped | cudaHostAllocPortable), op,
               "cudaHostAlloc of the error record");
    std::memset(p, 0, sizeof(ErrorRecord));
    r = static_cast<ErrorRecord*>(p);
    g_host_record.store(r);
  }
  return r;
}

// Takes the pending error (if any) out of the record; returns false when there is none.
bool take_error(std::string& message) {
  ErrorRecord* r = g_host_record.load();
  if (r == nullptr || __atomic_load_n(&r->code, __ATOMIC_ACQUIRE) == 0) return false;
  const volatile ErrorRecord* v = r;
  message = found_error_message(v->op, v->what, v->device, v->pos, v->len, v->rows, v->value, v->prev, v->limit);
  __atomic_store_n(&r->code, 0, __ATOMIC_RELEASE);
  return true;
}

}  // namespace

DeviceErrorPtrs device_error_ptrs(int dev, const char* op) {
  static std::mutex mu;
  static std::map<int, DeviceErrorPtrs> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(dev);
  if (it != cache.end()) return it->second;
  DeviceErrorPtrs d;
  // First use on this device: load a kernel of this library explicitly, so that a library built without
  // the GPU's architecture fails here with cudaErrorNoKernelImageForDevice (the message names the fix),
  // whatever CUDA's lazy loading and the symbol lookup below would report.
  cudaFuncAttributes attr{};
  check_cuda(cudaFuncGetAttributes(&attr, run_kernel<ValidateKernel>), op, "loading the CUDA kernels");
  check_cuda(cudaGetSymbolAddress(reinterpret_cast<void**>(&d.word), g_error_word), op, "loading the CUDA module");
  ErrorRecord* host = host_record(op);
  check_cuda(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d.rec), host, 0), op,
             "mapping the error record");
  cache.emplace(dev, d);
  return d;
}

void raise_pending_error() {
  std::string msg;
  if (take_error(msg)) throw std::runtime_error(msg);
}

bool sync_checks() {
  static const bool on = [] {
    const char* v = std::getenv("TORCH_SEGOPS_CUDA_SYNC_CHECKS");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
}

uint32_t next_call_tag() { return call_tag(g_call_counter.fetch_add(1)); }

namespace {

inline bool aligned16(const void* p) { return aligned_to(p, 16); }

// ---- shapes --------------------------------------------------------------------------------------------

// Batch -> indptr row, as make_csr_args' batch_offset but computable on the device: src's leading dims
// (size-1 dims dropped) with the element stride of the matching indptr dim (0 where indptr broadcasts),
// adjacent dims merged when their strides chain.
BatchMap make_batch_map(const CsrArgs& a, const char* op) {
  BatchMap m;
  if (a.B == 0) return m;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (size, stride)
  std::vector<int64_t> istride(static_cast<size_t>(a.dim), 0);
  int64_t st = a.S + 1;
  for (int64_t d = a.dim - 1; d >= 0; --d) {
    istride[d] = st;
    st *= a.indptr.size(d);
  }
  for (int64_t d = 0; d < a.dim; ++d) {
    const int64_t size = a.src.size(d);
    if (size == 1) continue;
    const int64_t stride = a.indptr.size(d) == 1 ? 0 : istride[d];
    if (!dims.empty() && dims.back().second == stride * size) {
      dims.back() = {dims.back().first * size, stride};
    } else {
      dims.emplace_back(size, stride);
    }
  }
  SEGOPS_CHECK(dims.size() <= static_cast<size_t>(BatchMap::kMaxDims), op,
               "indptr broadcasts against src in more than ", BatchMap::kMaxDims,
               " alternating groups of leading dims, which the CUDA kernels do not support; "
               "expand indptr to src's leading shape first");
  m.ndims = static_cast<int>(dims.size());
  for (int i = 0; i < m.ndims; ++i) {
    m.size[i] = dims[i].first;
    m.stride[i] = dims[i].second;
  }
  // Cross-check with the host computation (a few batches at both ends).
  for (int64_t b = 0; b < a.B; b = (b == 63 && a.B > 128) ? a.B - 64 : b + 1) {
    SEGOPS_CHECK(m.offset(b) == a.batch_offset[b], op, "internal error: CUDA batch map disagrees for batch ", b);
  }
  return m;
}

Geometry make_geometry(const CsrArgs& a, const char* op) {
  Geometry g;
  g.B = a.B;
  g.N = a.N;
  g.S = a.S;
  g.F = a.F;
  g.indptr = cptr<int64_t>(a.indptr);
  g.indptr_rows = a.indptr_rows;
  g.bmap = make_batch_map(a, op);
  return g;
}

template <typename A> constexpr ScalarType scalar_type_of() {
  if constexpr (std::is_same_v<A, double>) {
    return ScalarType::Double;
  } else {
    return ScalarType::Float;
  }
}

// ---- the kernels for the shared entry points (segment_ops.h) -------------------------------------------

// Runs f(tag) for the floating-point dtypes (the shared layer has rejected the others with the CPU's
// message; the integer instantiations are never called and not compiled).
template <typename F>
void dispatch_floating(ScalarType st, const char* op, const char* what, const F& f) {
  dispatch_dtype(st, false, op, what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<acc_t<T>>) f(tag);
  });
}

struct CudaBackend {
  const char* op;
  CudaCall call;
  const Geometry g;
  CallErrors<CudaCall> errors{call, g};  // the error protocol's sequence (call_errors.cuh)

  CudaBackend(const CsrArgs& a, OpId id) : op(op_names(id).name), call(a.src, op, id), g(make_geometry(a, op)) {}

  // The plans this process allows (TORCH_SEGOPS_CUDA_PLANS, torch_segops.set_cuda_plans); read per call, so a
  // change takes effect at the next one.
  Tuning tuning() const {
    std::string error;
    Tuning t;
    t.plans = allowed_cuda_plans(&error);
    SEGOPS_CHECK(t.plans != 0, op, error);
    return t;
  }

  template <class Op, class Load, class OutT>
  void reduce_with(const Load& load, OutT* out, int64_t* arg, int64_t limit, bool in_aligned) {
    count_cuda_plan(errors.reduce<Op>(load, out, arg, limit, in_aligned, tuning()));
  }

  Tensor output(const Tensor& like, const std::vector<int64_t>& sizes, ScalarType dtype, const Tensor* given,
                const char* name) const {
    return output_for(like, sizes, dtype, given, op, name);
  }

  // Nothing to do before the kernels: each checks the offsets it reads (errors), asynchronously.
  void check_indptr(const CsrArgs&, int64_t, const char*) const {}

  // With size -1 the offsets are validated and max(indptr[..., -1]) read back now (a host sync); else
  // the validation runs before the expansion, which publishes what it found (errors).
  int64_t gather_rows(const CsrArgs& a, int64_t size, const char*) {
    if (size < 0) return validate_and_max(a.indptr);
    errors.validate_for_expand(size);
    return size;
  }

  void reduce(const CsrArgs& a, Reduce r, const Tensor& out, const Tensor* arg) {
    dispatch_dtype(a.src.scalar_type(), true, op, "src", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = cptr<T>(a.src);
      visit_reducer<acc_t<T>>(r, [&](auto op_tag) {
        using Op = typename decltype(op_tag)::type;
        reduce_with<Op>(SrcLoad<T>{x}, mptr<T>(out), arg != nullptr ? mptr<int64_t>(*arg) : nullptr, a.N,
                        aligned16(x));
      });
    });
  }

  void gather(const CsrArgs& a, int64_t R, const Tensor& out) {
    dispatch_dtype(a.src.scalar_type(), true, op, "src", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = cptr<T>(a.src);
      T* o = mptr<T>(out);
      errors.expand<SrcLoad<T>::kVec>(R, GatherFn<T>{x}, o, aligned16(x));
    });
  }

  void softmax(const CsrArgs& a, const Tensor& out) {
    dispatch_floating(a.src.scalar_type(), op, "src", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = cptr<T>(a.src);
      using Fn = SoftmaxFn<T>;
      reduce_then_expand<typename Fn::Stats, T>(a, out, SrcLoad<T>{x}, aligned16(x),
                                               [&](const typename Fn::State* stats) { return Fn{x, stats}; });
    });
  }

  void softmax_backward(const CsrArgs& a, const Tensor& grad, const Tensor& grad_in) {
    dispatch_floating(a.src.scalar_type(), op, "out", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* y = cptr<T>(a.src);
      const T* gp = cptr<T>(grad);
      reduce_then_expand<SumOp<acc_t<T>>, T>(a, grad_in, ProdLoad<T>{gp, y}, aligned16(gp) && aligned16(y),
                                             [&](const acc_t<T>* dot) { return SoftmaxBackwardFn<T>{y, gp, dot}; });
    });
  }

  void finish() {
    errors.end();
    call.finish();
  }

 private:
  // gather_csr with size -1: validate indptr and read max(indptr[..., -1]) (one device-to-host copy,
  // a host synchronisation); an invalid indptr raises here, with the CPU's message.
  int64_t validate_and_max(const Tensor& indptr) {
    Tensor ws = torch::stable::new_empty(indptr, {2}, ScalarType::Long);
    torch::stable::fill_(ws, -1.0);  // both words start at ~0
    u64* w = static_cast<u64*>(ws.mutable_data_ptr());
    launch_validate(call, g, ErrorContext{call.slot(-1)}.with_word(w), w + 1, Tuning());
    const Tensor host = torch::stable::to(ws, torch::stable::Device(torch::headeronly::DeviceType::CPU));
    const u64* hv = static_cast<const u64*>(host.const_data_ptr());
    if (hv[0] != kNoError) {
      const int64_t pos = static_cast<int64_t>(hv[0] >> kTagBits), len = g.S + 1;
      const int64_t first = pos % len != 0 ? pos - 1 : pos;
      Tensor flat = torch::stable::reshape(indptr, {g.indptr_rows * len});
      const Tensor vals = torch::stable::to(torch::stable::narrow(flat, 0, first, pos - first + 1),
                                            torch::stable::Device(torch::headeronly::DeviceType::CPU));
      const int64_t* pv = static_cast<const int64_t*>(vals.const_data_ptr());
      const int64_t value = pv[pos - first], prev = pos != first ? pv[0] : 0;
      throw std::runtime_error(indptr_error_message(call.id(), pos, len, g.indptr_rows, value, prev, -1));
    }
    return static_cast<int64_t>(~hv[1]);
  }

  // Softmax and its backward: per-segment statistics (Op's results over `load`'s rows, [B, S, F]: an
  // acc_t<T>, or a whole state for StateResult), then every row of `result` from its segment's statistic
  // (make_fn(stats) -> an expansion functor). in_aligned: load's pointers are 16-byte aligned (and so are
  // make_fn's row inputs).
  template <class Op, typename T, class Load, class MakeFn>
  void reduce_then_expand(const CsrArgs& a, const Tensor& result, const Load& load, bool in_aligned,
                          const MakeFn& make_fn) {
    using A = acc_t<T>;
    using Stat = decltype(Op::finalize(std::declval<typename Op::State>(), 0));
    static_assert(sizeof(Stat) % sizeof(A) == 0, "a statistic is a whole number of acc_t<T>");
    constexpr int64_t kWords = sizeof(Stat) / sizeof(A);
    Tensor stats = new_tensor(a.src, {a.B * a.S * a.F * kWords}, scalar_type_of<A>(), op, "softmax statistics");
    Stat* st = reinterpret_cast<Stat*>(mptr<A>(stats));
    reduce_with<Op>(load, st, nullptr, a.N, in_aligned);
    T* o = mptr<T>(result);
    run_expand<SrcLoad<T>::kVec>(call, g, a.N, make_fn(static_cast<const Stat*>(st)), o, Publish{}, in_aligned);
  }
};

}  // namespace
}  // namespace cuda
}  // namespace torch_segops

// For torch_segops.check_errors() (through ctypes; the caller synchronises the device first): copies the
// pending asynchronous indptr error, if any, into buf (NUL-terminated, truncated to len) and clears it.
// Returns 1 if there was one, 0 otherwise.
extern "C" SEGOPS_EXPORT int torch_segops_cuda_take_error(char* buf, size_t len) {
  std::string msg;
  if (!torch_segops::cuda::take_error(msg)) return 0;
  if (buf != nullptr && len > 0) {
    const size_t n = msg.size() < len - 1 ? msg.size() : len - 1;
    std::memcpy(buf, msg.data(), n);
    buf[n] = '\0';
  }
  return 1;
}

STABLE_TORCH_LIBRARY_IMPL(torch_segops, CUDA, m) {
  torch_segops::register_segment_ops<torch_segops::cuda::CudaBackend>(m);
}
