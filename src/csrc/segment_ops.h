// The op entry points of every backend, in one place: argument checks, the order of the work, the
// outputs, and the registration for a dispatch key. A backend (cpu/segment_cpu.cpp, cuda/segment_cuda.cu)
// supplies only its kernels, through a type `Backend` built once per op call:
//
//   Backend(const CsrArgs& a, OpId op);        // the call's set-up (CUDA: device, stream, pending errors)
//   Tensor output(like, sizes, dtype, given, name);     // a new output, or `given` (out=) checked
//   void check_indptr(a, limit, limit_what);   // 0 <= indptr[0] <= ... <= indptr[-1] <= limit
//   int64_t gather_rows(a, size, limit_what);  // check_indptr for gather; returns the output rows:
//                                              // size, or max(indptr[..., -1]) when size < 0
//   void reduce(a, r, out, arg_or_null);  void gather(a, R, out);
//   void softmax(a, out);                 void softmax_backward(a, grad, grad_in);
//   void finish();                             // after the kernels (CUDA: the optional synchronous check)
//
// The kernels get checked arguments and contiguous outputs of the right shape and dtype; the CPU checks
// indptr before them, the CUDA kernels check it as they read it and report asynchronously (docs/cuda.md).
#pragma once

#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include "csr_args.h"
#include "op_names.h"
#include "reduction_table.h"
#include "torch_errors.h"

namespace torch_segops {

template <class Backend>
struct SegmentOps {
  // The reduction R of src's segments into `out` and, for min/max, `arg` (the out= variant's tensors
  // given_out / given_arg, or new tensors when null).
  template <Reduce R>
  static std::pair<Tensor, std::optional<Tensor>> reduce_into(const Tensor& src, const Tensor& indptr,
                                                              const Tensor* given_out, const Tensor* given_arg) {
    const char* op = op_names(kOpSegmentCsr).name;
    const CsrArgs a = make_csr_args(src, indptr, op);
    constexpr bool with_arg = Reduction<R>::kHasArg;
    dispatch_dtype(src.scalar_type(), Reduction<R>::kIntegers, op, "src", [](auto) {});
    Backend be(a, kOpSegmentCsr);
    be.check_indptr(a, a.N, op_names(kOpSegmentCsr).limit_what);
    const std::vector<int64_t> sizes = sizes_with_dim(src, a.dim, a.S);
    Tensor out = be.output(src, sizes, src.scalar_type(), given_out, "out");
    std::optional<Tensor> arg;
    if (with_arg) arg = be.output(src, sizes, ScalarType::Long, given_arg, "arg");
    be.reduce(a, R, out, arg ? &*arg : nullptr);
    be.finish();
    return {out, arg};
  }

  // The ops of reduction R (reduction_table.h): segment_<name>, and segment_<name>_out in its two forms.
  template <Reduce R>
  static std::conditional_t<Reduction<R>::kHasArg, std::tuple<Tensor, Tensor>, Tensor> segment(Tensor src,
                                                                                                 Tensor indptr) {
    auto [out, arg] = reduce_into<R>(src, indptr, nullptr, nullptr);
    if constexpr (Reduction<R>::kHasArg) {
      return {out, *arg};
    } else {
      return out;
    }
  }

  template <Reduce R>
  static void segment_out(Tensor src, Tensor indptr, Tensor out) {
    reduce_into<R>(src, indptr, &out, nullptr);
  }

  template <Reduce R>
  static void segment_arg_out(Tensor src, Tensor indptr, Tensor out, Tensor arg) {
    reduce_into<R>(src, indptr, &out, &arg);
  }

