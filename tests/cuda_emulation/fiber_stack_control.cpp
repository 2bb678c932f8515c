// The block emulation's fiber stacks under AddressSanitizer, optimised (tests/kernels/test_cuda_emulation.py): runners
// reuse pooled stacks on which finished fibers left their frames' redzones poisoned. `0`: nothing overflows, and
// no stack-buffer-overflow may be reported; `8`: one thread reads past a stack array, which ASan must report.
#include <cstdio>
#include <cstdlib>

#include "block_emulation.h"

volatile int sink;

__attribute__((noinline)) int leaf(int t, int k) {
  volatile int a[8];
  for (int i = 0; i < 8; ++i) a[i] = t + i;
  volatile int* p = a;
  return p[k];
}

__attribute__((noinline)) int frames(int t, int k, int depth) {
  volatile char pad[64 + 8 * depth];
  pad[0] = static_cast<char>(t);
  return depth ? frames(t, k, depth - 1) + pad[0] : leaf(t, k);
}

int main(int argc, char** argv) {
  const int k = argc > 1 ? std::atoi(argv[1]) : 0;
  for (int rep = 0; rep < 50; ++rep) {
    segops_emu::BlockRunner r;
    r.order = rep % 3;
    r.run(64 + rep, [&](int t) { sink += frames(t, rep == 49 && t == 5 ? k : t % 8, (t + rep) % 7); }, rep);
  }
  std::puts("ok");
}
