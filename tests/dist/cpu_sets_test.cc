#include "weft/dist/internal/cpu_sets.h"

#include <gtest/gtest.h>
#include <sched.h>

namespace weft::dist::internal {
namespace {

TEST(CpuSetsTest, RanksBoundToACoreEachHaveOneEach) {
  EXPECT_EQ(cpus_together({"0", "1"}), 2u);
  EXPECT_EQ(cpus_together({"0,1", "0,1", "0,1", "0,1"}), 2u);  // 4 ranks sharing 2 CPUs
  EXPECT_EQ(cpus_together({"3", "3"}), 1u);                    // both bound to one CPU
  EXPECT_EQ(cpus_together({"0,2,4", "1,4,6"}), 5u);
}

TEST(CpuSetsTest, ARankWhoseCpusAreNotKnownCountsNothing) {
  EXPECT_EQ(cpus_together({"0,1", ""}), 0u);
  EXPECT_EQ(cpus_together({}), 0u);
}

TEST(CpuSetsTest, MalformedNumbersFromAPeerAreSkipped) {
  EXPECT_EQ(cpus_together({"0,x,1", ",,", "-1,99999999999,1024,1a"}), 2u);
  EXPECT_EQ(cpus_together({std::to_string(CPU_SETSIZE - 1)}), 1u);
}

TEST(CpuSetsTest, ThisThreadsCpusParseBack) {
  cpu_set_t cpus;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(cpus), &cpus), 0);
  EXPECT_EQ(cpus_together({allowed_cpus()}), static_cast<std::size_t>(CPU_COUNT(&cpus)));
}

}  // namespace
}  // namespace weft::dist::internal
