// Host emulation of the CUDA block kernels of block_kernels.cuh (no GPU). Not part of the library.
//
// A block kernel (see the top of block_kernels.cuh) is run here block by block;
// each thread of a block is a fiber with its own stack, and a block's fibers run one at a time, each
// until it reaches a barrier: blk.sync() (the whole block) or a shuffle (its warp). When every thread
// of the block (of the warp, for a shuffle) has arrived, they are released together; so a kernel runs
// phase by phase between barriers, with its shared memory (garbage-filled) and shuffles emulated, and the
// order in which threads run inside a phase is forward, reverse or shuffled (a result that depends on it
// is a race). A barrier or shuffle that not every thread of its block or warp reaches (a thread returned,
// or waits at another barrier) is reported and aborts: on a GPU that is a hang or undefined behaviour.
// A shuffle only orders its warp, but here a warp's shuffle waits for every ready thread of the block, so the
// thread order alone cannot show a missing block barrier between warps; shared_access() (the kernels'
// SEGOPS_SH_LD / SEGOPS_SH_ST, reported by the emulation's trace hook) does: two accesses to a shared byte by
// threads of different warps, one of them a store, with no block barrier between them abort as a race.
//
// Used by emulate_kernels.cpp (under AddressSanitizer/UBSan) and research/gpu_model/trace_kernels.cpp (the memory model).
// Fibers switch with a few lines of x86-64 assembly (callee-saved registers and the stack pointer), or
// ucontext elsewhere. Under AddressSanitizer every switch is announced (__sanitizer_start_switch_fiber /
// __sanitizer_finish_switch_fiber): ASan then knows which stack is live, and reports no false
// stack-buffer-overflow when an optimised build's frames land on a fiber's stack.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SEGOPS_EMU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(SEGOPS_EMU_ASAN)
#define SEGOPS_EMU_ASAN 1
#endif
#ifdef SEGOPS_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace segops_emu {

#if defined(__x86_64__)
extern "C" void segops_emu_switch(void** save_sp, void* new_sp);
asm(R"(
.text
.globl segops_emu_switch
.type segops_emu_switch,@function
segops_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size segops_emu_switch, .-segops_emu_switch
.section .note.GNU-stack,"",@progbits
.text
)");
#endif

class BlockRunner;

struct Fiber {
  enum State { kReady, kAtSync, kAtWarp, kDone };
  BlockRunner* runner = nullptr;
  int t = 0;
  State state = kReady;
  int shuffles = 0;  // shuffles done (double-buffered exchange slots)
  char* stack = nullptr;
  void* fake_stack = nullptr;  // AddressSanitizer's fake stack of the fiber while it is switched out
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
};

class BlockRunner {
 public:
  static constexpr size_t kStack = 256 * 1024;
  static constexpr size_t kLeftFrames = 16 * 1024;  // more than a finished fiber's last frames take
  static constexpr int kSlotBytes = 64;

  int order = 0;  // 0 forward, 1 reverse, 2 shuffled
  std::function<void(int)> on_resume;  // called before a thread runs (the tracer picks its recorder)

  ~BlockRunner() {
    for (Fiber& f : fibers_) pool().push_back(f.stack);
  }

  // Runs body(t) for t in [0, n) as the threads of one block.
  void run(int n, const std::function<void(int)>& body, uint64_t seed) {
    if (static_cast<int>(fibers_.size()) < n) fibers_.resize(static_cast<size_t>(n));
    if (n > 32 * 32) fail("more than 1024 threads in a block");
    n_ = n;
    barriers_ = 0;
    std::fill(shadow_.begin(), shadow_.end(), SharedByte{});
    body_ = &body;
    xbuf_.assign(static_cast<size_t>((n + 31) / 32) * 2 * 32 * kSlotBytes, 0);
    xsize_.assign(static_cast<size_t>((n + 31) / 32) * 2, -1);
    for (int t = 0; t < n; ++t) start(fibers_[t], t);
    std::vector<int> ids(static_cast<size_t>(n));
    for (int t = 0; t < n; ++t) ids[t] = order == 1 ? n - 1 - t : t;
    std::mt19937_64 rng(seed);
    for (;;) {
      if (order == 2) std::shuffle(ids.begin(), ids.end(), rng);
      bool ran = false;
      for (int t : ids) {
        Fiber& f = fibers_[t];
        if (f.state != Fiber::kReady) continue;
        resume(f);
        ran = true;
      }
      if (ran) continue;
      if (!release()) break;
    }
    if (active() == this) active() = nullptr;
  }

