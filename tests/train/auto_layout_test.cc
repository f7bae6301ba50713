// A planned layout written as configuration keys reads back as the same layout: what weft-plan
// prints for weft-train, and what parallelism.auto_machine trains with.
#include "weft/train/auto_layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tests/support/temp_dir.h"
#include "weft/train/trainer.h"

namespace weft::train {
namespace {

using ::testing::HasSubstr;

const std::string kConfig = std::string(WEFT_SOURCE_DIR) + "/configs/debug.toml";

estimate::Job planned_layout() {
  estimate::Job job =
      estimate_job(load_config(kConfig, {}), parallel_options(load_config(kConfig, {}), 1));
  job.options.dims = {.pp = 2, .dp_replicate = 1, .dp_shard = 2, .cp = 1, .tp = 2};
  job.options.fsdp_mode = parallel::ShardingMode::kZero2;
  job.options.pipeline.schedule = "ZBVZeroBubble";
  job.options.pipeline.microbatches = 4;
  job.batch = 8;
  job.activation_checkpointing = true;
  return job;
}

void expect_layout(const Config& config, const estimate::Job& job) {
  const parallel::ParallelOptions o = parallel_options(config, job.options.dims.product());
  EXPECT_EQ(o.dims.mesh_dims(), job.options.dims.mesh_dims());
  EXPECT_EQ(o.dims.dp_replicate, job.options.dims.dp_replicate);
  EXPECT_EQ(o.fsdp_mode, job.options.fsdp_mode);
  EXPECT_EQ(o.pipeline.schedule, job.options.pipeline.schedule);
  EXPECT_EQ(o.pipeline.microbatches, job.options.pipeline.microbatches);
  EXPECT_EQ(config.training.batch_size, job.batch);
  EXPECT_EQ(config.training.activation_checkpointing, job.activation_checkpointing);
}

TEST(AutoLayoutTest, TheKeysReadBackAsTheLayout) {
  const estimate::Job job = planned_layout();
  std::vector<std::pair<std::string, std::string>> keys = layout_keys(job);
  expect_layout(load_config(kConfig, keys), job);
  expect_layout(with_layout(load_config(kConfig, {}), job), job);
}

TEST(AutoLayoutTest, TheGlobalBatchIsTheConfiguredOne) {
  const Config config = load_config(kConfig, {{"parallelism.data_parallel_shard_degree", "2"}});
  const estimate::PlanRequest r = plan_request(config, 4, 0);
  EXPECT_EQ(r.global_batch, 8 * 4);  // dp_shard 2, and dp_replicate -1 takes the other 2
  EXPECT_EQ(r.world, 4);
}

TEST(AutoLayoutTest, AnUnreadableMachineIsAConfigError) {
  const test::TempDir dir("weft-auto");
  const std::string bad = (dir.path() / "machine.json").string();
  std::ofstream(bad) << "{";
  std::ostringstream out;
  try {
    with_planned_layout(load_config(kConfig, {{"parallelism.auto_machine", bad}}), nullptr, 1, out);
    FAIL() << "read a bad machine file";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("parallelism.auto_machine"));
    EXPECT_THAT(e.what(), HasSubstr(bad));
  }
  const Config untouched = with_planned_layout(load_config(kConfig, {}), nullptr, 1, out);
  EXPECT_EQ(untouched.training.batch_size, 8);
  EXPECT_TRUE(out.str().empty());
}

}  // namespace
}  // namespace weft::train
