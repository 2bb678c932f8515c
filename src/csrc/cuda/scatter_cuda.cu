// CUDA kernels of the scatter ops (schemas in ops.cpp, one pair per reduction of reduction_table.h; the CPU's:
// cpu/scatter_cpu.cpp): argument checks (scatter_args.h), the checks of the index or plan read back in the call
// (a bad one raises here, with the CPU's message: one host synchronisation per call, which the output size of
// dim_size None needs anyway), the stable order of an unsorted index, and the drivers of cuda/scatter_kernels.cuh
// (the CSR reduction reading src's rows through the order, no permuted copy of src).
//
// The order is torch's stable argsort (aten::argsort.stable through the stable ABI's dispatcher call, on the
// current stream): a stable order is unique, so it is the order scatter used on CUDA before these ops
// (torch.sort(stable=True)), and torch's segmented radix sort is the fastest one at hand.
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/csrc/stable/c/shim.h>
#include <torch/csrc/stable/device.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/stableivalue_conversions.h>
#include <torch/csrc/stable/tensor.h>

#include "csr_args.h"
#include "cuda/cuda_call.cuh"
#include "cuda/scatter_kernels.cuh"
#include "cuda_plans.h"
#include "index_args.h"
#include "op_names.h"
#include "reduction_table.h"
#include "scatter_args.h"
#include "tensor_ptr.h"
#include "torch_errors.h"

namespace torch_segops {
namespace cuda {
namespace {

const torch::stable::Device kCpu(torch::headeronly::DeviceType::CPU);

// (A scatter op takes no slot of the error word: every check is read back in the call.)
constexpr OpId kNoSlot = kOpCount;

// Batch b (row-major over src's leading dims) -> the element offset of its row of a [*lead, len] tensor whose
// leading dims are src's or 1 (row_of_batch[b] * len): one dim per leading dim of src (size-1 dims dropped),
// stride 0 where the tensor broadcasts.
BatchMap rows_map(const ScatterArgs& a, const Tensor& rows, int64_t len) {
  BatchMap m;
  std::vector<int64_t> strides(static_cast<size_t>(a.dim));
  int64_t stride = len;
  for (int64_t d = a.dim - 1; d >= 0; --d) {
    strides[d] = rows.size(d) == 1 ? 0 : stride;
    stride *= rows.size(d);
  }
  for (int64_t d = 0; d < a.dim; ++d) {
    if (a.src.size(d) == 1) continue;
    if (m.ndims == BatchMap::kMaxDims) {
      scatter_fail("src has more than " + std::to_string(BatchMap::kMaxDims) +
                   " leading dims of size > 1, which the CUDA kernels do not support; reshape src first");
    }
    m.size[m.ndims] = a.src.size(d);
    m.stride[m.ndims] = strides[d];
    ++m.ndims;
  }
  for (int64_t b = 0; b < a.B; b = (b == 63 && a.B > 128) ? a.B - 64 : b + 1) {
    if (m.offset(b) != a.row_of_batch[b] * len) scatter_fail("internal error: the CUDA batch map disagrees");
  }
  return m;
}

// torch's stable argsort of the [*lead, n] index along its last dim.
Tensor stable_order(const Tensor& index) {
  std::array<StableIValue, 4> stack{torch::stable::detail::from(index), torch::stable::detail::from(true),
                                    torch::stable::detail::from(int64_t{-1}), torch::stable::detail::from(false)};
  TORCH_ERROR_CODE_CHECK(torch_call_dispatcher("aten::argsort", "stable", stack.data(), TORCH_ABI_VERSION));
  return torch::stable::detail::to<Tensor>(stack[0]);
}

// Two status words on the device, both ~0 (kNoError), and their values on the host after the kernels that
// write them (a host synchronisation).
Tensor status_words(const Tensor& like) {
  Tensor w = torch::stable::new_empty(like, {2}, ScalarType::Long);
  torch::stable::fill_(w, -1.0);
  return w;
}
std::array<u64, 2> read_words(const Tensor& w) {
  const Tensor host = torch::stable::to(w, kCpu);
  const u64* p = static_cast<const u64*>(host.const_data_ptr());
  return {p[0], p[1]};
}

// Entries [first, first + count) of a flattened tensor, on the host.
template <typename X> std::vector<int64_t> host_values(const Tensor& t, int64_t first, int64_t count) {
  Tensor flat = torch::stable::reshape(t, {t.numel()});
  const Tensor host = torch::stable::to(torch::stable::narrow(flat, 0, first, count), kCpu);
  const X* p = static_cast<const X*>(host.const_data_ptr());
  return std::vector<int64_t>(p, p + count);
}

Tuning tuning(const char* op) {
  std::string error;
  Tuning t;
  t.plans = allowed_cuda_plans(&error);
  SEGOPS_CHECK(t.plans != 0, op, error);
  return t;
}

template <Reduce R>
struct ScatterOps {
  using Names = Reduction<R>;
  static constexpr bool kArg = Names::kHasArg;
  using Result = std::conditional_t<kArg, std::tuple<Tensor, Tensor>, Tensor>;

