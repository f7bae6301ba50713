#include "weft/base/deadline.h"

#include <gtest/gtest.h>

#include <thread>

namespace weft {
namespace {

using namespace std::chrono_literals;

TEST(DeadlineTest, NeverDoesNotExpire) {
  const Deadline d = Deadline::never();
  EXPECT_TRUE(d.is_never());
  EXPECT_FALSE(d.expired());
  EXPECT_EQ(d.remaining(), Clock::duration::max());
  EXPECT_TRUE(Deadline::after(std::optional<Seconds>()).is_never());
}

TEST(DeadlineTest, AfterExpires) {
  const Deadline d = Deadline::after(10ms);
  EXPECT_FALSE(d.is_never());
  EXPECT_LE(d.remaining(), std::chrono::duration_cast<Clock::duration>(10ms));
  std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(d.expired());
  EXPECT_EQ(d.remaining(), Clock::duration::zero());
}

TEST(DeadlineTest, NegativeIsExpiredAndHugeSaturates) {
  EXPECT_TRUE(Deadline::after(Seconds(-1)).expired());
  EXPECT_TRUE(Deadline::after(Seconds(1e300)).is_never());
}

}  // namespace
}  // namespace weft
