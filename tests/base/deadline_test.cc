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
  const Deadline d = Deadline::after_first_use(200ms);
  std::this_thread::sleep_for(250ms);
  const auto before = Clock::now();
  const auto when = d.when();  // started by this question
  EXPECT_GE(when, before + std::chrono::duration_cast<Clock::duration>(200ms));
  std::this_thread::sleep_for(250ms);
  EXPECT_TRUE(d.expired());
  EXPECT_TRUE(Deadline::after_first_use(std::nullopt).is_never());
}

TEST(DeadlineTest, CopiesOfAnUnstartedDeadlineShareOneStart) {
  const Deadline d = Deadline::after_first_use(1s);
  const Deadline copy = d;  // starts d
  EXPECT_EQ(copy.when(), d.when());
  Deadline moved = Deadline::after_first_use(1s);
  std::this_thread::sleep_for(20ms);
  const auto before = Clock::now();
  const Deadline target = std::move(moved);  // still unstarted
  EXPECT_GE(target.when(), before + std::chrono::duration_cast<Clock::duration>(1s));
  Deadline assigned = Deadline::never();
  const Deadline other = Deadline::after_first_use(1s);
  assigned = other;
  EXPECT_EQ(assigned.when(), other.when());
  EXPECT_FALSE(assigned.is_never());
}

// budget() tells an unstarted deadline's whole timeout and leaves it unstarted; a started
// one's budget is what remains; never()'s is unbounded, a huge timeout's saturates.
TEST(DeadlineTest, BudgetLeavesAnUnstartedDeadlineUnstarted) {
  const Deadline d = Deadline::after_first_use(200ms);
  EXPECT_EQ(d.budget(), std::chrono::duration_cast<Clock::duration>(200ms));
  std::this_thread::sleep_for(250ms);
  const auto before = Clock::now();
  EXPECT_GE(d.when(), before + std::chrono::duration_cast<Clock::duration>(200ms));
  EXPECT_LE(d.budget(), std::chrono::duration_cast<Clock::duration>(200ms));
  EXPECT_EQ(Deadline::never().budget(), Clock::duration::max());
  EXPECT_EQ(Deadline::after_first_use(Seconds(1e300)).budget(), Clock::duration::max());
  EXPECT_LE(Deadline::after(10ms).budget(), std::chrono::duration_cast<Clock::duration>(10ms));
}

// The coarse clock is steady_clock's, a tick behind at most.
TEST(DeadlineTest, CoarseNowTracksTheSteadyClock) {
  const auto fine = Clock::now();
  const auto coarse = coarse_now();
  EXPECT_LE(coarse, Clock::now());
  EXPECT_GE(coarse, fine - std::chrono::duration_cast<Clock::duration>(50ms));
}

}  // namespace
}  // namespace weft
