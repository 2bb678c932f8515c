// CUDA kernel of index_to_indptr (schema in ops.cpp; the CPU kernel is cpu/coo_cpu.cpp): one pass over
// the index writes the offsets of its sorted rows and flags a bad row (a decrease when check_sorted, a
// value outside [0, size)); a second, per row, gives a flagged row the first offset -1, which the CSR
// op it feeds reports through its asynchronous indptr check. No host synchronisation, except for
// size -1 (max(index) + 1 is read back). The offsets start zeroed: a bad row's offsets stay in [0, n].
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "csr_args.h"
#include "index_args.h"
#include "torch_errors.h"

namespace torch_segops {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // grid-stride beyond this

__device__ __forceinline__ int64_t clamp_to(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// Offsets of every row of the [rows, n] index x (see the file comment); bad_rows[row] = 1 for a bad row.
template <typename I>
__global__ void __launch_bounds__(kThreads) offsets_kernel(const I* __restrict__ x, int64_t rows, int64_t n,
                                                             int64_t size, bool check_sorted, int64_t* __restrict__ off,
                                                             int32_t* __restrict__ bad_rows) {
  const int64_t total = rows * n, len = size + 1;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = i / n, k = i - row * n;
    const int64_t v = x[i], prev = k > 0 ? static_cast<int64_t>(x[i - 1]) : -1;
    if (v < 0 || v >= size || (check_sorted && v < prev)) bad_rows[row] = 1;
    int64_t* o = off + row * len;
    const int64_t hi = clamp_to(v, -1, size);
    for (int64_t t = clamp_to(prev, -1, size) + 1; t <= hi; ++t) o[t] = k;
    if (k == n - 1) {
      for (int64_t t = hi + 1; t <= size; ++t) o[t] = n;
    }
  }
}

__global__ void __launch_bounds__(kThreads) mark_bad_rows(const int32_t* __restrict__ bad_rows, int64_t rows,
                                                          int64_t len, int64_t* __restrict__ off) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * kThreads) {
    if (bad_rows[r] != 0) off[r * len] = -1;
  }
}

template <typename I>
__global__ void __launch_bounds__(kThreads) max_kernel(const I* __restrict__ x, int64_t total,
                                                         long long* __restrict__ best) {
  long long m = -1;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    m = m > static_cast<long long>(x[i]) ? m : static_cast<long long>(x[i]);
  }
  atomicMax(best, m);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(kPrefix) + "index_to_indptr: " + what + " failed: " + cudaGetErrorString(e));
  }
}

unsigned grid_for(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

Tensor index_to_indptr_cuda(Tensor index, int64_t size, bool check_sorted) {
  IndexView v = view_of(index, size);
  const int device = v.index.get_device_index();
  torch::stable::accelerator::DeviceGuard guard(device);
  void* s = nullptr;
  if (aoti_torch_get_current_cuda_stream(device, &s) != 0) check(cudaErrorUnknown, "getting the current stream");
  cudaStream_t stream = static_cast<cudaStream_t>(s);
  const int64_t total = v.rows * v.n;
  Tensor indptr;
  dispatch_index(v.index.scalar_type(), [&](auto tag) {
    using I = typename decltype(tag)::type;
    const I* x = static_cast<const I*>(v.index.const_data_ptr());
    if (v.size == -1) {  // max(index) + 1: read back (a host synchronisation)
      Tensor best = torch::stable::new_empty(v.index, {1}, ScalarType::Long);
      torch::stable::fill_(best, -1.0);
      if (total > 0) {
        long long* best_ptr = static_cast<long long*>(best.mutable_data_ptr());
        max_kernel<I><<<grid_for(total), kThreads, 0, stream>>>(x, total, best_ptr);
        check(cudaGetLastError(), "the max kernel");
      }
      long long host = -1;
      check(cudaMemcpyAsync(&host, best.const_data_ptr(), sizeof(host), cudaMemcpyDeviceToHost, stream),
            "reading max(index)");
      check(cudaStreamSynchronize(stream), "reading max(index)");
      v.size = (host < 0 ? -1 : host) + 1;
    }
    indptr = new_offsets(v, [] { return std::string(); });
    torch::stable::zero_(indptr);
    if (total == 0) return;
    Tensor bad = torch::stable::new_zeros(v.index, {v.rows}, ScalarType::Int);
    int64_t* off = static_cast<int64_t*>(indptr.mutable_data_ptr());
    int32_t* bad_rows = static_cast<int32_t*>(bad.mutable_data_ptr());
    offsets_kernel<I><<<grid_for(total), kThreads, 0, stream>>>(x, v.rows, v.n, v.size, check_sorted, off, bad_rows);
    check(cudaGetLastError(), "the offsets kernel");
    mark_bad_rows<<<grid_for(v.rows), kThreads, 0, stream>>>(bad_rows, v.rows, v.size + 1, off);
    check(cudaGetLastError(), "the bad-row kernel");
  });
  return indptr;
}

constexpr char kIndexToIndptr[] = "index_to_indptr";

}  // namespace
}  // namespace torch_segops

STABLE_TORCH_LIBRARY_IMPL(torch_segops, CUDA, m) {
  using namespace torch_segops;
  m.impl("index_to_indptr", TORCH_BOX((&guarded<&index_to_indptr_cuda, kIndexToIndptr>::call)));
}