  // The block's shared memory [p, p + bytes), watched by shared_access() in the next run().
  void watch_shared(const void* p, size_t bytes) {
    shared_lo_ = static_cast<const char*>(p);
    shared_bytes_ = bytes;
    shadow_.assign(bytes, SharedByte{});
  }

  // A load or store of shared bytes [p, p + bytes) by the running thread (nothing outside a watched block run):
  // aborts on an access that races with another warp's since the last block barrier.
  static void shared_access(const void* p, int bytes, bool store) {
    BlockRunner* r = active();
    if (r == nullptr || r->current_ < 0) return;
    const char* c = static_cast<const char*>(p);
    if (c < r->shared_lo_ || c >= r->shared_lo_ + r->shared_bytes_) return;
    const uint32_t epoch = r->barriers_ + 1, warp = static_cast<uint32_t>(r->current_ / 32);
    const size_t off = static_cast<size_t>(c - r->shared_lo_);
    for (size_t i = off; i < std::min(off + static_cast<size_t>(bytes), r->shared_bytes_); ++i) {
      SharedByte& b = r->shadow_[i];
      if (b.write_epoch == epoch && b.writer_warp != warp) {
        fail(store ? "shared memory race: two warps store to the same bytes with no block barrier between"
                   : "shared memory race: a warp loads bytes another warp stored with no block barrier between");
      }
      if (b.read_epoch != epoch) {
        b.read_epoch = epoch;
        b.reader_warps = 0;
      }
      if (store) {
        if ((b.reader_warps & ~(1u << warp)) != 0) {
          fail("shared memory race: a warp stores to bytes another warp loaded with no block barrier between");
        }
        b.write_epoch = epoch;
        b.writer_warp = warp;
      } else {
        b.reader_warps |= 1u << warp;
      }
    }
  }

  // ---- called by the running thread ----
  void sync(int t) { wait(t, Fiber::kAtSync); }

  // lane l gets lane l - d's value (its own for l < d); every lane of the warp must call it
  void shfl_up(int t, const void* v, void* out, int bytes, int d) {
    Fiber& f = fibers_[t];
    if (bytes > kSlotBytes) fail("shuffle of more than 64 bytes");
    const int w = t / 32, lane = t % 32, par = f.shuffles++ & 1;
    char* slots = &xbuf_[(static_cast<size_t>(w) * 2 + par) * 32 * kSlotBytes];
    int& sz = xsize_[static_cast<size_t>(w) * 2 + par];
    if (sz >= 0 && sz != bytes) fail("lanes of a warp shuffle values of different sizes");
    sz = bytes;
    std::memcpy(slots + lane * kSlotBytes, v, static_cast<size_t>(bytes));
    wait(t, Fiber::kAtWarp);
    const int src = lane >= d ? lane - d : lane;
    std::memcpy(out, slots + src * kSlotBytes, static_cast<size_t>(bytes));
  }

