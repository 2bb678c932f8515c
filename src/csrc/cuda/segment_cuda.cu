// CUDA backend of torch_segops: the kernels behind the shared op entry points (segment_ops.h) for the CUDA
// dispatch key, through the stable ABI.
//
// The kernels (per-thread and block functors) and the host drivers that plan and launch them are in
// the headers beside this file (docs/cuda.md, "Source files"); this file holds what needs CUDA or torch: the generic __global__ launchers, the
// current stream, workspaces from torch's caching allocator, error reporting, and CudaBackend. Argument
// checks, outputs and the order of the work are the shared entry points of segment_ops.h (with the
// [B, N, F] view and dtype dispatch of csr_args.h), so errors read exactly as on the CPU.
//
// Stream: aoti_torch_get_current_cuda_stream(device, &stream) from the AOTI C shim (libtorch_cuda),
// declared under USE_CUDA in torch/csrc/inductor/aoti_torch/c/shim.h and available long before torch
// 2.10. torch::stable::accelerator::Stream::nativeHandle() would be the stable-API spelling, but it
// only exists from TORCH_FEATURE_VERSION 2.13, above our 2.10 target.
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

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/device.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "csr_args.h"
#include "cuda/drivers.cuh"
#include "cuda/error_messages.h"
#include "cuda_plans.h"
#include "platform.h"
#include "reducers.h"
#include "reductions.h"
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

// The per-device error word: the smallest invalid indptr position found, tagged by the op call.
__device__ u64 g_error_word = kNoError;

constexpr int kThreads = 256;

template <class K>
__global__ void __launch_bounds__(kThreads) run_kernel(const K k, int64_t n) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (tid < n) k(tid);
}

// Block kernels (block_kernels.cuh): K::kBlock threads, K::Shared in static shared memory; at least
// K::kMinBlocks resident per SM (caps the registers: 4 x 256 threads -> 64 registers, 32 warps per SM).
template <class K>
__global__ void __launch_bounds__(K::kBlock, K::kMinBlocks) run_block_kernel(const K k) {
  __shared__ typename K::Shared sh;
  DeviceBlock blk;
  k(blk, sh);
}