  static Result finish(const Tensor& out, const std::optional<Tensor>& arg) {
    if constexpr (kArg) {
      return {out, *arg};
    } else {
      return out;
    }
  }

  static std::pair<Tensor, std::optional<Tensor>> outputs(const ScatterArgs& a, const char* op) {
    dispatch_dtype(a.src.scalar_type(), Names::kIntegers, op, "src", [](auto) {});
    check_output_size(a, a.S, dtype_bytes(a.src.scalar_type()), kArg);
    const std::vector<int64_t> sizes = sizes_with_dim(a.src, a.dim, a.S);
    Tensor out = new_tensor(a.src, sizes, a.src.scalar_type(), op, "out");
    std::optional<Tensor> arg;
    if (kArg) arg = new_tensor(a.src, sizes, ScalarType::Long, op, "arg");
    return {out, arg};
  }

  // The reduction of src (through load's order) along the offsets of g, into out/arg.
  template <class Run>
  static void reduce(const ScatterArgs& a, const char* op, Tensor& out, std::optional<Tensor>& arg, const Run& run) {
    dispatch_dtype(a.src.scalar_type(), Names::kIntegers, op, "src", [&](auto tag) {
      using T = typename decltype(tag)::type;
      visit_reducer<acc_t<T>>(R, [&](auto op_tag) {
        const T* x = cptr<T>(a.src);
        count_cuda_plan(run(op_tag, x, mptr<T>(out), arg ? mptr<int64_t>(*arg) : nullptr, aligned_to(x, 16)));
      });
    });
  }

  static Result by_index(Tensor src, Tensor index, int64_t size, bool sorted) {
    const char* op = Names::scatter_name;
    ScatterArgs a = make_scatter_args(src, index, size, op);
    dispatch_dtype(a.src.scalar_type(), Names::kIntegers, op, "src", [](auto) {});  // before the index, as the CPU
    CudaCall call(a.src, op, kNoSlot);
    const int64_t total = a.rows * a.N;
    // the error word holds positions of 48 bits, here (problem kind) * total + entry
    SEGOPS_CHECK(total < (int64_t(1) << 45), op, "index too large (", total, " entries)");
    const Tuning t = tuning(op);
    std::optional<std::pair<Tensor, std::optional<Tensor>>> outs;
    dispatch_index(a.index.scalar_type(), [&](auto tag) {
      using I = typename decltype(tag)::type;
      IndexRows<I> ix;
      ix.x = cptr<I>(a.index);
      ix.rows = a.rows;
      ix.n = a.N;
      ix.size = a.S;
      ix.check_sorted = sorted;
      const Tensor words = status_words(a.index);
      launch_index_check(call, ix, static_cast<u64*>(words.mutable_data_ptr()));
      const std::array<u64, 2> hv = read_words(words);
      if (a.S == -1) a.S = ix.size = size_after_max(index_max_of_word(hv[1]));
      const IndexProblemAt bad = decode_index_problem(hv[0], total);
      if (bad.what >= 0) {
        const int64_t first = bad.pos % a.N != 0 ? bad.pos - 1 : bad.pos;
        const std::vector<int64_t> v = host_values<I>(a.index, first, bad.pos - first + 1);
        throw std::runtime_error(kPrefix + index_error_message(bad.what, bad.pos, a.N, v.back(),
                                                               bad.pos != first ? v[0] : 0, a.S));
      }
      outs.emplace(outputs(a, op));
      auto& [out, arg] = *outs;
      if (a.B * a.S * a.F == 0) return;
      std::optional<Tensor> order;
      if (!sorted && a.N > 1) order = stable_order(a.index);
      int64_t* off = static_cast<int64_t*>(call.workspace(static_cast<size_t>(a.rows * (a.S + 1)) * sizeof(int64_t)));
      const Geometry g{a.B, a.N, a.S, a.F, off, a.rows, rows_map(a, a.index, a.S + 1)};
      const BatchMap order_map = rows_map(a, a.index, a.N);
      const int64_t* ord = order ? cptr<int64_t>(*order) : nullptr;
      reduce(a, op, out, arg, [&](auto op_tag, auto* x, auto* o, int64_t* ag, bool aligned) {
        using Op = typename decltype(op_tag)::type;
        using T = std::remove_const_t<std::remove_pointer_t<decltype(x)>>;
        return run_scatter<Op>(call, g, off, ix, perm_load(call, x, ord, order_map, a.B, a.N, a.F), o, ag, aligned,
                               t);
      });
    });
    call.finish();
    return finish(outs->first, outs->second);
  }

