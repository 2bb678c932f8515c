// Memory-access tracer of the CUDA kernels (host emulation, no GPU): the measuring half of the memory
// model in model.py (here), which builds this file (g++ -O2 -DSEGOPS_TRACE_ACCESSES) and runs it
// once per benchmark case.
//
// It runs the real drivers and kernels of src/csrc/cuda/ (drivers.cuh) on the CPU (every thread, so that every
// kernel sees the intermediate results of the ones before it) and records, for a sample of warps, every
// global memory access the kernels report (load_vec / store_vec / rd / rd_async / wr and the merge-path
// search's offsets; see the tracing block at the top of device_primitives.cuh). Per launch it prints one
// JSON line with, summed over the sampled warps:
//   - instructions: a warp instruction is the k-th execution of one access site by each lane (lanes are
//     assumed to run the same k-th access of a site together); its useful bytes and the distinct 32-byte
//     sectors it touches give the sector efficiency, the distinct 128-byte lines it touches the L1
//     wavefronts it costs (one line's tag lookup and data per cycle per SM);
//   - rounds: a lane's loads between two waits (a load used at once, SEGOPS_TRACE_USE, a store of loaded
//     data) are in flight together; round k of a warp is round k of its lanes (lock step), classed by the
//     slowest sector it needs: L1 (touched by this warp in an earlier round), L2 (touched by another
//     sampled warp of this launch, or written by an earlier launch whose writes fit in L2), DRAM
//     (otherwise);
//   - distinct sectors read and written by the sampled warps (the DRAM traffic estimate);
//   - shared memory (block kernels, SEGOPS_SH_LD / SEGOPS_SH_ST): per warp instruction (the
//     k-th access of a site by each lane after the same number of SEGOPS_TRACE_STEP marks) the bank
//     wavefronts it takes (shared_wavefronts) and the ones it would take without bank conflicts.
// Block kernels (launch_blocks) run a block's threads phase by phase (fibers, block_emulation.h); a warp
// is 32 consecutive threads of a block, its lanes' accesses recorded in program order.
//
//   trace_kernels OP DTYPE F N INDPTR_FILE [SAMPLE_WARPS]
//   trace_kernels banks STRIDE BYTES   (the bank count of one warp instruction, lane l at byte l * STRIDE)
//   OP: sum mean max logsumexp softmax gather; DTYPE: float32 bfloat16 float64; INDPTR_FILE: S + 1 int64 offsets
//   (gather: N is the output size and src has S rows).
#include <cxxabi.h>

#include <algorithm>
#include <list>
#include <map>
#include <tuple>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>
#include <vector>

// The kernels of this tree, or those of the commit measured on the H100 (model.py --calibrate materialises it),
// from before src/csrc/cuda/ was split.
#if __has_include("cuda/drivers.cuh")
#include "cuda/drivers.cuh"
#else
#include "cuda/segment_kernels.cuh"
#endif
#include "block_emulation.h"

using namespace torch_segops;
using namespace torch_segops::cuda;

// Softmax's per-segment statistics: Fn::Stats states (max and sum), or, in the calibration commit's kernels,
// the finalized logsumexp of each segment.
template <class Fn, class = void> struct SoftmaxStats {
  using Op = LogSumExpOp<typename Fn::A>;
  using Stat = typename Fn::A;
};
template <class Fn> struct SoftmaxStats<Fn, std::void_t<typename Fn::Stats>> {
  using Op = typename Fn::Stats;
  using Stat = typename Fn::State;
};
using BF16 = torch::headeronly::BFloat16;

// ---- the recorder ------------------------------------------------------------------------------------------

struct Access {
  uint64_t addr;
  int bytes, kind, site;  // kind 0 load (used later), 1 load used at once, 2 store, 3 wait (SEGOPS_TRACE_USE)
};

static std::vector<Access>* g_lane = nullptr;  // the lane being recorded, or nullptr

// A shared-memory access of a block kernel's lane: step = SEGOPS_TRACE_STEP marks the lane passed before it.
struct SharedAccess {
  uint64_t addr;
  int bytes;
  uint32_t site;  // line << 1 | store
  uint32_t step;
};
struct SharedLane {
  std::vector<SharedAccess> acc;
  uint32_t step = 0;
  void clear() {
    acc.clear();
    step = 0;
  }
};
static SharedLane* g_shared_lane = nullptr;  // the lane being recorded (block kernels), or nullptr

