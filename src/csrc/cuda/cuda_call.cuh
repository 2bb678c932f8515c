// What every CUDA op call of torch_segops does on the host (segment_cuda.cu, coo_cuda.cu): the generic
// __global__ launchers of the kernel functors, the call's device, stream, workspaces and launches, and its share
// of the asynchronous error protocol (docs/cuda.md, "Invalid indptr on the GPU"): a pending error is raised
// before anything else, the call gets a tag in the per-device error word, and TORCH_SEGOPS_CUDA_SYNC_CHECKS
// makes it wait and report at its end. CudaCall is the Exec of the host drivers (drivers.cuh, coo_kernels.cuh);
// the state behind it (the error word and record, the tag counter) is defined once, in segment_cuda.cu.
//
// Stream: aoti_torch_get_current_cuda_stream(device, &stream) from the AOTI C shim (libtorch_cuda),
// declared under USE_CUDA in torch/csrc/inductor/aoti_torch/c/shim.h and available long before torch
// 2.10. torch::stable::accelerator::Stream::nativeHandle() would be the stable-API spelling, but it
// only exists from TORCH_FEATURE_VERSION 2.13, above our 2.10 target.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/tensor.h>

#include "csr_args.h"
#include "cuda/indptr_errors.cuh"
#include "index_math.h"
#include "op_names.h"
#include "torch_errors.h"

namespace torch_segops {
namespace cuda {

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

// ---- defined in segment_cuda.cu ------------------------------------------------------------------------

// Throws the CUDA error e of `what` (a "no kernel image" error with the architectures and the fix).
[[noreturn]] void throw_cuda(cudaError_t e, const char* op, const char* what);
inline void check_cuda(cudaError_t e, const char* op, const char* what) {
  if (e != cudaSuccess) throw_cuda(e, op, what);
}

struct DeviceErrorPtrs {
  u64* word = nullptr;
  ErrorRecord* rec = nullptr;
};
// Device addresses of the error word and record; `dev` must be the current device.
DeviceErrorPtrs device_error_ptrs(int dev, const char* op);
// Raises the error an earlier call's kernels found, if one is pending.
void raise_pending_error();
// TORCH_SEGOPS_CUDA_SYNC_CHECKS is set: every call waits for its kernels and reports its error itself.
bool sync_checks();
// The tag of a new op call (call_tag of a process-wide counter).
uint32_t next_call_tag();

// ---- one op call: device, stream, workspaces, launches -------------------------------------------------

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
    tag_ = next_call_tag();
  }

  const char* op() const { return op_; }
  OpId id() const { return id_; }
  cudaStream_t stream() const { return stream_; }

  // This call's slot of the error word (limit: the bound of indptr's last offset, -1: none).
  ErrorSlot slot(int64_t limit) const { return ErrorSlot{ptrs_.word, ptrs_.rec, tag_, id_, device_, limit}; }

  // Device memory from torch's caching allocator, alive until this call returns (stream-ordered).
  void* workspace(size_t bytes) {
    if (bytes == 0) return nullptr;
    keep_.push_back(new_tensor(like_, {static_cast<int64_t>(bytes)}, ScalarType::Byte, op_, "a workspace"));
    return keep_.back().mutable_data_ptr();
  }

  void zero(void* p, size_t bytes) {
    if (bytes > 0) check_cuda(cudaMemsetAsync(p, 0, bytes, stream_), op_, "cudaMemsetAsync");
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

  // TORCH_SEGOPS_CUDA_SYNC_CHECKS=1: wait for this call's kernels and report its error now.
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

}  // namespace cuda
}  // namespace torch_segops