  // size: output rows (-1: read from indptr); given_out: the out= variant's tensor (its rows are the size).
  static Tensor gather_into(const Tensor& src, const Tensor& indptr, int64_t size, const Tensor* given_out) {
    const char* op = op_names(kOpGatherCsr).name;
    const CsrArgs a = make_csr_args(src, indptr, op);
    SEGOPS_CHECK(a.N == a.S, op, "src.size(dim) must equal the number of segments indptr.size(-1) - 1 = ", a.S,
                 ", got ", a.N);
    if (given_out != nullptr) {
      SEGOPS_CHECK(given_out->dim() == src.dim(), op, "out must have as many dims as src (", src.dim(), ")");
      size = given_out->size(a.dim);
    }
    SEGOPS_CHECK(size >= -1, op, "size must be >= 0 (or -1 to read it from indptr), got ", size);
    dispatch_dtype(src.scalar_type(), true, op, "src", [](auto) {});
    Backend be(a, kOpGatherCsr);
    const int64_t R = be.gather_rows(a, size, given_out != nullptr ? "out.size(dim)" : "size");
    Tensor out = be.output(src, sizes_with_dim(src, a.dim, R), src.scalar_type(), given_out, "out");
    be.gather(a, R, out);
    be.finish();
    return out;
  }

  static Tensor gather_csr(Tensor src, Tensor indptr, int64_t size) { return gather_into(src, indptr, size, nullptr); }

  static void gather_csr_out(Tensor src, Tensor indptr, Tensor out) { gather_into(src, indptr, -1, &out); }

  static Tensor segment_softmax(Tensor src, Tensor indptr) {
    const char* op = op_names(kOpSoftmax).name;
    const CsrArgs a = make_csr_args(src, indptr, op);
    dispatch_dtype(src.scalar_type(), false, op, "src", [](auto) {});
    Backend be(a, kOpSoftmax);
    be.check_indptr(a, a.N, op_names(kOpSoftmax).limit_what);
    Tensor out = be.output(src, sizes_of(src), src.scalar_type(), nullptr, "out");
    be.softmax(a, out);
    be.finish();
    return out;
  }

  static Tensor segment_softmax_backward(Tensor grad, Tensor out, Tensor indptr) {
    const char* op = op_names(kOpSoftmaxBackward).name;
    SEGOPS_CHECK(grad.sizes().equals(out.sizes()) && grad.scalar_type() == out.scalar_type(), op,
                 "grad and out must have the same shape and dtype");
    SEGOPS_CHECK(grad.is_cuda() == out.is_cuda() && grad.get_device_index() == out.get_device_index(), op,
                 "grad and out must be on the same device");
    const CsrArgs a = make_csr_args(out, indptr, op, "out");
    dispatch_dtype(out.scalar_type(), false, op, "out", [](auto) {});
    Backend be(a, kOpSoftmaxBackward);
    be.check_indptr(a, a.N, op_names(kOpSoftmaxBackward).limit_what);
    const Tensor g = contiguous_of(grad, op, "grad");
    Tensor grad_in = be.output(out, sizes_of(out), out.scalar_type(), nullptr, "grad_src");
    be.softmax_backward(a, g, grad_in);
    be.finish();
    return grad_in;
  }
};

// The op entry points of SegmentOps<Backend> as the kernels of one dispatch key (`m` of
// STABLE_TORCH_LIBRARY_IMPL), each through `guarded` (torch_errors.h).
template <class Backend, class Library>
void register_segment_ops(Library& m) {
  using O = SegmentOps<Backend>;
  for_each_reduce([&](auto r) {
    constexpr Reduce R = decltype(r)::value;
    using Names = Reduction<R>;
    m.impl(Names::name, TORCH_BOX((&guarded<&O::template segment<R>, Names::name>::call)));
    if constexpr (Names::kHasArg) {
      m.impl(Names::out_name, TORCH_BOX((&guarded<&O::template segment_arg_out<R>, Names::out_name>::call)));
    } else {
      m.impl(Names::out_name, TORCH_BOX((&guarded<&O::template segment_out<R>, Names::out_name>::call)));
    }
  });
  m.impl("gather_csr", TORCH_BOX((&guarded<&O::gather_csr, kGatherCsr>::call)));
  m.impl("gather_csr_out", TORCH_BOX((&guarded<&O::gather_csr_out, kGatherCsrOut>::call)));
  m.impl("segment_softmax", TORCH_BOX((&guarded<&O::segment_softmax, kSegmentSoftmax>::call)));
  m.impl("segment_softmax_backward", TORCH_BOX((&guarded<&O::segment_softmax_backward, kSegmentSoftmaxBackward>::call)));
}

}  // namespace torch_segops