// Sectors written by earlier launches of this op (every thread, not only sampled ones) whose writes fit in
// half the H100's 50 MB L2: a later launch finds them in L2, not DRAM (carries, partial states, the
// logsumexp a softmax reads back). g_launch_written collects the current launch's; past the cap it is
// dropped (the launch wrote too much for its data to stay in L2).
constexpr size_t kL2ResidentSectors = (25u << 20) / 32;
static std::unordered_set<uint64_t> g_resident, g_launch_written;
static bool g_launch_overflow = false;

void segops_trace_access(const void* p, int bytes, int kind, int site) {
  if (g_lane != nullptr) g_lane->push_back({reinterpret_cast<uint64_t>(p), bytes, kind, site});
  if (kind == 2 && !g_launch_overflow) {
    const uint64_t a = reinterpret_cast<uint64_t>(p);
    for (uint64_t s = a / 32; s <= (a + bytes - 1) / 32; ++s) g_launch_written.insert(s);
    if (g_launch_written.size() > kL2ResidentSectors) {
      g_launch_overflow = true;
      g_launch_written.clear();
    }
  }
}
void segops_trace_use() {
  if (g_lane != nullptr) g_lane->push_back({0, 0, 3, 0});
}
void segops_trace_shared(const void* p, int bytes, bool store, int site) {
  if (g_shared_lane == nullptr) return;
  const uint32_t key = static_cast<uint32_t>(site) << 1 | (store ? 1u : 0u);
  g_shared_lane->acc.push_back({reinterpret_cast<uint64_t>(p), bytes, key, g_shared_lane->step});
}
void segops_trace_step() {
  if (g_shared_lane != nullptr) ++g_shared_lane->step;
}

// Shared memory: 32 banks of 4-byte words. A warp instruction whose lanes touch d distinct words in one bank
// takes d wavefronts (the same word is one broadcast). Accesses wider than 4 bytes are served a part of
// the warp at a time (8 bytes: 16 lanes, 16 bytes: 8 lanes), each part its own wavefronts.
constexpr int kBanks = 32;
struct BankCount {
  double wavefronts = 0, ideal = 0;  // taken; without conflicts (the distinct words / 32 of each part)
};
static BankCount bank_wavefronts(const std::vector<std::pair<int, SharedAccess>>& lanes) {
  int widest = 4;
  for (const auto& la : lanes) widest = std::max(widest, la.second.bytes);
  const int per_part = widest > 8 ? 8 : (widest > 4 ? 16 : 32);
  BankCount out;
  for (int part = 0; part * per_part < 32; ++part) {
    std::unordered_set<uint64_t> words;
    for (const auto& la : lanes) {
      if (la.first / per_part != part) continue;
      const SharedAccess& a = la.second;
      for (uint64_t w = a.addr / 4; w <= (a.addr + a.bytes - 1) / 4; ++w) words.insert(w);
    }
    if (words.empty()) continue;
    int per_bank[kBanks] = {};
    for (uint64_t w : words) ++per_bank[w % kBanks];
    out.wavefronts += *std::max_element(per_bank, per_bank + kBanks);
    out.ideal += static_cast<double>((words.size() + kBanks - 1) / kBanks);
  }
  return out;
}

static void sectors_of(const Access& a, std::vector<uint64_t>& out) {
  for (uint64_t s = a.addr / 32; s <= (a.addr + a.bytes - 1) / 32; ++s) out.push_back(s);
}

// The L1 share of a warp: an LRU of 128-byte lines (the L1 keeps one tag per line and fills it sector by
// sector: a sector hits if its line is resident and the sector was filled since the line came in). 32
// lanes streaming from 32 places hold 32 lines even when each needs only one sector of its line. The model
// picks the capacity that matches the kernel's resident warps per SM (L1 bytes / warps), so every capacity
// below is simulated at once.
constexpr int kCaps = 7;
constexpr int64_t kCapBytes[kCaps] = {1024, 2048, 4096, 8192, 16384, 32768, 65536};

