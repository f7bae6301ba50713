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

TEST(DeadlineTest, AfterFirstUseStartsWhenFirstAsked) {
  const Deadline d = Deadline::after_first_use(20ms);
  std::this_thread::sleep_for(40ms);
  EXPECT_FALSE(d.expired());  // started by this question
  EXPECT_GT(d.remaining(), Clock::duration::zero());
  std::this_thread::sleep_for(40ms);
  EXPECT_TRUE(d.expired());
  EXPECT_TRUE(Deadline::after_first_use(std::nullopt).is_never());
}

TEST(DeadlineTest, CopiesOfAnUnstartedDeadlineShareOneStart) {
  const Deadline d = Deadline::after_first_use(1s);
  const Deadline copy = d;  // starts d
  EXPECT_EQ(copy.when(), d.when());
  Deadline assigned = Deadline::never();
  const Deadline other = Deadline::after_first_use(1s);
  assigned = other;
  EXPECT_EQ(assigned.when(), other.when());
  EXPECT_FALSE(assigned.is_never());
}

}  // namespace
}  // namespace weft
