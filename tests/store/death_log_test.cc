// The deaths weftrun records in a job's store, read back through the attempt's prefix as the
// job's processes read them.
#include "weft/store/death_log.h"

#include <gtest/gtest.h>

#include "weft/base/error.h"
#include "weft/store/hash_store.h"
#include "weft/store/prefix_store.h"

namespace weft::store {
namespace {

TEST(DeathLogTest, ReadsEachAttemptsDeathsInOrder) {
  auto job = std::make_shared<HashStore>();
  PrefixStore attempt1(attempt_prefix(1), job);
  record_death(*job, 0, 3);  // an earlier attempt's
  record_death(*job, 1, 2);
  DeathLog log;
  log.refresh(attempt1, 4);
  EXPECT_EQ(log.counted(), 1);
  record_death(*job, 1, 0);
  record_death(*job, 1, 2);
  log.refresh(attempt1, 4);
  EXPECT_EQ(log.counted(), 3);
  EXPECT_TRUE(log.died_after(2, 0));
  EXPECT_TRUE(log.died_after(2, 2));  // the third death is rank 2's again
  EXPECT_FALSE(log.died_after(0, 2));
  EXPECT_FALSE(log.died_after(3, 0));
  EXPECT_FALSE(log.died_after(2, 3));
}

TEST(DeathLogTest, ADeathCountedBeforeItsRankIsWrittenIsReadLater) {
  HashStore attempt;
  attempt.add("deaths/count", 1);
  DeathLog log;
  log.refresh(attempt, 2);
  EXPECT_EQ(log.counted(), 1);  // counted, its rank not read yet
  EXPECT_FALSE(log.died_after(1, 0));
  attempt.add("deaths/count", 1);  // the second death is written whole; it waits for the first
  attempt.set("deaths/2", "0");
  log.refresh(attempt, 2);
  EXPECT_EQ(log.counted(), 2);
  EXPECT_FALSE(log.died_after(0, 0));
  attempt.set("deaths/1", "1");
  log.refresh(attempt, 2);
  EXPECT_TRUE(log.died_after(1, 0));
  EXPECT_TRUE(log.died_after(0, 1));
}

TEST(DeathLogTest, WhatTheStoreHoldsIsCheckedBeforeUse) {
  for (const char* bad : {"2", "-1", "1x", ""}) {
    HashStore attempt;
    attempt.add("deaths/count", 1);
    attempt.set("deaths/1", bad);
    DeathLog log;
    EXPECT_THROW(log.refresh(attempt, 2), Error) << bad;
  }
}

}  // namespace
}  // namespace weft::store
