#include "weft/dist/engine/tuning.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/scoped_env.h"
#include "weft/base/error.h"
#include "weft/base/system.h"
#include "weft/dist/process_group.h"
#include "weft/dist/run_threads.h"

namespace weft::dist {
namespace {

using ::testing::HasSubstr;

using weft::test::ScopedEnv;  // make test sets WEFT_COLLECTIVE_TABLE=off

CollectiveTuning changed() {
  CollectiveTuning t;
  t.one_step_all_reduce_max = 4096;
  t.single_copy_all_reduce_min = 1;
  t.single_copy_all_reduce_max = 0;  // never
  t.single_copy_broadcast_min = 128 << 10;
  t.single_copy_broadcast_max = std::size_t{64} << 20;
  t.single_copy_all_gather_min = 64 << 10;
  t.single_copy_all_gather_max = 512 << 10;
  t.ring_all_reduce_min = 0;
  t.in_place_all_reduce_min = 64 << 10;
  t.in_place_broadcast_min = 1;
  return t;
}

TEST(TuningTest, TableRoundTrips) {
  const TuningKey key{"AMD EPYC 9B45", "shm", 4};
  TuningKey read;
  EXPECT_EQ(parse_table(format_table(key, changed()), &read), changed());
  EXPECT_EQ(read.cpu, key.cpu);
  EXPECT_EQ(read.backend, key.backend);
  EXPECT_EQ(read.ranks, key.ranks);
  EXPECT_NE(fingerprint(changed()), fingerprint(CollectiveTuning{}));
  EXPECT_NE(fingerprint(CollectiveTuning{}), 0);
}

TEST(TuningTest, MalformedTablesNameTheLine) {
  const std::string good = format_table({"x", "tcp", 2}, CollectiveTuning{});
  const auto fails_with = [](const std::string& text, const std::string& what) {
    try {
      parse_table(text, nullptr);
      ADD_FAILURE() << "accepted:\n" << text;
    } catch (const weft::InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr(what));
    }
  };
  fails_with(good + "colour = blue\n", "unknown name 'colour'");
  fails_with(good + "ranks = 3\n", "'ranks' given twice");
  fails_with("cpu = x\nbackend = tcp\nranks = 2\n", "no 'one_step_all_reduce_max'");
  fails_with("cpu = x\nranks = -1\n", "line 2: '-1' is not a whole number");
  fails_with("cpu = x\nranks = 99999999999999999999\n", "line 2");
  fails_with("cpu = x\nbackend tcp\n", "line 2: expected 'name = value'");
}

TEST(TuningTest, PathFollowsTheCacheAndTheEnvironment) {
  {
    const ScopedEnv cache("XDG_CACHE_HOME", "/tmp/weft-cache");
    EXPECT_EQ(default_table_path({"AMD EPYC 9B45 (x)", "shm", 2}),
              "/tmp/weft-cache/weft/collectives/shm-2-AMD-EPYC-9B45-x.table");
    const ScopedEnv off("WEFT_COLLECTIVE_TABLE", "off");
    EXPECT_FALSE(table_path({"c", "shm", 2}).has_value());
  }
  const ScopedEnv path("WEFT_COLLECTIVE_TABLE", "/tmp/t.table");
  EXPECT_EQ(table_path({"c", "shm", 2}).value(), "/tmp/t.table");
}

// A table for this machine reaches every group's engine, and the collectives stay exact
// under it (here: the ring from the first byte); one for another machine is ignored.
TEST(TuningTest, JobsReadTheTableForTheirMachine) {
  const auto dir = std::filesystem::temp_directory_path() / "weft_tuning_test";
  std::filesystem::create_directories(dir);
  const auto path = dir / "thread.table";
  const ScopedEnv table("WEFT_COLLECTIVE_TABLE", path.c_str());
  for (const bool this_machine : {true, false}) {
    write_table(path, {this_machine ? cpu_model() : "another CPU", "thread", 3}, changed());
    run_threads(3, [&](ProcessGroup& pg) {
      const CollectiveTuning expected = this_machine ? changed() : CollectiveTuning{};
      EXPECT_EQ(pg.tuning(), expected);
      auto sub = pg.new_group({0, 1, 2});
      EXPECT_EQ(sub->tuning(), expected);
      std::vector<float> v(1000, static_cast<float>(pg.rank() + 1));
      pg.all_reduce(v, ReduceOp::kSum);
      for (float x : v) ASSERT_EQ(x, 6.0f);
    });
  }
  std::filesystem::remove_all(dir);
}

// A table that lacks a threshold (one written before that threshold existed) is not used,
// and the warning says how to replace it.
TEST(TuningTest, ATableMissingAThresholdSaysToMeasureAgain) {
  const auto path = std::filesystem::temp_directory_path() / "weft_tuning_old.table";
  const TuningKey key{cpu_model(), "shm", 2};
  std::string text = format_table(key, CollectiveTuning{});
  text.erase(text.find("single_copy_all_gather_max"));
  std::ofstream(path) << text;
  const ScopedEnv table("WEFT_COLLECTIVE_TABLE", path.c_str());
  std::string why;
  EXPECT_FALSE(read_table(key, &why).has_value());
  EXPECT_THAT(why, HasSubstr("no 'single_copy_all_gather_max'"));
  EXPECT_THAT(why, HasSubstr("weft-bench --tune"));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace weft::dist