 private:
  std::vector<Fiber> fibers_;
  int n_ = 0;
  const std::function<void(int)>* body_ = nullptr;
  std::vector<char> xbuf_;
  std::vector<int> xsize_;
  int current_ = -1;
  // shared memory watched by shared_access(): per byte, the block barriers passed (plus one) at its last store
  // and by which warp, and the warps that loaded it since the last barrier
  struct SharedByte {
    uint32_t write_epoch = 0, writer_warp = 0, read_epoch = 0, reader_warps = 0;
  };
  const char* shared_lo_ = nullptr;
  size_t shared_bytes_ = 0;
  std::vector<SharedByte> shadow_;
  uint32_t barriers_ = 0;  // block barriers released in this run
  // AddressSanitizer: the fake stack of the runner's own stack while a fiber runs, and that stack's bounds
  void* main_fake_stack_ = nullptr;
  const void* main_bottom_ = nullptr;
  size_t main_size_ = 0;
#if defined(__x86_64__)
  void* main_sp_ = nullptr;
#else
  ucontext_t main_ctx_;
#endif

  [[noreturn]] static void fail(const char* what) {
    std::fprintf(stderr, "block emulation: %s\n", what);
    std::fflush(stderr);
    std::abort();
  }

  struct Pool : std::vector<char*> {
    ~Pool() {
      for (char* p : *this) std::free(p);
    }
  };
  static Pool& pool() {
    static Pool p;
    return p;
  }

  static BlockRunner*& active() {
    static BlockRunner* r = nullptr;
    return r;
  }

  // Announce a switch to the stack [bottom, bottom + size) (save: where the leaving stack's fake stack goes,
  // nullptr for a fiber that has finished), and its completion on the stack switched to.
  static void switching(void** save, const void* bottom, size_t size) {
#ifdef SEGOPS_EMU_ASAN
    __sanitizer_start_switch_fiber(save, bottom, size);
#else
    (void)save, (void)bottom, (void)size;
#endif
  }
  static void switched(void* fake_stack, const void** bottom_old, size_t* size_old) {
#ifdef SEGOPS_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, bottom_old, size_old);
#else
    (void)fake_stack, (void)bottom_old, (void)size_old;
#endif
  }

  static void entry() {
    BlockRunner* r = active();
    switched(nullptr, &r->main_bottom_, &r->main_size_);
    const int t = r->current_;
    (*r->body_)(t);
    r->fibers_[t].state = Fiber::kDone;
    r->to_main(t);
    fail("a finished thread was resumed");
  }

