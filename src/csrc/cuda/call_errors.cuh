// The error protocol's sequence inside one CSR op call (docs/cuda.md, "Invalid indptr on the GPU"), shared by the
// GPU's host glue (CudaBackend, segment_cuda.cu, with Exec = CudaCall) and the host emulation (HostExec), which so
// runs the sequence the library runs. The call hands its slot of the error word to a kernel only through
// errors(), which first arms the PublishOnAbort with that slot's publish; end() disarms it once the last launch
// (which publishes) has been made. A call that leaves between the two (an exception: a failed launch or
// workspace, gather's out= check after its validation) publishes from the guard's destructor.
//
// Exec: drivers.cuh's, plus ErrorSlot slot(int64_t limit) (this call's slot of the error word).
#pragma once

#include <cstdint>

#include "cuda/drivers.cuh"
#include "cuda/indptr_errors.cuh"

namespace torch_segops {
namespace cuda {

template <class Exec> class CallErrors {
 public:
  CallErrors(Exec& ex, const Geometry& g) : ex_(ex), g_(g), guard_(ex) {}

  // This call's slot for a kernel that validates indptr (limit: the bound of its last offset).
  ErrorContext errors(int64_t limit) {
    const ErrorContext ec{ex_.slot(limit)};
    guard_.arm(ec.publish(g_));
    return ec;
  }

  // A reduction: its first launch validates, its last publishes. Returns the plan that ran (run_reduce).
  template <class Op, class Load, class OutT>
  int reduce(const Load& load, OutT* out, int64_t* arg, int64_t limit, bool in_aligned, const Tuning& t) {
    return run_reduce<Op>(ex_, g_, load, out, arg, errors(limit), in_aligned, t);
  }

  // gather with a known size, before its output exists: the validation, whose errors the expansion
  // (expand(), after the output) publishes.
  void validate_for_expand(int64_t limit) {
    const ErrorContext ec = errors(limit);
    launch_validate(ex_, g_, ec, nullptr, Tuning());
    pub_ = ec.publish(g_);
  }

  // gather's expansion of R rows: publishes what validate_for_expand found (nothing for a gather whose
  // indptr was checked by the host already).
  template <int kVec, class Fn> void expand(int64_t R, const Fn& fn, typename Fn::OutT* out, bool in_aligned,
                                            const Tuning& t = Tuning()) {
    run_expand<kVec>(ex_, g_, R, fn, out, pub_, in_aligned, t);
  }

  // The call's last launch is made: nothing is left to publish on its way out.
  void end() { guard_.disarm(); }

 private:
  Exec& ex_;
  const Geometry& g_;
  PublishOnAbort<Exec, Publish> guard_;
  Publish pub_;
};

}  // namespace cuda
}  // namespace torch_segops
