// The C++ reduction list (src/csrc/reduction_table.h), the reducer traits the kernels key on and the op names
// (src/csrc/op_names.h): checked at compile time where they can be, at run time for the dispatch. Built and run by
// tests/kernels/test_reductions.py.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "op_names.h"
#include "reduction_table.h"

using namespace torch_segops;

// A reducer derived from SumOp that folds values in another way: not a sum for the fast paths.
template <typename A> struct DerivedNotSum : SumOp<A> {
  using State = typename SumOp<A>::State;
  static void step(State& s, A x, int64_t) { s.v = s.v * x; }
};

static_assert(kAddsFloats<SumOp<float>>);
static_assert(kAddsFloats<MeanOp<float>>);  // a sum, finalized apart
static_assert(!kAddsFloats<DerivedNotSum<float>>);
static_assert(!kAddsFloats<ProdOp<float>>);
static_assert(!kAddsFloats<SumOp<double>>);
static_assert(!kAddsFloats<MinOp<float>>);
static_assert(std::is_same_v<Reduction<Reduce::Min>::reducer<float>, ArgExtremumOp<float, false>>);
static_assert(std::is_same_v<Reduction<Reduce::Max>::reducer<double>, ArgExtremumOp<double, true>>);
static_assert(Reduction<Reduce::Min>::kHasArg && !Reduction<Reduce::Sum>::kHasArg);
static_assert(!Reduction<Reduce::Mean>::kIntegers && Reduction<Reduce::Mul>::kIntegers);

// op_names.h's table check refuses a table with two rows swapped or a row missing (a new OpId without its row).
struct OpTable {
  OpNames rows[kOpCount];
};
constexpr OpTable altered_op_names(int32_t swap_a, int32_t swap_b, int32_t drop) {
  OpTable t{};
  for (int32_t op = 0; op < kOpCount; ++op) t.rows[op] = kOpNames[op];
  if (swap_a >= 0) {
    const OpNames a = t.rows[swap_a];
    t.rows[swap_a] = t.rows[swap_b];
    t.rows[swap_b] = a;
  }
  if (drop >= 0) t.rows[drop] = OpNames{};
  return t;
}
static_assert(op_rows_in_order(kOpNames));
static_assert(op_rows_in_order(altered_op_names(-1, -1, -1).rows));
static_assert(!op_rows_in_order(altered_op_names(kOpSegmentCsr, kOpGatherCsr, -1).rows));
static_assert(!op_rows_in_order(altered_op_names(-1, -1, kOpCount - 1).rows));

int failures = 0;
void check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("FAILED: %s\n", what.c_str());
  }
}

template <typename A>
void check_visits() {
  for_each_reduce([](auto r) {
    constexpr Reduce R = decltype(r)::value;
    using Traits = Reduction<R>;
    std::string what = std::string("visit_reducer of ") + Traits::short_name;
    bool visited = false;
    try {
      visit_reducer<A>(R, [&](auto tag) {
        visited = std::is_same_v<typename decltype(tag)::type, typename Traits::template reducer<A>>;
      });
      check(visited, what + ": the row's reducer");
      check(Traits::kIntegers || !std::is_integral_v<A>, what + ": ran for an integer type the row refuses");
    } catch (const std::logic_error&) {
      check(std::is_integral_v<A> && !Traits::kIntegers, what + ": threw for a type the row allows");
    }
  });
}

int main() {
  int n = 0;
  for_each_reduce([&](auto r) {
    check(decltype(r)::value == kReductions[n], "for_each_reduce follows kReductions");
    check(static_cast<int>(decltype(r)::value) == n, "the enum follows the list");
    ++n;
  });
  check(n == static_cast<int>(sizeof(kReductions) / sizeof(kReductions[0])), "for_each_reduce visits every row");
  check_visits<float>();
  check_visits<double>();
  check_visits<int64_t>();
  std::printf("reductions: %d\n", n);
  for_each_reduce([](auto r) {
    using Traits = Reduction<decltype(r)::value>;
    std::printf("row %s %s %d %d\n", Traits::short_name, Traits::name, Traits::kHasArg ? 1 : 0, Traits::kIntegers ? 1 : 0);
  });
  std::printf("integer names: %s\n", integer_reduction_names().c_str());
  // an id that is no op is named as unknown, never as segment_csr (the old clamp to row 0)
  for (int32_t op : {-1, static_cast<int32_t>(kOpCount), 1000}) {
    check(std::string(op_names(op).name) == "(unknown op)", "op_names of the id " + std::to_string(op));
  }
  check(std::string(op_names(kOpIndexToIndptr).name) == "index_to_indptr", "op_names of the last op");
  std::printf("%d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