struct Lru {
  size_t cap = 0;  // lines
  std::list<uint64_t> order;  // lines, most recent first
  std::unordered_map<uint64_t, std::pair<std::list<uint64_t>::iterator, unsigned>> where;  // line -> (pos, sectors)
  bool has(uint64_t s) const {
    auto it = where.find(s / 4);
    return it != where.end() && (it->second.second >> (s % 4) & 1u) != 0;
  }
  void touch(uint64_t s) {
    const uint64_t line = s / 4;
    unsigned bits = 0;
    auto it = where.find(line);
    if (it != where.end()) {
      bits = it->second.second;
      order.erase(it->second.first);
    }
    order.push_front(line);
    where[line] = {order.begin(), bits | 1u << (s % 4)};
    if (order.size() > cap) {
      where.erase(order.back());
      order.pop_back();
    }
  }
};

struct LaunchStats {
  std::string name;
  int64_t threads = 0, warps = 0, sampled = 0;
  double ld_useful = 0, ld_sector = 0, st_useful = 0, st_sector = 0, ld_inst = 0, st_inst = 0;
  double ld_lines = 0, st_lines = 0;  // distinct 128-byte lines per warp instruction (L1 wavefronts)
  double simt_inst = 0, simt_rounds = 0, lane_acc = 0;  // divergence-aware counts (simt_counts)
  double rounds[kCaps][3] = {};     // warp rounds by class (L1, L2, DRAM), per L1 capacity
  double l1_miss[kCaps] = {};       // load sectors that miss the warp's L1 share (L2 traffic)
  double max_chain[kCaps][3] = {};  // the longest sampled warp's rounds, per capacity
  double max_chain_cost[kCaps] = {};
  double round_bytes = 0;           // useful bytes loaded in those rounds (all lanes)
  double n_rounds = 0;              // warp rounds (any class)
  double sh_inst = 0, sh_wavefronts = 0, sh_ideal = 0;  // shared-memory warp instructions and their wavefronts
  std::unordered_set<uint64_t> seen;  // sectors touched by sampled warps (loads and stores)
  std::unordered_set<uint64_t> read, written;
};

struct Warp {
  std::vector<Access> lanes[32];
  SharedLane shared[32];
  void clear() {
    for (auto& l : lanes) l.clear();
    for (auto& l : shared) l.clear();
  }
};

// The warp's shared-memory instructions: lanes' accesses grouped by (site, step, k-th in the step).
static void shared_counts(const Warp& w, LaunchStats& st) {
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, std::vector<std::pair<int, SharedAccess>>> inst;
  for (int l = 0; l < 32; ++l) {
    std::map<std::pair<uint32_t, uint32_t>, uint32_t> occ;  // per (site, step)
    for (const SharedAccess& a : w.shared[l].acc) {
      const uint32_t k = occ[{a.site, a.step}]++;
      inst[std::make_tuple(a.site, a.step, k)].push_back({l, a});
    }
  }
  for (const auto& kv : inst) {
    const BankCount bc = bank_wavefronts(kv.second);
    st.sh_inst += 1;
    st.sh_wavefronts += bc.wavefronts;
    st.sh_ideal += bc.ideal;
  }
}

// One lane's rounds: the sectors of each group of loads in flight together, and their useful bytes.
struct Round {
  std::vector<uint64_t> sectors;
  int64_t bytes = 0;
};

static std::vector<Round> rounds_of(const std::vector<Access>& acc) {
  std::vector<Round> out;
  Round cur;
  auto flush = [&] {
    if (!cur.sectors.empty()) out.push_back(std::move(cur));
    cur = Round{};
  };
  for (const Access& a : acc) {
    if (a.kind == 0 || a.kind == 1) {
      sectors_of(a, cur.sectors);
      cur.bytes += a.bytes;
      if (a.kind == 1) flush();
    } else {
      flush();  // a wait, or a store that needs the loaded data
    }
  }
  flush();
  return out;
}