  void start(Fiber& f, int t) {
    f.runner = this;
    f.t = t;
    f.state = Fiber::kReady;
    f.shuffles = 0;
    f.fake_stack = nullptr;
    if (f.stack == nullptr) {  // stacks are kept for the next runner (allocating them costs more than the work)
      if (!pool().empty()) {
        f.stack = pool().back();
        pool().pop_back();
      } else {
        f.stack = static_cast<char*>(std::malloc(kStack));
        if (f.stack == nullptr) fail("out of memory for fiber stacks");
      }
    }
#ifdef SEGOPS_EMU_ASAN
    // A finished fiber never unwinds: the frames it was still in (entry's, to_main's: at the top of its stack) keep
    // their redzones poisoned for the next fiber on this stack.
    __asan_unpoison_memory_region(f.stack + kStack - kLeftFrames, kLeftFrames);
#endif
#if defined(__x86_64__)
    uintptr_t top = (reinterpret_cast<uintptr_t>(f.stack) + kStack) & ~uintptr_t(15);
    void** sp = reinterpret_cast<void**>(top);
    *--sp = nullptr;                                  // entry's (never used) return address
    *--sp = reinterpret_cast<void*>(&BlockRunner::entry);  // where the first switch "returns"
    for (int i = 0; i < 6; ++i) *--sp = nullptr;      // rbp rbx r12 r13 r14 r15
    f.sp = sp;
#else
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = kStack;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, &BlockRunner::entry, 0);
#endif
  }

  void resume(Fiber& f) {
    if (on_resume) on_resume(f.t);
    current_ = f.t;
    active() = this;
    switching(&main_fake_stack_, f.stack, kStack);
#if defined(__x86_64__)
    segops_emu_switch(&main_sp_, f.sp);
#else
    swapcontext(&main_ctx_, &f.ctx);
#endif
    switched(main_fake_stack_, nullptr, nullptr);
    current_ = -1;
  }

  void to_main(int t) {
    Fiber& f = fibers_[t];
    switching(f.state == Fiber::kDone ? nullptr : &f.fake_stack, main_bottom_, main_size_);
#if defined(__x86_64__)
    segops_emu_switch(&f.sp, main_sp_);
#else
    swapcontext(&f.ctx, &main_ctx_);
#endif
    switched(f.fake_stack, &main_bottom_, &main_size_);
  }

  void wait(int t, Fiber::State s) {
    fibers_[t].state = s;
    to_main(t);
  }

  // Nothing is ready: release a barrier every thread reached. False when all threads are done.
  bool release() {
    bool all_done = true, any_sync = false;
    for (int t = 0; t < n_; ++t) {
      all_done &= fibers_[t].state == Fiber::kDone;
      any_sync |= fibers_[t].state == Fiber::kAtSync;
    }
    if (all_done) return false;
    // warps whose 32 lanes (all of the block's threads in it) wait at a shuffle
    bool released = false;
    for (int w = 0; w * 32 < n_; ++w) {
      const int t1 = std::min(n_, (w + 1) * 32);
      bool all = true;
      for (int t = w * 32; t < t1; ++t) all &= fibers_[t].state == Fiber::kAtWarp;
      if (all) {
        for (int t = w * 32; t < t1; ++t) {
          if (fibers_[t].shuffles != fibers_[w * 32].shuffles) fail("lanes of a warp at different shuffles");
          fibers_[t].state = Fiber::kReady;
        }
        // the slot the warp's next shuffle writes (its readers are past this barrier)
        xsize_[static_cast<size_t>(w) * 2 + (fibers_[w * 32].shuffles & 1)] = -1;
        released = true;
      }
    }
    if (released) return true;
    if (any_sync) {
      for (int t = 0; t < n_; ++t) {
        if (fibers_[t].state != Fiber::kAtSync) {
          fail(fibers_[t].state == Fiber::kDone ? "a thread returned while others wait at a block barrier"
                                                : "threads wait at different barriers (block and warp)");
        }
      }
      for (int t = 0; t < n_; ++t) fibers_[t].state = Fiber::kReady;
      ++barriers_;
      return true;
    }
    fail("a shuffle that not every lane of its warp reached");
  }
};

// The Blk of a block kernel on the host (block_kernels.cuh's DeviceBlock on the GPU).
struct HostBlock {
  BlockRunner* r;
  int t;
  int64_t b;
  int thread() const { return t; }
  int64_t block() const { return b; }
  void sync() const { r->sync(t); }
  template <class X> X shfl_up(const X& v, int d) const {
    X out;
    r->shfl_up(t, &v, &out, static_cast<int>(sizeof(X)), d);
    return out;
  }
};

// Runs block kernel k over `blocks` blocks of K::kBlock threads, with K::Shared filled with `fill`.
template <class K>
void run_blocks(BlockRunner& runner, const K& k, int64_t blocks, unsigned char fill,
                const std::function<void(int64_t)>& before_block = nullptr) {
  using Shared = typename K::Shared;
  Shared* sh = static_cast<Shared*>(std::malloc(sizeof(Shared)));
  runner.watch_shared(sh, sizeof(Shared));
  for (int64_t bi = 0; bi < blocks; ++bi) {
    const int64_t b = runner.order == 1 ? blocks - 1 - bi : bi;
    if (before_block) before_block(b);
    std::memset(static_cast<void*>(sh), fill, sizeof(Shared));
    const std::function<void(int)> body = [&](int t) {
      HostBlock blk{&runner, t, b};
      k(blk, *sh);
    };
    runner.run(K::kBlock, body, 977 + static_cast<uint64_t>(b));
  }
  std::free(sh);
}

}  // namespace segops_emu