  static Result by_plan(Tensor src, Tensor perm, Tensor indptr) {
    const char* op = Names::scatter_plan_name;
    const ScatterArgs a = make_plan_args(src, perm, indptr, op);
    CudaCall call(a.src, op, kNoSlot);
    const Tuning t = tuning(op);
    const Geometry g{a.B, a.N, a.S, a.F, cptr<int64_t>(a.indptr), a.rows, rows_map(a, a.indptr, a.S + 1)};
    const Tensor words = status_words(a.indptr);
    const int64_t* ord = cptr<int64_t>(a.perm);
    launch_plan_check(call, g, ord, a.rows, static_cast<u64*>(words.mutable_data_ptr()));
    const std::array<u64, 2> hv = read_words(words);
    if (hv[0] != kNoError) {
      const int64_t pos = static_cast<int64_t>(hv[0] >> kTagBits);
      scatter_fail("plan.indptr must hold non-decreasing offsets in [0, src.size(dim) = " + std::to_string(a.N) +
                   "] (row " + std::to_string(pos / (a.S + 1)) +
                   "): the plan is not a scatter_plan of an index of this src");
    }
    if (hv[1] != kNoError) {
      scatter_fail("plan.perm must hold positions in [0, src.size(dim) = " + std::to_string(a.N) +
                   "): the plan is not a scatter_plan of an index of this src");
    }
    auto [out, arg] = outputs(a, op);
    if (a.B * a.S * a.F > 0) {
      const BatchMap order_map = rows_map(a, a.perm, a.N);
      reduce(a, op, out, arg, [&](auto op_tag, auto* x, auto* o, int64_t* ag, bool aligned) {
        using Op = typename decltype(op_tag)::type;
        using T = std::remove_const_t<std::remove_pointer_t<decltype(x)>>;
        return run_plan<Op>(call, g, perm_load(call, x, ord, order_map, a.B, a.N, a.F), o, ag, aligned, t);
      });
    }
    call.finish();
    return finish(out, arg);
  }
};

}  // namespace
}  // namespace cuda
}  // namespace torch_segops

STABLE_TORCH_LIBRARY_IMPL(torch_segops, CUDA, m) {
  using namespace torch_segops;
  for_each_reduce([&](auto r) {
    using Ops = torch_segops::cuda::ScatterOps<decltype(r)::value>;
    m.impl(Ops::Names::scatter_name, TORCH_BOX((&guarded<&Ops::by_index, Ops::Names::scatter_name>::call)));
    m.impl(Ops::Names::scatter_plan_name, TORCH_BOX((&guarded<&Ops::by_plan, Ops::Names::scatter_plan_name>::call)));
  });
}