// Divergence: lanes of a warp run in lock step only while they take the same path. A run of loads used at
// once (kind 1: offsets, typically the start of an iteration over segments or rows) opens an "epoch"; the warp
// issues the k-th access of a site in epoch e once for all lanes that make it (SIMT: a lane with fewer
// rows in its segment idles while the others finish theirs). simt_inst counts those (site, e, k) warp
// memory instructions, simt_rounds the (e, r) rounds of loads (r: waits since the epoch began) that hold a
// load, lane_acc the accesses of all lanes (lane_acc / (32 simt_inst): lanes active per instruction).
static void simt_counts(const Warp& w, LaunchStats& st) {
  std::unordered_set<uint64_t> inst, rounds;
  for (const auto& lane : w.lanes) {
    uint64_t e = 0, r = 0;
    std::unordered_map<uint32_t, uint32_t> occ;  // per site, within the epoch
    bool pending = false;                         // the round holds a load
    bool in_run = false;                          // the previous access was a kind-1 load
    auto end_round = [&] {
      if (pending) rounds.insert(e << 24 | r);
      pending = false;
      ++r;
    };
    for (const Access& a : lane) {
      if (a.kind == 3) {
        end_round();
        continue;
      }
      st.lane_acc += 1;
      if (a.kind == 1 && !in_run) {
        end_round();
        ++e;
        r = 0;
        occ.clear();
      }
      in_run = a.kind == 1;
      const uint32_t sk = static_cast<uint32_t>(a.site) << 2 | static_cast<uint32_t>(a.kind == 2 ? 2 : 0);
      inst.insert((e << 40) ^ (static_cast<uint64_t>(sk) << 16) ^ occ[sk]++);
      if (a.kind == 2) {
        end_round();
      } else {
        pending = true;
        if (a.kind == 1) end_round();
      }
    }
    end_round();
  }
  st.simt_inst += static_cast<double>(inst.size());
  st.simt_rounds += static_cast<double>(rounds.size());
}

static void analyse_warp(const Warp& w, LaunchStats& st) {
  simt_counts(w, st);
  shared_counts(w, st);
  // instructions
  // key -> the (address, bytes) of its lanes; lanes reading the same address share the bytes (broadcast)
  std::unordered_map<uint64_t, std::vector<std::pair<uint64_t, int>>> inst;
  for (const auto& lane : w.lanes) {
    std::unordered_map<uint32_t, uint32_t> occ;
    for (const Access& a : lane) {
      if (a.kind == 3) continue;
      const uint32_t sk = static_cast<uint32_t>(a.site) << 2 | static_cast<uint32_t>(a.kind == 2 ? 2 : 0);
      const uint64_t key = static_cast<uint64_t>(sk) << 32 | occ[sk]++;
      inst[key].push_back({a.addr, a.bytes});
    }
  }
  for (auto& kv : inst) {
    auto& acc = kv.second;
    std::sort(acc.begin(), acc.end());
    acc.erase(std::unique(acc.begin(), acc.end()), acc.end());
    std::vector<uint64_t> secs;
    int64_t useful = 0;
    for (const auto& x : acc) {
      useful += x.second;
      sectors_of(Access{x.first, x.second, 0, 0}, secs);
    }
    std::sort(secs.begin(), secs.end());
    secs.erase(std::unique(secs.begin(), secs.end()), secs.end());
    const double n = static_cast<double>(secs.size());
    double lines = 0;  // sectors are sorted: a new 128-byte line starts where sector / 4 changes
    for (size_t i = 0; i < secs.size(); ++i) lines += (i == 0 || secs[i] / 4 != secs[i - 1] / 4) ? 1 : 0;
    const bool store = ((kv.first >> 32) & 3) == 2;
    (store ? st.st_useful : st.ld_useful) += useful;
    (store ? st.st_sector : st.ld_sector) += 32 * n;
    (store ? st.st_inst : st.ld_inst) += 1;
    (store ? st.st_lines : st.ld_lines) += lines;
  }
  // every sector a memory access of this warp touches (kind 3 records are not accesses)
  const auto for_each_sector = [&w](const auto& f) {
    std::vector<uint64_t> s;
    for (const auto& lane : w.lanes) {
      for (const Access& a : lane) {
        if (a.kind == 3) continue;
        s.clear();
        sectors_of(a, s);
        for (uint64_t x : s) f(a, x);
      }
    }
  };
  // distinct sectors
  for_each_sector([&st](const Access& a, uint64_t x) {
    if (a.kind == 2) st.written.insert(x);
    else if (!g_resident.count(x)) st.read.insert(x);
  });
  // rounds, in lock step
  std::vector<Round> lr[32];
  size_t k_max = 0;
  for (int l = 0; l < 32; ++l) {
    lr[l] = rounds_of(w.lanes[l]);
    k_max = std::max(k_max, lr[l].size());
  }
  Lru l1[kCaps];
  for (int c = 0; c < kCaps; ++c) l1[c].cap = static_cast<size_t>(kCapBytes[c] / 128);
  std::unordered_set<uint64_t> warp_seen;  // touched by this warp (then in L2 at least)
  double chain[kCaps][3] = {};
  for (size_t k = 0; k < k_max; ++k) {
    int cls[kCaps];
    std::fill(cls, cls + kCaps, -1);
    // the round's distinct sectors: the L1 requests one sector once for all lanes of a warp's loads
    std::vector<uint64_t> secs;
    for (int l = 0; l < 32; ++l) {
      if (k >= lr[l].size()) continue;
      secs.insert(secs.end(), lr[l][k].sectors.begin(), lr[l][k].sectors.end());
      st.round_bytes += lr[l][k].bytes;
    }
    std::sort(secs.begin(), secs.end());
    secs.erase(std::unique(secs.begin(), secs.end()), secs.end());
    for (uint64_t s : secs) {
      const int far = (warp_seen.count(s) || st.seen.count(s) || g_resident.count(s)) ? 1 : 2;
      for (int c = 0; c < kCaps; ++c) {
        const int x = l1[c].has(s) ? 0 : far;
        if (x > 0) st.l1_miss[c] += 1;
        cls[c] = std::max(cls[c], x);
      }
    }
    if (cls[0] < 0) continue;
    st.n_rounds += 1;
    for (int c = 0; c < kCaps; ++c) chain[c][cls[c]] += 1;
    for (uint64_t s : secs) {
      warp_seen.insert(s);
      for (int c = 0; c < kCaps; ++c) l1[c].touch(s);
    }
  }
  for (int c = 0; c < kCaps; ++c) {
    for (int x = 0; x < 3; ++x) st.rounds[c][x] += chain[c][x];
    const double cost = chain[c][0] * 30 + chain[c][1] * 200 + chain[c][2] * 600;  // picks the longest warp
    if (cost > st.max_chain_cost[c]) {
      st.max_chain_cost[c] = cost;
      std::copy(chain[c], chain[c] + 3, st.max_chain[c]);
    }
  }
  // this warp's sectors are now "seen" by the launch (L2 for the next sampled warps)
  for_each_sector([&st](const Access&, uint64_t x) { st.seen.insert(x); });
}

