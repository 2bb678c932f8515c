// The C++ reduction list (src/csrc/reductions.h) and the reducer traits the kernels key on: checked at
// compile time where they can be, at run time for the dispatch. Built and run by tests/test_reductions.py.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "reductions.h"

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
  std::printf("%d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
