// StragglerWatch's rule on made-up windows, and weft-train under weftrun naming a rank whose
// core it shares with a busy loop.
#include "weft/train/straggler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <string>

#include "tests/support/subprocess.h"

namespace weft::train {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(StragglerWatchTest, NamesTheRankTheOthersWaitForOnceItPersists) {
  StragglerWatch watch;
  // Rank 2 waits least; the others 0.5 s more in windows of 2 s (25 %).
  EXPECT_FALSE(watch.observe({0.6, 0.7, 0.1, 0.65}, 2, 1, 10));
  EXPECT_FALSE(watch.observe({0.6, 0.7, 0.1, 0.65}, 2, 11, 20));
  const auto report = watch.observe({0.6, 0.7, 0.1, 0.65}, 2, 21, 30);
  ASSERT_TRUE(report);
  EXPECT_THAT(*report, HasSubstr("rank 2 is slow: in steps 1-30 every other rank waited at "
                                 "least 1.50 s (25% of the steps' time) longer"));
  EXPECT_FALSE(watch.observe({0.6, 0.7, 0.1, 0.65}, 2, 31, 40));  // once per rank
}

TEST(StragglerWatchTest, BalancedOrChangingRanksAreNotReported) {
  StragglerWatch watch;
  for (int w = 0; w < 10; ++w) EXPECT_FALSE(watch.observe({0.30, 0.25, 0.32}, 2, w, w));
  // A different rank behind in each window: no streak.
  for (int w = 0; w < 10; ++w) {
    EXPECT_FALSE(watch.observe(
        w % 2 == 0 ? std::vector<double>{0.1, 0.9} : std::vector<double>{0.9, 0.1}, 2, w, w));
  }
  EXPECT_FALSE(watch.observe({0.5}, 2, 1, 1));  // one rank
}

// Rank 1's core is shared with a busy loop (weftrun --bind-to core puts rank r on the r-th
// CPU the job may use): weft-train names rank 1.
TEST(StragglerTrainTest, WeftTrainNamesTheRankOnABusyCore) {
  cpu_set_t mine;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(mine), &mine), 0);
  int second = -1;
  for (int c = 0, seen = 0; c < CPU_SETSIZE && second < 0; ++c) {
    if (CPU_ISSET(c, &mine) && seen++ == 1) second = c;
  }
  if (second < 0) GTEST_SKIP() << "needs 2 CPUs";
  test::Subprocess busy(
      {"/usr/bin/taskset", "-c", std::to_string(second), "/bin/sh", "-c", "while :; do :; done"});
  const test::Finished r =
      test::run({WEFT_RUN_TOOL,
                 "--nproc-per-node",
                 "2",
                 "--bind-to",
                 "core",
                 WEFT_TRAIN_TOOL,
                 "--config",
                 std::string(WEFT_SOURCE_DIR) + "/configs/debug.toml",
                 "--training.dataset_path",
                 std::string(WEFT_SOURCE_DIR) + "/data/tinyshakespeare.txt",
                 "--training.steps",
                 "20",
                 "--training.batch_size",
                 "4",
                 "--metrics.log_freq",
                 "2",
                 "--checkpoint.enable",
                 "false",
                 "--validation.enable",
                 "false"},
                {{"WEFT_JOB_TOKEN", std::nullopt}, {"WEFT_BACKEND", std::nullopt}}, Seconds(120));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("rank 1 is slow"));
  EXPECT_THAT(r.out, Not(HasSubstr("rank 0 is slow")));
}

}  // namespace
}  // namespace weft::train