static std::string demangle(const char* n) {
  int status = 0;
  char* d = abi::__cxa_demangle(n, nullptr, nullptr, &status);
  std::string s = status == 0 && d != nullptr ? d : n;
  std::free(d);
  return s;
}

static std::string triples(const double (&x)[kCaps][3]) {
  std::string s = "[";
  for (int c = 0; c < kCaps; ++c) {
    char b[96];
    std::snprintf(b, sizeof b, "%s[%.0f, %.0f, %.0f]", c ? ", " : "", x[c][0], x[c][1], x[c][2]);
    s += b;
  }
  return s + "]";
}

// The launch is over: what it wrote (if it fits) joins the L2-resident sectors of the next launches.
static void end_launch() {
  if (!g_launch_overflow) g_resident.insert(g_launch_written.begin(), g_launch_written.end());
  if (g_resident.size() > kL2ResidentSectors) g_resident.clear();
  g_launch_written.clear();
  g_launch_overflow = false;
}

static void print_stats(const LaunchStats& st) {
  end_launch();
  std::string caps = "[", miss = "[";
  for (int c = 0; c < kCaps; ++c) {
    caps += (c ? ", " : "") + std::to_string(kCapBytes[c]);
    miss += (c ? ", " : "") + std::to_string(static_cast<long long>(st.l1_miss[c]));
  }
  std::printf(
      "{\"kernel\": \"%s\", \"threads\": %lld, \"warps\": %lld, \"sampled\": %lld, \"ld_useful\": %.0f, "
      "\"ld_sector\": %.0f, \"st_useful\": %.0f, \"st_sector\": %.0f, \"ld_inst\": %.0f, \"st_inst\": %.0f, "
      "\"ld_lines\": %.0f, \"st_lines\": %.0f, \"simt_inst\": %.0f, \"simt_rounds\": %.0f, "
      "\"lane_acc\": %.0f, \"l1_caps\": %s], \"rounds\": %s, \"max_chain\": %s, \"l1_miss\": %s], \"n_rounds\": %.0f, "
      "\"round_bytes\": %.0f, \"read_sectors\": %zu, \"written_sectors\": %zu, \"shared_inst\": %.0f, "
      "\"shared_wavefronts\": %.0f, \"shared_ideal\": %.0f}\n",
      st.name.c_str(), (long long)st.threads, (long long)st.warps, (long long)st.sampled, st.ld_useful, st.ld_sector,
      st.st_useful, st.st_sector, st.ld_inst, st.st_inst, st.ld_lines, st.st_lines, st.simt_inst, st.simt_rounds,
      st.lane_acc, caps.c_str(), triples(st.rounds).c_str(),
      triples(st.max_chain).c_str(), miss.c_str(), st.n_rounds, st.round_bytes, st.read.size(), st.written.size(),
      st.sh_inst, st.sh_wavefronts, st.sh_ideal);
  std::fflush(stdout);
}

