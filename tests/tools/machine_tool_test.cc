// weft-bench machine, weft-estimate --machine and weft-plan, run as the built binaries: the
// costs the bench writes read back, the step time weft-estimate prints and writes is
// estimate_step_time's for the job weft-train would run, and weft-plan's first choice plan()'s.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "weft/estimate/plan.h"
#include "weft/estimate/step_time.h"
#include "weft/train/auto_layout.h"
#include "weft/train/config.h"
#include "weft/train/trainer.h"

namespace weft {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kConfig = std::string(WEFT_SOURCE_DIR) + "/configs/debug.toml";

TEST(MachineToolTest, TheBenchsCostsGiveWeftEstimateItsStepTime) {
  const test::TempDir dir("weft-machine");
  const std::string machine = (dir.path() / "machine.json").string();
  const test::Finished bench =
      test::run({WEFT_BENCH_TOOL, "machine", "--threads", "2", "--out", machine}, {}, Seconds(150));
  ASSERT_EQ(bench.code, 0) << bench.err;
  const estimate::Machine m = estimate::read_machine(machine);
  EXPECT_EQ(m.ranks, 2);
  EXPECT_GT(m.float32.product_gflops, 0);
  EXPECT_EQ(m.backend("thread").ranks, 2);
  EXPECT_GT(m.backend("thread").op("all_reduce").beta_s_per_byte, 0);

  const std::string json = (dir.path() / "estimate.json").string();
  const std::string svg = (dir.path() / "step.svg").string();
  const test::Finished f = test::run(
      {WEFT_ESTIMATE_TOOL, "--config", kConfig, "--nproc", "2", "--machine", machine, "--backend",
       "thread", "--parallelism.pipeline_parallel_degree", "2",
       "--parallelism.pipeline_parallel_microbatch_size", "2", "--json", json, "--svg", svg});
  ASSERT_EQ(f.code, 0) << f.err;
  EXPECT_THAT(f.out, HasSubstr("step time per pipeline rank, estimated (ms):"));
  const train::Config config =
      train::load_config(kConfig, {{"parallelism.pipeline_parallel_degree", "2"},
                                   {"parallelism.pipeline_parallel_microbatch_size", "2"}});
  estimate::Placement placement;
  placement.backend = "thread";
  const estimate::StepEstimate expected = estimate::estimate_step_time(
      train::estimate_job(config, train::parallel_options(config, 2)), m, placement);
  const nlohmann::json written = nlohmann::json::parse(std::ifstream(json));
  EXPECT_DOUBLE_EQ(written["step_time"]["step"].get<double>(), expected.seconds);
  ASSERT_EQ(written["step_time"]["pipeline_ranks"].size(), 2u);
  EXPECT_GT(written["step_time"]["pipeline_ranks"][0]["pipeline_idle"].get<double>(), 0);
  std::ostringstream picture;
  picture << std::ifstream(svg).rdbuf();
  EXPECT_THAT(picture.str(), StartsWith("<svg"));

  // weft-plan on the same costs: its first choice is plan()'s, as flags weft-train reads.
  const std::string plan_json = (dir.path() / "plan.json").string();
  const test::Finished p =
      test::run({WEFT_PLAN_TOOL, "--config", kConfig, "--nproc", "2", "--machine", machine,
                 "--backend", "thread", "--memory-per-rank", "1", "--json", plan_json});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("the fastest, as weft-train's flags:\n  --parallelism."));
  const train::Config base = train::load_config(kConfig, {});
  const estimate::Plan expected_plan =
      estimate::plan(train::plan_request(base, 2, std::int64_t{1} << 30), m, placement);
  const nlohmann::json chosen = nlohmann::json::parse(std::ifstream(plan_json));
  ASSERT_FALSE(expected_plan.best.empty());
  EXPECT_EQ(chosen["weighed"], expected_plan.weighed);
  EXPECT_DOUBLE_EQ(chosen["best"][0]["step_seconds"].get<double>(),
                   expected_plan.best[0].time.seconds);
  std::vector<std::pair<std::string, std::string>> keys;
  for (const auto& [key, value] : chosen["best"][0]["keys"].items())
    keys.emplace_back(key, value.get<std::string>());
  EXPECT_EQ(train::parallel_options(train::load_config(kConfig, keys), 2).dims.mesh_dims(),
            expected_plan.best[0].job.options.dims.mesh_dims());
  const test::Finished tight =
      test::run({WEFT_PLAN_TOOL, "--config", kConfig, "--nproc", "2", "--machine", machine,
                 "--backend", "thread", "--memory-per-rank", "0.01"});
  EXPECT_EQ(tight.code, 2);
  EXPECT_THAT(tight.err, HasSubstr("no layout fits"));
}

TEST(MachineToolTest, MistakesAreExitCodeTwoWithTheReason) {
  const test::TempDir dir("weft-machine");
  const test::Finished no_out = test::run({WEFT_BENCH_TOOL, "machine", "--threads", "2"});
  EXPECT_EQ(no_out.code, 2);
  EXPECT_THAT(no_out.err, HasSubstr("--out"));
  const test::Finished svg_alone =
      test::run({WEFT_ESTIMATE_TOOL, "--config", kConfig, "--svg", "x.svg"});
  EXPECT_EQ(svg_alone.code, 2);
  EXPECT_THAT(svg_alone.err, HasSubstr("give --machine"));
  const std::string bad = (dir.path() / "bad.json").string();
  std::ofstream(bad) << "{}";
  const test::Finished unreadable =
      test::run({WEFT_ESTIMATE_TOOL, "--config", kConfig, "--machine", bad});
  EXPECT_EQ(unreadable.code, 2);
  EXPECT_THAT(unreadable.err, HasSubstr("bad.json"));
}

}  // namespace
}  // namespace weft
