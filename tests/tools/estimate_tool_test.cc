// weft-estimate, run as the built binary: the figures it prints and writes as JSON are
// estimate_memory's for the configuration weft-train would read, and a bad configuration or
// layout is exit code 2 with the reason.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "weft/estimate/memory_estimate.h"
#include "weft/train/config.h"
#include "weft/train/trainer.h"

namespace weft {
namespace {

using ::testing::HasSubstr;

const std::string kConfig = std::string(WEFT_SOURCE_DIR) + "/configs/debug.toml";

TEST(EstimateToolTest, WritesEstimateMemorysFiguresForEveryRank) {
  const test::TempDir dir("weft-estimate");
  const std::string json = (dir.path() / "estimate.json").string();
  const test::Finished f = test::run({WEFT_ESTIMATE_TOOL, "--config", kConfig, "--nproc", "4",
                                      "--parallelism.pipeline_parallel_degree", "2",
                                      "--parallelism.tensor_parallel_degree", "2", "--json", json});
  ASSERT_EQ(f.code, 0) << f.err;
  EXPECT_THAT(f.out, HasSubstr("dp_shard 1 x cp 1 x tp 2 x pp 2 = 4 ranks"));
  EXPECT_THAT(f.out, HasSubstr("  0-1 "));  // ranks of one stage share a line
  EXPECT_THAT(f.out, HasSubstr("  2-3 "));
  const train::Config config = train::load_config(
      kConfig,
      {{"parallelism.pipeline_parallel_degree", "2"}, {"parallelism.tensor_parallel_degree", "2"}});
  const std::vector<estimate::RankMemory> expected =
      estimate::estimate_memory(train::estimate_job(config, train::parallel_options(config, 4)));
  const nlohmann::json written = nlohmann::json::parse(std::ifstream(json));
  ASSERT_EQ(written["ranks"].size(), expected.size());
  for (std::size_t r = 0; r < expected.size(); ++r) {
    const nlohmann::json& m = written["ranks"][r];
    EXPECT_EQ(m["rank"], static_cast<int>(r));
    EXPECT_EQ(m["stage"], expected[r].stage);
    EXPECT_EQ(m["activations"], expected[r].activations);
    EXPECT_EQ(m["total"], expected[r].total());
  }
}

TEST(EstimateToolTest, ABadConfigurationOrLayoutIsExitCodeTwo) {
  const test::Finished key =
      test::run({WEFT_ESTIMATE_TOOL, "--config", kConfig, "--trainig.steps", "3"});
  EXPECT_EQ(key.code, 2);
  EXPECT_THAT(key.err, HasSubstr("unknown section [trainig]"));
  const test::Finished heads = test::run(
      {WEFT_ESTIMATE_TOOL, "--config", kConfig, "--parallelism.tensor_parallel_degree", "3"});
  EXPECT_EQ(heads.code, 2);
  EXPECT_THAT(heads.err, HasSubstr("weft-estimate: "));
  const test::Finished stages = test::run(
      {WEFT_ESTIMATE_TOOL, "--config", kConfig, "--parallelism.pipeline_parallel_degree", "8"});
  EXPECT_EQ(stages.code, 2);
  EXPECT_THAT(stages.err, HasSubstr("4 layers cannot make 8 stages"));
}

}  // namespace
}  // namespace weft
