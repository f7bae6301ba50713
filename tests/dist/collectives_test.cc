// Every collective on the thread backend, against expected values computed in the test by
// plain loops: world sizes 1 to 8, every dtype, every reduce op, awkward counts (0, 1, 7,
// sizes not divisible by the world size, and large enough to take the ring paths).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "tests/dist/collective_checks.h"
#include "tests/support/sanitizers.h"
#include "weft/dist.h"

namespace weft::dist {
namespace {

template <class T>
void all_ops(int n) {
  run_threads(n, [](ProcessGroup& pg) { test::all_checks<T>(pg); });
}

class CollectivesTest : public testing::TestWithParam<int> {};

// Under ThreadSanitizer (the race set) one dtype of each width runs, float and integer sums
// both: the ranks synchronise the same way for every dtype, and the algorithm chosen depends
// on the bytes. The other four took half of that set's time.
#define WEFT_SAME_WIDTH_AS_ANOTHER_DTYPE()                                  \
  if (weft::test::kUnderSanitizer) {                                        \
    GTEST_SKIP() << "another dtype of this width runs under the sanitizer"; \
  }

TEST_P(CollectivesTest, Float32) { all_ops<float>(GetParam()); }
TEST_P(CollectivesTest, Float64) {
  WEFT_SAME_WIDTH_AS_ANOTHER_DTYPE();
  all_ops<double>(GetParam());
}
TEST_P(CollectivesTest, Float16) {
  WEFT_SAME_WIDTH_AS_ANOTHER_DTYPE();
  all_ops<Half>(GetParam());
}
TEST_P(CollectivesTest, BFloat16) { all_ops<BFloat16>(GetParam()); }
TEST_P(CollectivesTest, Int8) { all_ops<std::int8_t>(GetParam()); }
TEST_P(CollectivesTest, UInt8) {
  WEFT_SAME_WIDTH_AS_ANOTHER_DTYPE();
  all_ops<std::uint8_t>(GetParam());
}
TEST_P(CollectivesTest, Int32) {
  WEFT_SAME_WIDTH_AS_ANOTHER_DTYPE();
  all_ops<std::int32_t>(GetParam());
}
TEST_P(CollectivesTest, Int64) { all_ops<std::int64_t>(GetParam()); }

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectivesTest, testing::Values(1, 2, 3, 4, 5, 8),
                         [](const auto& p) { return std::to_string(p.param) + "ranks"; });

}  // namespace
}  // namespace weft::dist