// ---- the executor ------------------------------------------------------------------------------------------

struct TraceExec {
  int64_t target_sampled = 2048;
  std::vector<void*> mem;
  void* workspace(size_t bytes) {
    void* m = nullptr;
    if (posix_memalign(&m, 256, bytes == 0 ? 1 : bytes) != 0) std::abort();
    std::memset(m, 0, bytes);
    mem.push_back(m);
    return m;
  }
  int64_t stride_for(int64_t warps) const {
    int64_t s = std::max<int64_t>(1, warps / target_sampled);
    return s % 2 == 0 ? s + 1 : s;  // odd: no aliasing with power-of-two tile and lane patterns
  }
  template <class K> void launch(const K& k, int64_t n) {
    if (n <= 0) return;
    LaunchStats st;
    st.name = demangle(typeid(K).name());
    st.threads = n;
    st.warps = (n + 31) / 32;
    const int64_t stride = stride_for(st.warps);
    Warp w;
    for (int64_t w0 = 0; w0 < st.warps; ++w0) {
      const bool rec = w0 % stride == 0;
      const int64_t t1 = std::min(n, (w0 + 1) * 32);
      for (int64_t t = w0 * 32; t < t1; ++t) {
        g_lane = rec ? &w.lanes[t - w0 * 32] : nullptr;
        k(t);
      }
      g_lane = nullptr;
      if (rec) {
        analyse_warp(w, st);
        w.clear();
        ++st.sampled;
      }
    }
    print_stats(st);
  }
  // Block kernels: every block runs (fibers, block_emulation.h); warp w of block b is global warp
  // b * (kBlock / 32) + w, sampled like the warps of launch().
  template <class K> void launch_blocks(const K& k, int64_t blocks) {
    if (blocks <= 0) return;
    constexpr int kWarps = (K::kBlock + 31) / 32;
    LaunchStats st;
    st.name = demangle(typeid(K).name());
    st.threads = blocks * K::kBlock;
    st.warps = blocks * kWarps;
    const int64_t stride = stride_for(st.warps);
    std::vector<Warp> ws(kWarps);
    std::vector<char> rec(kWarps, 0);
    segops_emu::BlockRunner runner;
    runner.on_resume = [&](int t) {
      g_lane = rec[t / 32] ? &ws[t / 32].lanes[t % 32] : nullptr;
      g_shared_lane = rec[t / 32] ? &ws[t / 32].shared[t % 32] : nullptr;
    };
    segops_emu::run_blocks(runner, k, blocks, 0, [&](int64_t b) {
      if (b > 0) flush_block(ws, rec, st);
      for (int w = 0; w < kWarps; ++w) rec[w] = (b * kWarps + w) % stride == 0;
    });
    flush_block(ws, rec, st);
    g_lane = nullptr;
    g_shared_lane = nullptr;
    print_stats(st);
  }
  static void flush_block(std::vector<Warp>& ws, std::vector<char>& rec, LaunchStats& st) {
    g_lane = nullptr;
    g_shared_lane = nullptr;
    for (size_t w = 0; w < ws.size(); ++w) {
      if (!rec[w]) continue;
      analyse_warp(ws[w], st);
      ws[w].clear();
      ++st.sampled;
      rec[w] = 0;
    }
  }
  ~TraceExec() {
    for (void* m : mem) std::free(m);
  }
};

// ---- the cases ---------------------------------------------------------------------------------------------

template <typename X> X* alloc(int64_t n) {
  void* m = nullptr;
  if (posix_memalign(&m, 256, static_cast<size_t>(n > 0 ? n : 1) * sizeof(X)) != 0) std::abort();
  std::memset(m, 0, static_cast<size_t>(n > 0 ? n : 1) * sizeof(X));
  return static_cast<X*>(m);
}

