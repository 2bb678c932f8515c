// merge_path_search_near (the CPU kernels' chunk-end search, from the previous chunk's end and a guess)
// against the plain binary search, on random segmentations (short, empty-heavy and huge segments),
// for every start diagonal, every later diagonal and guesses from below the start to past the end.
// Prints "N passed, M failed"; exits 1 on the first mismatch.
#include <cstdio>
#include <random>
#include <vector>

#include "merge_path.h"

using torch_segops::MergeCoord;

int main() {
  std::mt19937_64 rng(12345);
  long passed = 0;
  for (int it = 0; it < 3000; ++it) {
    const int S = static_cast<int>(rng() % 24);
    std::vector<int64_t> p(S + 1);
    p[0] = static_cast<int64_t>(rng() % 5);
    const int shape = static_cast<int>(rng() % 3);
    for (int i = 1; i <= S; ++i) {
      const uint64_t r = rng();
      const int64_t len = shape == 0 ? r % 3 : shape == 1 ? (r % 8 == 0 ? (r >> 8) % 40 : 0) : r % 7;
      p[i] = p[i - 1] + len;
    }
    const int64_t nnz = p[S] - p[0];
    for (int64_t d0 = 0; d0 <= S + nnz; ++d0) {
      const MergeCoord from = torch_segops::merge_path_search(p.data(), S, nnz, d0);
      for (int64_t d = d0; d <= S + nnz; ++d) {
        const MergeCoord want = torch_segops::merge_path_search(p.data(), S, nnz, d);
        for (int64_t hint = -2; hint <= S + 2; ++hint) {
          const MergeCoord got = torch_segops::merge_path_search_near(p.data(), S, nnz, d, from, hint);
          if (got.seg != want.seg || got.row != want.row) {
            std::printf("S=%d d0=%lld d=%lld hint=%lld: got (%lld, %lld), want (%lld, %lld)\n%ld passed, 1 failed\n",
                        S, (long long)d0, (long long)d, (long long)hint, (long long)got.seg, (long long)got.row,
                        (long long)want.seg, (long long)want.row, passed);
            return 1;
          }
          ++passed;
        }
      }
    }
  }
  std::printf("%ld passed, 0 failed\n", passed);
  return 0;
}
