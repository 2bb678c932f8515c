// Messages of the CUDA backend's errors, as plain host functions of plain values (no CUDA, no torch), so
// that the host emulation test (tests/cuda_emulation/emulate_kernels.cpp) checks them without a GPU; the CUDA
// sources gather the values (device properties, the error record) and throw.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

#include "op_names.h"

namespace torch_segops {
namespace cuda {

// The GPU a "no kernel image" error happened on.
struct GpuInfo {
  int index = -1;
  std::string name;  // cudaDeviceProp::name
  int major = 0, minor = 0;
};

// A launch (or module load) failed because the library has no code this GPU can run: no SASS for its
// architecture and no PTX the driver can JIT-compile for it (error_name: cudaErrorNoKernelImageForDevice,
// cudaErrorInvalidDeviceFunction), or PTX the driver is too old to compile (ptx_too_new:
// cudaErrorUnsupportedPtxVersion, cudaErrorInvalidPtx). Names the GPU's compute capability, the
// architectures the library holds (build_info()['cuda_archs']) and the fix.
inline std::string no_kernel_image_message(const char* op, const char* what, const char* error_name,
                                           const GpuInfo& gpu, const char* lib_archs, const char* lib_cuda,
                                           bool ptx_too_new) {
  const std::string sm = std::to_string(gpu.major) + std::to_string(gpu.minor);
  std::ostringstream os;
  os << "torch_segops." << op << ": this torch_segops build has no CUDA code that runs on cuda:" << gpu.index
     << " (" << (gpu.name.empty() ? "unknown GPU" : gpu.name) << ", compute capability " << gpu.major << "."
     << gpu.minor << ", sm_" << sm << "): " << error_name << " in " << what
     << ". The library holds code for the CUDA architectures " << lib_archs << " (built with CUDA " << lib_cuda
     << "; torch_segops.build_info()['cuda_archs'])";
  if (ptx_too_new) {
    os << ", and the NVIDIA driver is too old to JIT-compile its PTX (the driver must support CUDA " << lib_cuda
       << "). Fix: update the NVIDIA driver, or use a build with SASS for sm_" << sm;
  } else {
    os << ", none of which runs on sm_" << sm
       << " (SASS for sm_XY runs on sm_XZ with Z >= Y only; PTX only on GPUs at least as new as its"
          " architecture). Fix: install a torch_segops CUDA build whose cuda_archs cover sm_"
       << sm;
  }
  os << ", or rebuild from source for this GPU: CUDAARCHS=\"" << sm
     << "-real\" TORCH_SEGOPS_WITH_CUDA=ON pip install --no-build-isolation . "
        "(`python -m torch_segops.doctor` checks the build against every GPU).";
  return os.str();
}

// An invalid indptr (what < 0) or COO index (what: its IndexProblem) that a kernel of an earlier call found on
// cuda:device, as the host reports it at a later call (the fields of cuda/indptr_errors.cuh's ErrorRecord).
inline std::string found_error_message(int32_t op, int32_t what, int32_t device, int64_t pos, int64_t len,
                                       int64_t rows, int64_t value, int64_t prev, int64_t limit) {
  std::ostringstream os;
  if (what < 0) {
    os << indptr_error_message(op, pos, len, rows, value, prev, limit);
  } else {
    os << "torch_segops." << op_names(op).name << ": " << index_error_message(what, pos, len, value, prev, limit);
  }
  os << " (found on cuda:" << device << " by the GPU in an earlier call of " << op_names(op).name
     << ", whose output is unspecified; CUDA ops check indptr and index asynchronously and report at the next "
        "torch_segops CUDA call or at torch_segops.check_errors(); set TORCH_SEGOPS_CUDA_SYNC_CHECKS=1 to "
        "report in the faulty call)";
  return os.str();
}

}  // namespace cuda
}  // namespace torch_segops
