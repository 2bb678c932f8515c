// Integer helpers shared by the CPU and CUDA kernels. Always inlined, like reduction_policies.h's SEGOPS_HD
// functions: cpu/kernels.cpp is compiled once per instruction set.
#pragma once

#include <cstdint>

#include "platform.h"

#if defined(__CUDACC__)
#define SEGOPS_INDEX_MATH __host__ __device__ __forceinline__
#else
#define SEGOPS_INDEX_MATH SEGOPS_ALWAYS_INLINE
#endif

namespace torch_segops {

// ceil(a / b) for a >= 0, b > 0.
SEGOPS_INDEX_MATH int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

SEGOPS_INDEX_MATH int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
SEGOPS_INDEX_MATH int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }
SEGOPS_INDEX_MATH int64_t iclamp(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : (x > hi ? hi : x); }

}  // namespace torch_segops