namespace {

// ---- CUDA errors -----------------------------------------------------------------------------------

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

inline void check_cuda(cudaError_t e, const char* op, const char* what) {
  if (e != cudaSuccess) throw_cuda(e, op, what);
}

// ---- indptr error reporting --------------------------------------------------------------------------

std::atomic<ErrorRecord*> g_host_record{nullptr};

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

struct DeviceErrorPtrs {
  u64* word = nullptr;
  ErrorRecord* rec = nullptr;
};

// Device addresses of the error word and record; `dev` must be the current device.
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

// Takes the pending error (if any) out of the record; returns false when there is none.
bool take_error(std::string& message) {
  ErrorRecord* r = g_host_record.load();
  if (r == nullptr || __atomic_load_n(&r->code, __ATOMIC_ACQUIRE) == 0) return false;
  const volatile ErrorRecord* v = r;
  const int32_t op = v->op, device = v->device;
  const int64_t pos = v->pos, len = v->len, rows = v->rows, value = v->value, prev = v->prev, limit = v->limit;
  __atomic_store_n(&r->code, 0, __ATOMIC_RELEASE);
  std::ostringstream os;
  os << indptr_error_message(op, pos, len, rows, value, prev, limit) << " (found on cuda:" << device
     << " by the GPU in an earlier call of " << op_names(op).name
     << ", whose output is unspecified; CUDA ops check indptr asynchronously and report at the next "
        "torch_segops CUDA call or at torch_segops.check_errors(); set TORCH_SEGOPS_CUDA_SYNC_CHECKS=1 to "
        "report in the faulty call)";
  message = os.str();
  return true;
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

std::atomic<uint32_t> g_call_counter{0};

// ---- one op call: device, stream, workspaces, launches -----------------------------------------------

inline bool aligned16(const void* p) { return aligned_to(p, 16); }

class CudaCall {
 public:
  CudaCall(const Tensor& like, const char* op, OpId id)
      : op_(op), id_(id), device_(like.get_device_index()), guard_(device_), like_(like) {
    raise_pending_error();
    void* s = nullptr;
    // (STABLE_TORCH_ERROR_CODE_CHECK only exists from torch 2.13's headers)
    if (aoti_torch_get_current_cuda_stream(device_, &s) != 0) fail(op_, "cannot get the current CUDA stream of cuda:", device_);
    stream_ = static_cast<cudaStream_t>(s);
    ptrs_ = device_error_ptrs(device_, op_);
    tag_ = g_call_counter.fetch_add(1) & ((1u << kTagBits) - 1);
  }

  ErrorContext errors(int64_t limit) const { return ErrorContext{{ptrs_.word, ptrs_.rec, tag_, id_, device_, limit}}; }

  // Device memory from torch's caching allocator, alive until this call returns (stream-ordered).
  void* workspace(size_t bytes) {
    if (bytes == 0) return nullptr;
    keep_.push_back(new_tensor(like_, {static_cast<int64_t>(bytes)}, ScalarType::Byte, op_, "a workspace"));
    return keep_.back().mutable_data_ptr();
  }

  template <class K> void launch(const K& k, int64_t n) {
    if (n <= 0) return;
    const int64_t blocks = ceil_div(n, kThreads);
    SEGOPS_CHECK(blocks <= 0x7fffffff, op_, "input too large for one CUDA launch (", n, " threads)");
    run_kernel<K><<<static_cast<unsigned>(blocks), kThreads, 0, stream_>>>(k, n);
    check_cuda(cudaGetLastError(), op_, "a kernel launch");
  }

  template <class K> void launch_blocks(const K& k, int64_t blocks) {
    if (blocks <= 0) return;
    SEGOPS_CHECK(blocks <= 0x7fffffff, op_, "input too large for one CUDA launch (", blocks, " blocks)");
    run_block_kernel<K><<<static_cast<unsigned>(blocks), K::kBlock, 0, stream_>>>(k);
    check_cuda(cudaGetLastError(), op_, "a kernel launch");
  }

  // gather_csr with size -1: validate indptr and read max(indptr[..., -1]) (one device-to-host copy,
  // a host synchronisation); an invalid indptr raises here, with the CPU's message.
  int64_t validate_and_max(const Geometry& g, const Tensor& indptr) {
    Tensor ws = torch::stable::new_empty(indptr, {2}, ScalarType::Long);
    torch::stable::fill_(ws, -1.0);  // both words start at ~0
    u64* w = static_cast<u64*>(ws.mutable_data_ptr());
    launch_validate(*this, g, errors(-1).with_word(w), w + 1, Tuning());
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
      throw std::runtime_error(indptr_error_message(id_, pos, len, g.indptr_rows, value, prev, -1));
    }
    return static_cast<int64_t>(~hv[1]);
  }

  // TORCH_SEGOPS_CUDA_SYNC_CHECKS=1: wait for this call's kernels and report its indptr error now.
  void finish() {
    if (!sync_checks()) return;
    check_cuda(cudaStreamSynchronize(stream_), op_, "cudaStreamSynchronize (TORCH_SEGOPS_CUDA_SYNC_CHECKS)");
    raise_pending_error();
  }

 private:
  const char* op_;
  OpId id_;
  int device_;
  torch::stable::accelerator::DeviceGuard guard_;
  Tensor like_;
  cudaStream_t stream_ = nullptr;
  DeviceErrorPtrs ptrs_;
  uint32_t tag_ = 0;
  std::vector<Tensor> keep_;
};

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
  Publish pub;  // gather: how the expansion learns of an invalid indptr found by the validation before it

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
    count_cuda_plan(run_reduce<Op>(call, g, load, out, arg, call.errors(limit), in_aligned, tuning()));
  }

  Tensor output(const Tensor& like, const std::vector<int64_t>& sizes, ScalarType dtype, const Tensor* given,
                const char* name) const {
    return output_for(like, sizes, dtype, given, op, name);
  }

  // Nothing to do before the kernels: each checks the offsets it reads (call.errors), asynchronously.
  void check_indptr(const CsrArgs&, int64_t, const char*) const {}

  // With size -1 the offsets are validated and max(indptr[..., -1]) read back now (a host sync); else
  // the validation runs before the expansion, which it tells of an invalid indptr (pub).
  int64_t gather_rows(const CsrArgs& a, int64_t size, const char*) {
    if (size < 0) return call.validate_and_max(g, a.indptr);
    const ErrorContext ec = call.errors(size);
    launch_validate(call, g, ec, nullptr, Tuning());
    pub = ec.publish(g);
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
      run_expand<SrcLoad<T>::kVec>(call, g, R, GatherFn<T>{x}, o, pub, aligned16(x));
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

  void finish() { call.finish(); }

 private:
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
