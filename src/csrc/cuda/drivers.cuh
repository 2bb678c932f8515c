// The host drivers of the CUDA kernels: for one op call they plan (cuda_plans.h), carve the workspace and
// launch the kernels in order, through an Exec: segment_cuda.cu's on the GPU; the host emulation's
// (tests/cuda_emulation/emulate_kernels.cpp) and the tracer's (research/gpu_model/trace_kernels.cpp) run
// the very same drivers and kernels on the CPU. run_reduce: the segment reductions (and the per-segment
// parts of softmax and its backward); run_expand: gather and the softmax expansions; launch_validate: a
// standalone indptr check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "cuda/block_kernels.cuh"
#include "cuda/chunk_grid.cuh"
#include "cuda/device_primitives.cuh"
#include "cuda/expand_kernels.cuh"
#include "cuda/indptr_errors.cuh"
#include "cuda/reduce_kernels.cuh"
#include "cuda/short_kernels.cuh"
#include "cuda_plans.h"

namespace torch_segops {
namespace cuda {

// output. in_aligned says the inputs allow it; the output must too (a user's `out=` may start anywhere, e.g.
// at storage offset 1). The stores are sizeof(OutT) * kVec wide (32 bytes for float states of a 16-bit input).
SEGOPS_HD bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }
template <int kVec, class OutT> SEGOPS_HD bool vector_path_ok(bool in_aligned, const OutT* out) {
  return in_aligned && aligned_to(out, sizeof(OutT) * kVec);
}

// ---- drivers (host): plan, carve the workspace, launch the kernels in order --------------------------
//
// Exec provides: void* workspace(size_t bytes) (device memory alive until the op returns),
// template <class K> void launch(const K& k, int64_t threads) (k(tid) per thread) and
// template <class K> void launch_blocks(const K& k, int64_t blocks) (a block kernel, K::kBlock threads each).

struct Geometry {
  int64_t B = 1, N = 0, S = 0, F = 1;  // src viewed as [B, N, F]; S segments
  const int64_t* indptr = nullptr;     // contiguous int64 rows of S + 1 offsets
  int64_t indptr_rows = 0;
  BatchMap bmap;
};

// An op call's ErrorSlot (err: the per-device error word) and the kernel parts that use it.
struct ErrorContext : ErrorSlot {
  // The same call validating into a private word of its own (tag 0), read back by the host right away.
  ErrorContext with_word(u64* word) const {
    ErrorContext ec = *this;
    ec.err = word;
    ec.tag = 0;
    return ec;
  }
  Validate validate(const Geometry& g, int64_t threads) const {
    Validate v;
    v.p = g.indptr;
    v.len = g.S + 1;
    v.total = g.indptr_rows * v.len;
    v.limit = limit;
    v.err = err;
    v.tag = tag;
    v.per_thread = threads > 0 ? ceil_div(v.total, threads) : 0;
    return v;
  }
  Publish publish(const Geometry& g) const { return Publish{*this, g.indptr, g.S + 1, g.indptr_rows}; }
};

inline ChunkGrid chunk_grid(const Geometry& g, int64_t W, int64_t cpb) {
  return ChunkGrid{g.indptr, g.bmap, g.S, g.F, W, cpb};
}

// Value-initialises a kernel functor of type K and hands it to setup (which fills it in and launches it).
template <class K, class Setup> void with_kernel(const Setup& setup) {
  K k{};
  setup(k);
}

struct Carver {
  char* base = nullptr;
  size_t off = 0;
  template <typename X> X* take(int64_t n) {
    off = (off + 255) / 256 * 256;
    X* p = reinterpret_cast<X*>(base == nullptr ? nullptr : base + off);
    off += static_cast<size_t>(n) * sizeof(X);
    return p;
  }
};

// The keyed partial states of every level (plan_levels) in the workspace, F states an entry.
template <class State>
void take_levels(Carver& cv, const ReducePlan& pl, int64_t F, State* (&carry)[kMaxLevels],
                 int64_t* (&key)[kMaxLevels]) {
  for (int l = 0; l < pl.L; ++l) {
    carry[l] = cv.take<State>(pl.n[l] * F);
    key[l] = cv.take<int64_t>(pl.n[l]);
  }
}

// The levels as the kernels that walk them read them.
template <class State>
KeyedLevels<State> keyed_levels(const ReducePlan& pl, int64_t K, State* const (&carry)[kMaxLevels],
                                int64_t* const (&key)[kMaxLevels]) {
  KeyedLevels<State> lv{};
  for (int l = 0; l < pl.L; ++l) {
    lv.carry[l] = carry[l];
    lv.key[l] = key[l];
  }
  lv.L = pl.L;
  lv.K = K;
  return lv;
}

// Levels 1.. of the keyed partial states, in order (level l reads level l - 1).
template <class Op, class Exec>
void launch_levels(Exec& ex, const ReducePlan& pl, int64_t F, int64_t K, typename Op::State* const (&carry)[kMaxLevels],
                   int64_t* const (&key)[kMaxLevels]) {
  for (int l = 1; l < pl.L; ++l) {
    LevelCarry<Op> lc{carry[l - 1], key[l - 1], pl.n[l - 1], carry[l], key[l], pl.n[l], F, K};
    ex.launch(lc, pl.n[l] * F);
  }
}

template <class Exec>
void launch_validate(Exec& ex, const Geometry& g, const ErrorContext& ec, u64* max_last, const Tuning& t) {
  const int64_t total = g.indptr_rows * (g.S + 1);
  if (total == 0) return;
  ValidateKernel k;
  const int64_t threads = ceil_div(total, t.validate_per_thread);
  k.val = ec.validate(g, threads);
  k.max_last = max_last;
  if (max_last != nullptr) k.val.per_thread = t.validate_per_thread;  // the max needs every thread's slice
  ex.launch(k, threads);
}

// out/arg: [B, S, F]. Load::A must be the reducer's accumulation type.
// in_aligned: the input pointers are 16-byte aligned (the vector path also needs an aligned out and
// F % Load::kVec == 0).
// Returns the plan that ran (ReducePlanKind).
template <class Op, class Load, class OutT, class Exec>
int run_reduce(Exec& ex, const Geometry& g, const Load& load, OutT* out, int64_t* arg, const ErrorContext& ec,
                bool in_aligned, const Tuning& t = Tuning()) {
  using State = typename Op::State;
  const bool vec_ok = vector_path_ok<Load::kVec>(in_aligned, out);
  using FlatK = ReduceFlatBlock<Op, Load, OutT>;
  Tuning tf = t;
  tf.flat_items = t.flat_items > 0 ? static_cast<int>(imin(t.flat_items, FlatK::kItemsMax)) : FlatK::kItemsMax;
  const ReducePlan pl = plan_reduce(g.B, g.N, g.S, g.F, Load::kVec, vec_ok, tf);
  auto fill_fixup = [&](auto& k) {  // (C = 0: it only publishes this call's indptr error)
    static_cast<ChunkGrid&>(k) = chunk_grid(g, pl.W, pl.cpb);
    k.N = g.N;
    k.out = out;
    k.arg = arg;
    k.pub = ec.publish(g);
  };
  Fixup<Op, OutT, 1> publish{};  // the last launch of the plans without carries
  fill_fixup(publish);
  if (pl.main_threads == 0) {  // nothing to reduce: validate, then publish
    launch_validate(ex, g, ec, nullptr, t);
    ex.launch(publish, 1);
    return pl.kind;
  }
  if (pl.short_segs) {  // the pieces of long segments, one pass over whole segments, then publish
    State* carry[kMaxLevels] = {};  // carry[0]: slot 0 of every piece, then its levels
    int64_t* key[kMaxLevels] = {};
    State* part1 = nullptr;
    int64_t* key1 = nullptr;
    if (pl.ppb > 0) {
      Carver cv;
      for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1) cv = Carver{static_cast<char*>(ex.workspace(cv.off)), 0};
        part1 = cv.take<State>(pl.n[0] * g.F);
        key1 = cv.take<int64_t>(pl.n[0]);
        take_levels(cv, pl, g.F, carry, key);
      }
    }
    const PieceGrid pieces{g.indptr, g.bmap, g.S, g.F, g.N, pl.P, pl.ppb, pl.G, pl.tiles, pl.ft};
    const int64_t piece_threads = g.B * pl.ppb * pl.G * pl.tiles;
    auto fill_short = [&](auto& k) {
      k.indptr = g.indptr;
      k.bmap = g.bmap;
      k.S = g.S;
      k.F = g.F;
      k.Sg = pl.Sg;
      k.gpb = pl.gpb;
      k.G = pl.G;
      k.tiles = pl.tiles;
      k.ft = pl.ft;
      k.load = load;
      k.N = g.N;
      k.out = out;
      k.arg = arg;
      k.val = ec.validate(g, pl.main_threads);
      k.long_rows = pl.ppb > 0 ? pl.P : std::numeric_limits<int64_t>::max();
      k.piece_threads = piece_threads;
      static_cast<PieceGrid&>(k.pieces) = pieces;
      k.pieces.load = load;
      k.pieces.part0 = carry[0];
      k.pieces.key0 = key[0];
      k.pieces.part1 = part1;
      k.pieces.key1 = key1;
      ex.launch(k, piece_threads + pl.main_threads);
    };
    auto fill_finish = [&](auto& k) {
      static_cast<PieceGrid&>(k) = pieces;
      k.lv = keyed_levels(pl, t.level_k, carry, key);
      k.part1 = part1;
      k.key1 = key1;
      k.out = out;
      k.arg = arg;
      ex.launch(k, piece_threads);
    };
    if (pl.V > 1) {
      with_kernel<ReduceShort<Op, Load, OutT, Load::kVec>>(fill_short);
    } else {
      with_kernel<ReduceShort<Op, Load, OutT, 1>>(fill_short);
    }
    if (pl.ppb > 0) {
      launch_levels<Op>(ex, pl, g.F, t.level_k, carry, key);
      if (pl.V > 1) {
        with_kernel<FinishLongSegments<Op, OutT, Load::kVec>>(fill_finish);
      } else {
        with_kernel<FinishLongSegments<Op, OutT, 1>>(fill_finish);
      }
    }
    ex.launch(publish, 1);
    return pl.kind;
  }
  // workspace: level-0 carries/heads/keys, then the carries/keys of the higher levels
  State* carry[kMaxLevels] = {};
  int64_t* key[kMaxLevels] = {};
  State* head = nullptr;
  int64_t* hkey = nullptr;
  MergeCoord* coord = nullptr;
  const int64_t n_coord = g.B * (pl.cpb + 1);
  Carver cv;
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) cv = Carver{static_cast<char*>(ex.workspace(cv.off)), 0};
    coord = cv.take<MergeCoord>(n_coord);
    head = cv.take<State>(pl.C * g.F);
    hkey = cv.take<int64_t>(pl.C);
    take_levels(cv, pl, g.F, carry, key);
  }
  Partition part{};
  static_cast<ChunkGrid&>(part) = chunk_grid(g, pl.W, pl.cpb);
  part.N = g.N;
  part.coord = coord;
  ex.launch(part, n_coord);
  auto fill_chunks = [&](auto& k) {  // the fields of every pass-1 kernel of the merge-path plan
    static_cast<ChunkGrid&>(k) = chunk_grid(g, pl.W, pl.cpb);
    k.coord = coord;
    k.load = load;
    k.N = g.N;
    k.out = out;
    k.arg = arg;
    k.carry = carry[0];
    k.head = head;
    k.ckey = key[0];
    k.hkey = hkey;
    k.val = ec.validate(g, pl.main_threads);
  };
  auto fill_main = [&](auto& k) {
    fill_chunks(k);
    k.G = pl.G;
    k.tiles = pl.tiles;
    k.ft = pl.ft;
    ex.launch(k, pl.main_threads);
  };
  if (pl.flat) {
    FlatK k{};
    fill_chunks(k);
    k.items = static_cast<int>(pl.W / FlatK::kBlock);
    k.total = g.B * g.N;
    k.vec_ok = in_aligned;  // (it loads 16-byte vectors; its results are stored one by one)
    ex.launch_blocks(k, pl.C);
  } else if (pl.V > 1) {
    with_kernel<ReduceMain<Op, Load, OutT, Load::kVec>>(fill_main);
  } else {
    with_kernel<ReduceMain<Op, Load, OutT, 1>>(fill_main);
  }
  launch_levels<Op>(ex, pl, g.F, t.level_k, carry, key);
  auto finish = [&](auto& k) {
    fill_fixup(k);
    k.C = pl.C;
    k.lv = keyed_levels(pl, t.level_k, carry, key);
    k.head = head;
    k.hkey = hkey;
    ex.launch(k, imax(1, pl.C * (g.F / pl.V)));
  };
  if (pl.V > 1) {
    with_kernel<Fixup<Op, OutT, Load::kVec>>(finish);
  } else {
    with_kernel<Fixup<Op, OutT, 1>>(finish);
  }
  return pl.kind;
}

