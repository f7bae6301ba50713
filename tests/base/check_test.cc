#include "weft/base/check.h"

#include <gtest/gtest.h>

namespace {

TEST(CheckDeathTest, PrintsBothValues) {
  const int a = 3;
  const int b = 4;
  EXPECT_DEATH(WEFT_CHECK_EQ(a, b), "check failed: a == b \\(3 vs 4\\)");
  EXPECT_DEATH(WEFT_CHECK(a > b), "check failed: a > b");
}

TEST(CheckTest, PassingChecksDoNothing) {
  WEFT_CHECK(true);
  WEFT_CHECK_LT(1, 2);
  WEFT_CHECK_GE(2, 2);
}

}  // namespace
