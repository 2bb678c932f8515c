// Errors raised by torch inside an op, reported with torch's own message (host code only).
//
// A torch call made through the stable ABI (torch::stable::new_empty, contiguous, to, ...) that fails
// throws, with the 2.10 target this library is built for, only "torch_call_dispatcher(...) API call
// failed at .../ops.h, line N": torch's own message stays on torch's side of the C boundary. torch
// >= 2.13 keeps it for the calling thread and exports torch_exception_get_what_without_backtrace() to
// read it; a binary that must load in torch 2.10 cannot link against that, so it is looked up at run
// time in the libtorch_cpu this library was loaded with. Where it is absent (torch 2.10 to 2.12, or
// TORCH_SEGOPS_NO_TORCH_MESSAGE=1 for tests) the message says what failed in user terms (which output,
// shape, dtype, bytes, device), never the raw line.
//
// Every op entry point is registered through `guarded<fn, name>::call`, so no error leaves an op with
// the dispatcher line in it; allocations go through `new_tensor`, which names what was allocated.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include "platform.h"

namespace torch_segops {

// torch's message for the last failed shim call in this thread, or "" when the running torch cannot
// give it (older than 2.13) or gave none.
inline std::string torch_reason() {
  using Getter = const char* (*)();
  static const Getter getter = []() -> Getter {
    if (std::getenv("TORCH_SEGOPS_NO_TORCH_MESSAGE")) return nullptr;  // tests: behave as in torch < 2.13
    return reinterpret_cast<Getter>(platform::torch_cpu_symbol("torch_exception_get_what_without_backtrace"));
  }();
  const char* what = getter ? getter() : nullptr;
  return what ? std::string(what) : std::string();
}

// Whether `what` is the stable ABI's bare report of a failed torch call.
inline bool is_dispatcher_failure(const std::string& what) {
  return what.find("API call failed at") != std::string::npos;
}

// Rethrows a failed torch call as "torch_segops.<op>: <context>: <torch's message>", or, where torch
// gave none, "<context> (the running torch is older than 2.13 and cannot pass its message ...)".
// Anything else (our own argument errors) is rethrown as it is.
[[noreturn]] inline void rethrow_torch_error(const std::exception& e, const char* op, const std::string& context) {
  const std::string what = e.what();
  if (!is_dispatcher_failure(what)) throw;
  std::string reason = torch_reason();
  // torch >= 2.13's own STABLE_TORCH_ERROR_CODE_CHECK appends "(originally from ... API call failed at ...)"
  const auto tail = reason.find(" (originally from ");
  if (tail != std::string::npos) reason.resize(tail);
  std::ostringstream os;
  os << "torch_segops." << op << ": " << context;
  if (!reason.empty()) {
    os << ": " << reason;
  } else {
    os << " (torch did not say why: torch older than 2.13 cannot pass its error message to an extension "
          "built on its stable ABI; for an allocation the usual reason is a lack of memory)";
  }
  throw std::runtime_error(os.str());
}

inline const char* dtype_name(torch::headeronly::ScalarType t) {
  using torch::headeronly::ScalarType;
  switch (t) {
    case ScalarType::Float: return "float32";
    case ScalarType::Double: return "float64";
    case ScalarType::Half: return "float16";
    case ScalarType::BFloat16: return "bfloat16";
    case ScalarType::Int: return "int32";
    case ScalarType::Long: return "int64";
    case ScalarType::Byte: return "uint8";
    case ScalarType::Char: return "int8";
    case ScalarType::Short: return "int16";
    case ScalarType::Bool: return "bool";
    case ScalarType::ComplexFloat: return "complex64";
    case ScalarType::ComplexDouble: return "complex128";
    default: return "another dtype";
  }
}

// A dtype as Python prints it (torch.float32), for messages that name the dtype a user passed.
inline std::string torch_dtype_name(torch::headeronly::ScalarType t) {
  const std::string name = dtype_name(t);
  return name == "another dtype" ? name : "torch." + name;
}

inline int64_t dtype_bytes(torch::headeronly::ScalarType t) {
  using torch::headeronly::ScalarType;
  switch (t) {
    case ScalarType::Double: case ScalarType::Long: return 8;
    case ScalarType::Float: case ScalarType::Int: return 4;
    case ScalarType::Half: case ScalarType::BFloat16: return 2;
    default: return 1;
  }
}

// A byte count computed in floating point (a size that fails to allocate may overflow int64): exact
// below 2^53, else three significant digits ("7.38e+19").
inline std::string byte_count(double bytes) {
  std::ostringstream os;
  if (bytes < 9007199254740992.0) {
    os << static_cast<int64_t>(bytes);
  } else {
    os << std::setprecision(3) << bytes;
  }
  return os.str();
}

// "name of shape (2, 3), float32, 24 bytes, on cuda:0"
inline std::string describe(const char* name, const std::vector<int64_t>& sizes, torch::headeronly::ScalarType dtype,
                            const torch::stable::Tensor& on) {
  std::ostringstream os;
  double numel = 1;
  os << name << " of shape (";
  for (size_t d = 0; d < sizes.size(); ++d) {
    os << (d ? ", " : "") << sizes[d];
    numel *= static_cast<double>(sizes[d]);
  }
  os << "), " << dtype_name(dtype) << ", " << byte_count(numel * static_cast<double>(dtype_bytes(dtype))) << " bytes, on "
     << (on.is_cuda() ? "cuda:" + std::to_string(on.get_device_index()) : std::string("cpu"));
  return os.str();
}

// call(), with a failed torch call reported as "torch_segops.<op>: <what()> failed: <torch's message>"
// (`what` is only evaluated on failure).
template <class Call, class What>
auto torch_call(const char* op, const What& what, const Call& call) -> decltype(call()) {
  try {
    return call();
  } catch (const std::exception& e) {
    rethrow_torch_error(e, op, what() + " failed");
  }
}

inline std::vector<int64_t> sizes_of(const torch::stable::Tensor& t) { return {t.sizes().begin(), t.sizes().end()}; }

// A new tensor on `like`'s device; a failure names `name`, its shape, dtype, bytes and device.
inline torch::stable::Tensor new_tensor(const torch::stable::Tensor& like, const std::vector<int64_t>& sizes,
                                        torch::headeronly::ScalarType dtype, const char* op, const char* name) {
  return torch_call(op, [&] { return "allocating " + describe(name, sizes, dtype, like); },
                    [&] { return torch::stable::new_empty(like, sizes, dtype); });
}

// `t` in contiguous memory (a copy unless it already is); a failure names the copy.
inline torch::stable::Tensor contiguous_of(const torch::stable::Tensor& t, const char* op, const char* name) {
  return torch_call(op, [&] { return std::string("copying ") + describe(name, sizes_of(t), t.scalar_type(), t) +
                                     " into contiguous memory"; },
                    [&] { return torch::stable::contiguous(t); });
}

// `t` converted to `dtype` (contiguous); a failure names the conversion.
inline torch::stable::Tensor converted(const torch::stable::Tensor& t, torch::headeronly::ScalarType dtype,
                                       const char* op, const char* name) {
  return torch_call(op, [&] { return std::string("converting ") + describe(name, sizes_of(t), dtype, t) +
                                     " to " + dtype_name(dtype); },
                    [&] { return torch::stable::contiguous(torch::stable::to(t, dtype)); });
}

// An op entry point whose torch-call failures carry torch's message (see rethrow_torch_error):
// m.impl("gather_csr", TORCH_BOX(&guarded<&gather_csr_cpu, kGatherCsr>::call)).
// (The function type is a parameter of its own so that R and A are deducible from it: nvcc rejects a partial
// specialization whose parameters only appear inside a non-type argument, warning #842-D.)
template <class FnType, FnType Fn, const char* Op>
struct guarded_call;

template <class R, class... A, R (*Fn)(A...), const char* Op>
struct guarded_call<R (*)(A...), Fn, Op> {
  static R call(A... args) {
    try {
      return Fn(args...);
    } catch (const std::exception& e) {
      rethrow_torch_error(e, Op, "a torch call inside the op failed");
    }
  }
};

template <auto Fn, const char* Op>
using guarded = guarded_call<decltype(Fn), Fn, Op>;

// The op names, as template arguments of `guarded` (the reducing ops' names: reduction_table.h).
inline constexpr char kGatherCsr[] = "gather_csr";
inline constexpr char kGatherCsrOut[] = "gather_csr_out";
inline constexpr char kSegmentSoftmax[] = "segment_softmax";
inline constexpr char kSegmentSoftmaxBackward[] = "segment_softmax_backward";

}  // namespace torch_segops
