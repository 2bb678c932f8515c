// CUDA kernel of index_to_indptr (schema in ops.cpp; the CPU kernel is cpu/coo_cpu.cpp): the host glue of the
// kernels and driver of cuda/coo_kernels.cuh (the offsets of every row counted in parallel, the CPU's contract
// for an unsorted index too). The call raises a pending error first and reports an invalid index, with the
// CPU's message naming `index` and the position, through the asynchronous error protocol like the CSR ops
// (cuda/cuda_call.cuh); with size -1, which reads max(index) back anyway (a host synchronisation), it raises
// in the call, as the CPU does.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/csrc/stable/device.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "csr_args.h"
#include "cuda/coo_kernels.cuh"
#include "cuda/cuda_call.cuh"
#include "index_args.h"
#include "op_names.h"
#include "tensor_ptr.h"
#include "torch_errors.h"

namespace torch_segops {
namespace {

constexpr char kIndexToIndptr[] = "index_to_indptr";

// Entries [first, first + count) of the flattened index, on the host.
template <typename I> std::vector<int64_t> index_values(const Tensor& index, int64_t total, int64_t first,
                                                        int64_t count) {
  Tensor flat = torch::stable::reshape(index, {total});
  const Tensor host = torch::stable::to(torch::stable::narrow(flat, 0, first, count),
                                        torch::stable::Device(torch::headeronly::DeviceType::CPU));
  const I* p = static_cast<const I*>(host.const_data_ptr());
  return std::vector<int64_t>(p, p + count);
}

// size -1: max(index) + 1, read back with the index's first problem (raised here, with the CPU's message).
template <typename I> int64_t checked_size(cuda::CudaCall& call, const IndexView& v, const cuda::IndexRows<I>& ix) {
  const int64_t total = ix.total();
  if (total == 0) return 0;
  Tensor words = torch::stable::new_empty(v.index, {2}, ScalarType::Long);
  torch::stable::fill_(words, -1.0);  // both words start at ~0
  cuda::launch_index_max(call, ix, static_cast<cuda::u64*>(words.mutable_data_ptr()));
  const Tensor host = torch::stable::to(words, torch::stable::Device(torch::headeronly::DeviceType::CPU));
  const cuda::u64* hv = static_cast<const cuda::u64*>(host.const_data_ptr());
  if (hv[0] != cuda::kNoError) {
    const cuda::u64 key = hv[0] >> cuda::kTagBits;
    const int32_t what = static_cast<int32_t>(key / static_cast<cuda::u64>(total));
    const int64_t pos = static_cast<int64_t>(key % static_cast<cuda::u64>(total));
    const int64_t first = pos % ix.n != 0 ? pos - 1 : pos;
    const std::vector<int64_t> x = index_values<I>(v.index, total, first, pos - first + 1);
    throw std::runtime_error(kPrefix + index_error_message(what, pos, ix.n, x.back(), pos != first ? x[0] : 0, -1));
  }
  return size_after_max(cuda::index_max_of_word(hv[1]));
}

Tensor index_to_indptr_cuda(Tensor index, int64_t size, bool check_sorted) {
  IndexView v = view_of(index, size);
  cuda::CudaCall call(v.index, kIndexToIndptr, kOpIndexToIndptr);
  const int64_t total = v.rows * v.n;
  // the error word holds positions of 48 bits, here (problem kind) * total + entry
  SEGOPS_CHECK(total < (int64_t(1) << 45), kIndexToIndptr, "index too large (", total, " entries)");
  Tensor indptr;
  dispatch_index(v.index.scalar_type(), [&](auto tag) {
    using I = typename decltype(tag)::type;
    cuda::IndexRows<I> ix;
    ix.x = cptr<I>(v.index);
    ix.rows = v.rows;
    ix.n = v.n;
    ix.size = v.size;
    ix.check_sorted = check_sorted;
    if (v.size == -1) v.size = ix.size = checked_size(call, v, ix);
    indptr = new_offsets(v, [] { return std::string(); });
    cuda::run_index_to_indptr(call, ix, call.slot(v.size), mptr<int64_t>(indptr));
  });
  call.finish();
  return indptr;
}

}  // namespace
}  // namespace torch_segops

STABLE_TORCH_LIBRARY_IMPL(torch_segops, CUDA, m) {
  using namespace torch_segops;
  m.impl("index_to_indptr", TORCH_BOX((&guarded<&index_to_indptr_cuda, kIndexToIndptr>::call)));
}
