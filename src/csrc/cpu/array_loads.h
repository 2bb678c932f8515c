// How the piece kernels read their input: element by element as the accumulation type (ArrayLoad, or
// any Load), eight elements as floats (load8_f32, AVX2), 32 bytes as a GCC/Clang vector (Lanes, load_lanes).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "reduction_policies.h"
#include "vec_math.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace torch_segops {
namespace cpu {
SEGOPS_ISA_NAMESPACE_BEGIN

// Reads element i of a contiguous array of n elements (as the accumulation type). Kernels that know
// their input is such an array pass this instead of a lambda, which lets a piece use whole-vector loads.
template <typename T> struct ArrayLoad {
  const T* x;
  int64_t n;
  SEGOPS_HD acc_t<T> operator()(int64_t i) const { return to_acc<acc_t<T>>(x[i]); }
};
template <typename L> struct is_array_load : std::false_type {};
template <typename T> struct is_array_load<ArrayLoad<T>> : std::true_type { using type = T; };

#if defined(__AVX2__)
// Eight elements from x as floats.
inline __m256 load8_f32(const float* x) { return _mm256_loadu_ps(x); }
inline __m256 load8_f32(const torch::headeronly::BFloat16* x) {  // bfloat16 is a float's upper half
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 load8_f32(const torch::headeronly::Half* x) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}
template <typename T>
constexpr bool kSumsInAvx2 = std::is_same_v<T, float> || std::is_same_v<T, torch::headeronly::BFloat16> ||
                             std::is_same_v<T, torch::headeronly::Half>;
#endif

// 32 bytes of A as a GCC/Clang vector (the instruction set's vectors: one AVX2 register, two SSE2 ones),
// and row numbers as wide as A, so that one comparison mask selects both. Rows of a piece fit in
// int32 (a chunk has at most kChunkElems of them).
template <typename T> struct Lanes {
  using A = T;
  static constexpr int kN = 32 / sizeof(A);
  using Pos = std::conditional_t<sizeof(A) <= 4, int32_t, int64_t>;
#if SEGOPS_VECTOR_EXT
  SEGOPS_VECTOR_TYPE(V, A, 32);
  SEGOPS_VECTOR_TYPE(P, Pos, 32);
#endif
};

// v = elements [e, e + kN) as A: one unaligned load where the input already holds A. (An out parameter:
// a 32-byte vector returned by value is an ABI note in the baseline set.)
template <class L, class Load>
[[gnu::always_inline]] inline void load_lanes(const Load& load, int64_t e, typename L::V& v) {
  if constexpr (is_array_load<Load>::value) {
    if constexpr (std::is_same_v<typename is_array_load<Load>::type, typename L::A>) {
      std::memcpy(&v, load.x + e, sizeof v);
      return;
    }
  }
  typename L::A a[L::kN];
  for (int l = 0; l < L::kN; ++l) a[l] = load(e + l);
  std::memcpy(&v, a, sizeof v);
}

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