template <typename T> int run(const std::string& op, int64_t F, int64_t N, std::vector<int64_t>& ip, int64_t sample) {
  using A = acc_t<T>;
  const int64_t S = static_cast<int64_t>(ip.size()) - 1;
  Geometry g;
  g.B = 1;
  g.S = S;
  g.F = F;
  g.indptr = ip.data();
  g.indptr_rows = 1;
  g.bmap.ndims = 0;
  u64 word = kNoError;
  ErrorRecord rec{};
  const ErrorContext ec{{&word, &rec, 1, 0, 0, N}};
  TraceExec ex;
  ex.target_sampled = sample;
  if (op == "gather") {
    g.N = S;
    T* src = alloc<T>(S * F);
    T* out = alloc<T>(N * F);
    const ErrorContext eg{{&word, &rec, 1, kOpGatherCsr, 0, N}};
    launch_validate(ex, g, eg, nullptr, Tuning());
    run_expand<SrcLoad<T>::kVec>(ex, g, N, GatherFn<T>{src}, out, eg.publish(g), true);
    std::free(src);
    std::free(out);
    return 0;
  }
  g.N = N;
  T* x = alloc<T>(N * F);
  if (op == "softmax") {
    using Fn = SoftmaxFn<T>;
    using Stats = SoftmaxStats<Fn>;
    typename Stats::Stat* stats = alloc<typename Stats::Stat>(S * F);
    T* out = alloc<T>(N * F);
    run_reduce<typename Stats::Op>(ex, g, SrcLoad<T>{x}, stats, nullptr, ec, true);
    run_expand<SrcLoad<T>::kVec>(ex, g, N, Fn{x, stats}, out, Publish{}, true);
    std::free(stats);
    std::free(out);
  } else {
    T* out = alloc<T>(S * F);
    int64_t* arg = alloc<int64_t>(op == "max" ? S * F : 0);
    if (op == "sum") run_reduce<SumOp<A>>(ex, g, SrcLoad<T>{x}, out, nullptr, ec, true);
    else if (op == "mean") run_reduce<MeanOp<A>>(ex, g, SrcLoad<T>{x}, out, nullptr, ec, true);
    else if (op == "max") run_reduce<ArgExtremumOp<A, true>>(ex, g, SrcLoad<T>{x}, out, arg, ec, true);
    else if (op == "logsumexp") run_reduce<LogSumExpOp<A>>(ex, g, SrcLoad<T>{x}, out, nullptr, ec, true);
    else {
      std::fprintf(stderr, "unknown op %s\n", op.c_str());
      return 2;
    }
    std::free(out);
    std::free(arg);
  }
  std::free(x);
  return 0;
}

// One synthetic warp instruction: lane l accesses `bytes` bytes at l * stride (test_model.py).
static int bank_selftest(int64_t stride, int bytes) {
  std::vector<std::pair<int, SharedAccess>> lanes;
  for (int l = 0; l < 32; ++l) lanes.push_back({l, SharedAccess{static_cast<uint64_t>(l * stride), bytes, 0, 0}});
  const BankCount bc = bank_wavefronts(lanes);
  std::printf("{\"wavefronts\": %.0f, \"ideal\": %.0f}\n", bc.wavefronts, bc.ideal);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "banks") return bank_selftest(std::atoll(argv[2]), std::atoi(argv[3]));
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s OP DTYPE F N INDPTR_FILE [SAMPLE_WARPS]\n", argv[0]);
    return 2;
  }
  const std::string op = argv[1], dtype = argv[2];
  const int64_t F = std::atoll(argv[3]), N = std::atoll(argv[4]);
  const int64_t sample = argc > 6 ? std::atoll(argv[6]) : 2048;
  FILE* f = std::fopen(argv[5], "rb");
  if (f == nullptr) {
    std::perror(argv[5]);
    return 2;
  }
  std::vector<int64_t> ip;
  int64_t v;
  while (std::fread(&v, sizeof v, 1, f) == 1) ip.push_back(v);
  std::fclose(f);
  if (ip.empty()) return 2;
  if (dtype == "float32") return run<float>(op, F, N, ip, sample);
  if (dtype == "bfloat16") return run<BF16>(op, F, N, ip, sample);
  if (dtype == "float64") return run<double>(op, F, N, ip, sample);
  std::fprintf(stderr, "unknown dtype %s\n", dtype.c_str());
  return 2;
}
