// ElasticMembership: the rounds a job's processes agree on through a store, as ranks die and
// join (ranks as threads over one store).
#include "weft/dist/elastic.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "weft/base/error.h"
#include "weft/store/death_log.h"
#include "weft/store/hash_store.h"
#include "weft/store/prefix_store.h"

namespace weft::dist {
namespace {

constexpr Seconds kTimeout{10.0};

std::shared_ptr<store::Store> job_store() {
  auto s = std::make_shared<store::HashStore>();
  s->set_timeout(kTimeout);
  return s;
}

ElasticMembership process(const std::shared_ptr<store::Store>& s, int rank, int size = 4) {
  return ElasticMembership(s, rank, size, kTimeout);
}

// Each of `ranks` meets the failure of `broken` (its settle window `settle`), in its thread.
std::vector<ElasticRound> survive(const std::shared_ptr<store::Store>& s,
                                  const ElasticRound& broken, const std::vector<int>& ranks,
                                  Seconds settle) {
  std::vector<std::future<ElasticRound>> rounds;
  for (const int r : ranks) {
    rounds.push_back(std::async(std::launch::async,
                                [=] { return process(s, r).after_failure(broken, settle); }));
  }
  std::vector<ElasticRound> got;
  for (auto& f : rounds) got.push_back(f.get());
  return got;
}

TEST(ElasticTest, SurvivorsFormTheNextRoundWithoutTheDead) {
  const auto s = job_store();
  const ElasticRound first = process(s, 0).first();
  ASSERT_EQ(first, (ElasticRound{0, {0, 1, 2, 3}}));
  const auto began = Clock::now();
  for (const ElasticRound& r : survive(s, first, {0, 1, 3}, Seconds(0.2))) {
    EXPECT_EQ(r, (ElasticRound{1, {0, 1, 3}}));
    EXPECT_EQ(r.rank_of(3), 2);
    EXPECT_EQ(r.rank_of(2), -1);
  }
  EXPECT_GE(Seconds(Clock::now() - began).count(), 0.2);  // waited for rank 2 to arrive
}

TEST(ElasticTest, ARoundEveryMemberArrivesAtClosesAtOnce) {
  const auto s = job_store();
  const auto began = Clock::now();
  for (const ElasticRound& r : survive(s, {3, {0, 2}}, {0, 2}, Seconds(5.0))) {
    EXPECT_EQ(r, (ElasticRound{4, {0, 2}}));
  }
  EXPECT_LT(Seconds(Clock::now() - began).count(), 4.0);
}

TEST(ElasticTest, ASurvivorArrivingLateIsLeftOutAndJoinsLater) {
  const auto s = job_store();
  const ElasticRound first = process(s, 0).first();
  (void)survive(s, first, {0, 1}, Seconds(0.05));
  const ElasticRound late = process(s, 3).after_failure(first, Seconds(0.05));
  EXPECT_EQ(late, (ElasticRound{1, {0, 1}}));
  auto joined = std::async(std::launch::async, [&] { return process(s, 3).join(); });
  // Rank 0 of round 1 admits it at its next step boundary; none wait after that.
  std::optional<ElasticRound> grown;
  while (!grown) grown = process(s, 0).admit(late);
  EXPECT_EQ(*grown, (ElasticRound{2, {0, 1, 3}}));
  EXPECT_EQ(joined.get(), grown);
  EXPECT_FALSE(process(s, 0).admit(*grown));
}

TEST(ElasticTest, SurvivorsPassOverAGrowthTheyTookNoPartIn) {
  const auto s = job_store();
  const ElasticRound one{1, {0, 1}};
  auto joined = std::async(std::launch::async, [&] { return process(s, 2).join(); });
  std::optional<ElasticRound> grown;
  while (!grown) grown = process(s, 0).admit(one);
  ASSERT_EQ(*grown, (ElasticRound{2, {0, 1, 2}}));
  // Rank 1 died before it heard of round 2; rank 0 meets the failure in round 1 as well.
  for (const ElasticRound& r : survive(s, one, {0}, Seconds(0.05))) {
    EXPECT_EQ(r, (ElasticRound{3, {0}}));
  }
  EXPECT_EQ(joined.get(), grown);
}

TEST(ElasticTest, AdmittingLosesToAFailureThatClaimedTheRound) {
  const auto s = job_store();
  const ElasticRound one{1, {0, 1, 3}};
  (void)survive(s, one, {0, 1}, Seconds(0.05));  // round 2 is {0, 1}
  auto joined = std::async(std::launch::async, [&] { return process(s, 2).join(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(process(s, 0).admit(one));  // rank 0 of round 1 was too late
  std::optional<ElasticRound> grown;
  while (!grown) grown = process(s, 0).admit({2, {0, 1}});
  EXPECT_EQ(*grown, (ElasticRound{3, {0, 1, 2}}));
  EXPECT_EQ(joined.get(), grown);
}

TEST(ElasticTest, AProcessWaitingToJoinGoesHomeWhenTheJobFinishes) {
  const auto s = job_store();
  auto joined = std::async(std::launch::async, [&] { return process(s, 1).join(); });
  process(s, 0).finish();
  EXPECT_FALSE(joined.get());
}

TEST(ElasticTest, WaitingToJoinHasADeadline) {
  const auto s = job_store();
  ElasticMembership p(s, 1, 2, Seconds(0.1));
  EXPECT_THROW((void)p.join(), TimeoutError);
}

// The job's store under attempt 0's prefix, as connect_job_store gives it, and the store
// weftrun records deaths in.
struct JobStores {
  std::shared_ptr<store::HashStore> job = std::make_shared<store::HashStore>();
  std::shared_ptr<store::Store> attempt =
      std::make_shared<store::PrefixStore>(store::attempt_prefix(0), job);
  void died(int rank) { store::record_death(*job, 0, rank); }
};

TEST(ElasticTest, SurvivorsCloseTheRoundOnceTheMissingAreRecordedDead) {
  JobStores s;
  s.job->set_timeout(kTimeout);
  s.died(2);
  const auto began = Clock::now();
  for (const ElasticRound& r : survive(s.attempt, {0, {0, 1, 2, 3}}, {0, 1, 3}, Seconds(30.0))) {
    EXPECT_EQ(r, (ElasticRound{1, {0, 1, 3}, 1}));
  }
  EXPECT_LT(Seconds(Clock::now() - began).count(), 5.0);
}

TEST(ElasticTest, ADeathRecordedBeforeARoundFormedIsAPredecessors) {
  JobStores s;
  s.job->set_timeout(kTimeout);
  s.died(1);  // rank 1's first process; round 1's rank 1 is its replacement
  const auto began = Clock::now();
  for (const ElasticRound& r : survive(s.attempt, {1, {0, 1}, 1}, {0}, Seconds(0.3))) {
    EXPECT_EQ(r, (ElasticRound{2, {0}, 1}));
  }
  EXPECT_GE(Seconds(Clock::now() - began).count(), 0.3);  // waited for rank 1 to arrive
}

TEST(ElasticTest, JoiningFailsAtOnceWhenEveryProcessHoldingTheStateDied) {
  JobStores s;
  s.job->set_timeout(kTimeout);
  s.died(1);
  (void)survive(s.attempt, process(s.attempt, 0, 2).first(), {0}, Seconds(5.0));  // round 1: {0}
  auto joined = std::async(std::launch::async, [&] { return process(s.attempt, 1, 2).join(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto began = Clock::now();
  s.died(0);  // before it admitted rank 1's replacement
  try {
    (void)joined.get();
    ADD_FAILURE() << "joined a job no process held the state of";
  } catch (const TimeoutError&) {
    ADD_FAILURE() << "waited out its admission";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("died before rank 1 was admitted"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(Seconds(Clock::now() - began).count(), 5.0);
}

// A replacement admitted after its predecessor's death, which then survives another death:
// the predecessor's death is not its own, so it stays in the round.
TEST(ElasticTest, AnAdmittedReplacementIsNotTakenForItsDeadPredecessor) {
  JobStores s;
  s.job->set_timeout(kTimeout);
  s.died(1);
  const std::vector<ElasticRound> one =
      survive(s.attempt, process(s.attempt, 0).first(), {0, 2, 3}, Seconds(5.0));
  ASSERT_EQ(one[0], (ElasticRound{1, {0, 2, 3}, 1}));
  auto joined = std::async(std::launch::async, [&] { return process(s.attempt, 1).join(); });
  std::optional<ElasticRound> grown;
  while (!grown) grown = process(s.attempt, 0).admit(one[0]);
  ASSERT_EQ(*grown, (ElasticRound{2, {0, 1, 2, 3}, 1}));
  EXPECT_EQ(joined.get(), grown);
  s.died(3);
  const auto began = Clock::now();
  for (const ElasticRound& r : survive(s.attempt, *grown, {0, 1, 2}, Seconds(30.0))) {
    EXPECT_EQ(r, (ElasticRound{3, {0, 1, 2}, 2}));
  }
  EXPECT_LT(Seconds(Clock::now() - began).count(), 5.0);
}

TEST(ElasticTest, WhatTheStoreHoldsIsCheckedBeforeUse) {
  const auto s = job_store();
  s->set("elastic/round1", "s0:0,7");
  EXPECT_THROW((void)process(s, 0).after_failure({0, {0, 1}}, Seconds(0.01)), Error);
  s->set("elastic/round2", "s0:1,0");
  EXPECT_THROW((void)process(s, 0).after_failure({1, {0, 1}}, Seconds(0.01)), Error);
  s->set("elastic/round3", "x");
  EXPECT_THROW((void)process(s, 0).after_failure({2, {0, 1}}, Seconds(0.01)), Error);
  EXPECT_THROW(ElasticMembership(s, 4, 4, kTimeout), InvalidArgument);
}

}  // namespace
}  // namespace weft::dist
