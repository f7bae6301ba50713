#include "weft/base/parse.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

TEST(ParseIntegerTest, TakesOnlyATextThatIsWhollyANumberInRange) {
  EXPECT_EQ(parse_integer("42", 0, 100), 42);
  EXPECT_EQ(parse_integer("-3", -5, 5), -3);
  EXPECT_EQ(parse_integer("100", 0, 100), 100);
  for (const char* bad : {"", " 1", "1 ", "1x", "x", "+1", "101", "-1", "99999999999999999999"})
    EXPECT_EQ(parse_integer(bad, 0, 100), std::nullopt) << bad;
}

}  // namespace
}  // namespace weft