// out: [B, R, F]; Fn::apply reads the segment data ([B, S, F]) and, for softmax, the [B, R, F] inputs.
// kVec: elements per 16-byte vector of the element type; in_aligned: Fn's input pointers are 16-byte aligned
// (out is checked here).
template <int kVec, class Fn, class Exec>
void run_expand(Exec& ex, const Geometry& g, int64_t R, const Fn& fn, typename Fn::OutT* out, const Publish& pub,
                bool in_aligned, const Tuning& t = Tuning()) {
  const ExpandPlan pl = plan_expand(g.B, R, g.S, g.F, kVec, vector_path_ok<kVec>(in_aligned, out), t);
  auto go = [&](auto& k) {
    static_cast<ChunkGrid&>(k) = chunk_grid(g, pl.W, pl.cpb);
    k.fn = fn;
    k.R = R;
    k.Wz = pl.Wz;
    k.C = pl.C;
    k.nfv = pl.nfv;
    k.out = out;
    k.pub = pub;
    ex.launch(k, imax(pl.threads, pub.to.err != nullptr ? 1 : 0));
  };
  if (pl.V > 1) {
    with_kernel<Expand<Fn, kVec>>(go);
  } else {
    with_kernel<Expand<Fn, 1>>(go);
  }
}


}  // namespace cuda
}  // namespace torch_segops
