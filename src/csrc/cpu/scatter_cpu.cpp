// CPU entry points of the scatter ops (schemas in ops.cpp, one pair per reduction of reduction_table.h):
// argument checks (scatter_args.h), the output size, the outputs, and the messages for a bad index or plan.
// The kernels are cpu/scatter_kernels.cpp, for the instruction set of cpu/kernels.h.
#include <cstdint>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include "cpu/fresh_output.h"
#include "cpu/index_passes.h"
#include "cpu/kernels.h"
#include "cpu/scatter_kernels.h"
#include "csr_args.h"
#include "index_args.h"
#include "platform.h"
#include "reduction_table.h"
#include "scatter_args.h"
#include "tensor_ptr.h"
#include "torch_errors.h"

namespace torch_segops {
namespace {

// Outputs this large are first weighed against the memory the OS says is left: writing them would
// otherwise get the process killed (memory is only taken when written) instead of an error.
constexpr double kWeighedBytes = double(int64_t{1} << 30);

void check_memory(const ScatterArgs& a, int64_t elem_bytes, bool with_arg) {
  const double elems = double(a.B) * double(a.S) * double(a.F);
  const double out = elems * double(elem_bytes), arg = with_arg ? elems * 8.0 : 0.0;
  const double scratch = double(a.N) * 16.0;  // the partition of an unsorted index, at most
  if (out + arg + scratch < kWeighedBytes) return;
  const int64_t available = platform::available_memory_bytes();
  if (available < 0 || out + arg + scratch <= double(available)) return;
  std::ostringstream os;
  os << "out of memory: dim_size = " << a.S << " needs " << byte_count(out) << " bytes for the output"
     << (with_arg ? " and " + byte_count(arg) + " for the arg" : std::string()) << ", more than the "
     << byte_count(double(available)) << " bytes of memory available";
  scatter_fail(os.str());
}

// Raises the first problem of the index, as the COO functions word it, if it has one.
void check_index(const ScatterArgs& a, bool sorted) {
  dispatch_index(a.index.scalar_type(), [&](auto tag) {
    using I = typename decltype(tag)::type;
    const std::string problem = cpu::first_problem(cptr<I>(a.index), a.rows, a.N, a.S, sorted);
    if (!problem.empty()) throw std::runtime_error(problem);
  });
}

// The message for what a kernel found wrong with the index.
[[noreturn]] void raise_index_problem(const ScatterArgs& a, bool sorted) {
  check_index(a, sorted);
  scatter_fail("index could not be read as it should (no problem found on a second look)");
}

// 0 <= indptr[0] <= ... <= indptr[S] <= N in every row of the plan's offsets (serial: the plan path's
// other work is per row of src).
void check_plan_offsets(const ScatterArgs& a) {
  const int64_t len = a.S + 1;
  const int64_t* p = cptr<int64_t>(a.indptr);
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t* row = p + r * len;
    bool ok = row[0] >= 0 && row[len - 1] <= a.N;
    for (int64_t k = 1; k < len; ++k) ok &= row[k] >= row[k - 1];
    if (!ok) {
      std::ostringstream os;
      os << "plan.indptr must hold non-decreasing offsets in [0, src.size(dim) = " << a.N << "] (row " << r
         << "): the plan is not a scatter_plan of an index of this src";
      scatter_fail(os.str());
    }
  }
}

template <Reduce R>
struct ScatterOps {
  using Names = Reduction<R>;
  static constexpr bool kArg = Names::kHasArg;
  using Result = std::conditional_t<kArg, std::tuple<Tensor, Tensor>, Tensor>;

  static std::pair<Tensor, std::optional<Tensor>> outputs(const ScatterArgs& a, const Tensor& src, const char* op) {
    dispatch_dtype(src.scalar_type(), Names::kIntegers, op, "src", [](auto) {});
    const int64_t bytes = dtype_bytes(src.scalar_type());
    check_output_size(a, a.S, bytes, kArg);
    check_memory(a, bytes, kArg);
    const std::vector<int64_t> sizes = sizes_with_dim(src, a.dim, a.S);
    Tensor out = cpu::fresh_output(new_tensor(src, sizes, src.scalar_type(), op, "out"));
    std::optional<Tensor> arg;
    if (kArg) arg = cpu::fresh_output(new_tensor(src, sizes, ScalarType::Long, op, "arg"));
    return {out, arg};
  }

  static Result finish(const Tensor& out, const std::optional<Tensor>& arg) {
    if constexpr (kArg) {
      return {out, *arg};
    } else {
      return out;
    }
  }

  static Result by_index(Tensor src, Tensor index, int64_t size, bool sorted) {
    const char* op = Names::scatter_name;
    ScatterArgs a = make_scatter_args(src, index, size, op);
    if (a.S == -1) {
      dispatch_index(a.index.scalar_type(), [&](auto tag) {
        using I = typename decltype(tag)::type;
        a.S = cpu::size_from_max(cptr<I>(a.index), a.rows * a.N);
      });
    }
    // A bad index is reported before an output that cannot be had: where the output is weighed (or its
    // allocation fails), the index is checked first (a pass over it costs less than the output's pages).
    const double out_bytes = double(a.B) * double(a.S) * double(a.F) * double(dtype_bytes(src.scalar_type()));
    if (out_bytes >= kWeighedBytes) check_index(a, sorted);
    std::optional<std::pair<Tensor, std::optional<Tensor>>> outs;
    try {
      outs.emplace(outputs(a, src, op));
    } catch (...) {
      if (out_bytes < kWeighedBytes) check_index(a, sorted);
      throw;
    }
    auto& [out, arg] = *outs;
    const int status = cpu::kernels().scatter(a, R, sorted, out, arg ? &*arg : nullptr);
    if (status != cpu::kScatterOk) raise_index_problem(a, sorted);
    return finish(out, arg);
  }

  static Result by_plan(Tensor src, Tensor perm, Tensor indptr) {
    const char* op = Names::scatter_plan_name;
    const ScatterArgs a = make_plan_args(src, perm, indptr, op);
    check_plan_offsets(a);
    auto [out, arg] = outputs(a, src, op);
    if (cpu::kernels().scatter_plan(a, R, out, arg ? &*arg : nullptr) != cpu::kScatterOk) {
      scatter_fail("plan.perm must hold positions in [0, src.size(dim) = " + std::to_string(a.N) +
                   "): the plan is not a scatter_plan of an index of this src");
    }
    return finish(out, arg);
  }
};

}  // namespace
}  // namespace torch_segops

STABLE_TORCH_LIBRARY_IMPL(torch_segops, CPU, m) {
  using namespace torch_segops;
  for_each_reduce([&](auto r) {
    constexpr Reduce R = decltype(r)::value;
    using Names = Reduction<R>;
    m.impl(Names::scatter_name, TORCH_BOX((&guarded<&ScatterOps<R>::by_index, Names::scatter_name>::call)));
    m.impl(Names::scatter_plan_name, TORCH_BOX((&guarded<&ScatterOps<R>::by_plan, Names::scatter_plan_name>::call)));
  });
}
