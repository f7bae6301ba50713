// The planner against estimating layouts one by one: its first choice is the fastest of them,
// every choice fits the budget and keeps the global batch, and layouts that cannot run the
// model are never offered.
#include "weft/estimate/plan.h"

#include <gtest/gtest.h>

#include "tests/estimate/described_machine.h"
#include "weft/base/error.h"

namespace weft::estimate {
namespace {

// Products at 100 GFLOP/s, memory at 20 GB/s, weft's kernels at 1 ns an element,
// collectives at alpha 20 us and beta 0.5 ns a byte.
Machine machine() {
  return test::described_machine(
      {.ranks = 2, .bandwidth_gbs = 20, .kernel_ns = 1, .link = {20e-6, 0.5e-9}});
}

PlanRequest request(int world) {
  PlanRequest r;
  r.base.model = test::debug_model();
  r.base.seq = 256;
  r.world = world;
  r.global_batch = 16;
  r.keep = 1000;
  return r;
}

std::int64_t peak(const Job& job) {
  std::int64_t most = 0;
  for (const RankMemory& m : estimate_memory(job)) most = std::max(most, m.total());
  return most;
}

TEST(PlanTest, TheFirstChoiceIsTheFastestOfTheLayoutsEstimatedOneByOne) {
  const PlanRequest r = request(2);
  const Plan p = plan(r, machine(), {});
  ASSERT_FALSE(p.best.empty());
  EXPECT_EQ(p.fitting, p.weighed);  // no budget
  for (std::size_t i = 1; i < p.best.size(); ++i)
    EXPECT_LE(p.best[i - 1].time.seconds, p.best[i].time.seconds);
  const auto layout = [&](parallel::ParallelDims dims, std::int64_t batch) {
    Job job = r.base;
    job.options.dims = dims;
    job.batch = batch;
    return job;
  };
  Job pipeline = layout({.pp = 2}, 16);
  pipeline.options.pipeline.microbatches = 8;
  for (const Job& job : {layout({.dp_replicate = 2}, 8), layout({.dp_shard = 2}, 8),
                         layout({.tp = 2}, 16), layout({.cp = 2}, 16), pipeline}) {
    EXPECT_LE(p.best[0].time.seconds, estimate_step_time(job, machine(), {}).seconds);
  }
}

TEST(PlanTest, EveryChoiceFitsTheBudgetAndKeepsTheGlobalBatch) {
  PlanRequest r = request(4);
  const Plan all = plan(r, machine(), {});
  std::int64_t least = all.best[0].peak, most = 0;
  for (const Candidate& c : all.best)
    least = std::min(least, c.peak), most = std::max(most, c.peak);
  ASSERT_LT(least, most);
  r.memory_per_rank = (least + most) / 2;
  const Plan fitting = plan(r, machine(), {});
  EXPECT_EQ(fitting.weighed, all.weighed);
  EXPECT_LT(fitting.fitting, all.fitting);
  for (const Candidate& c : fitting.best) {
    EXPECT_LE(c.peak, r.memory_per_rank);
    EXPECT_EQ(c.peak, peak(c.job));
    EXPECT_EQ(c.job.batch * c.job.options.dims.data_parallel(), r.global_batch);
    EXPECT_EQ(c.job.options.dims.product(), 4);
  }
  r.memory_per_rank = least - 1;
  const Plan none = plan(r, machine(), {});
  EXPECT_TRUE(none.best.empty());
  EXPECT_EQ(none.fitting, 0u);
}

TEST(PlanTest, LayoutsThatCannotRunTheModelAreNeverOffered) {
  PlanRequest r = request(3);  // 4 heads: no tensor parallelism of 3; 16 sequences: no dp 3
  r.global_batch = 15;
  const Plan p = plan(r, machine(), {});
  ASSERT_FALSE(p.best.empty());
  for (const Candidate& c : p.best) {
    EXPECT_NE(c.job.options.dims.tp, 3);
    EXPECT_NE(c.job.options.dims.cp, 3);  // 256 positions do not cut into 2 x 3 chunks
    EXPECT_EQ(c.job.options.dims.product(), 3);
  }
}

TEST(PlanTest, LayoutInvariantTrainingGetsDegreesThatDivideItsBlocks) {
  PlanRequest r = request(4);
  r.base.options.layout_invariant = true;
  r.base.options.feature_blocks = 2;   // TP 1 or 2
  r.base.options.sequence_blocks = 1;  // no context parallelism
  const Plan p = plan(r, machine(), {});
  ASSERT_FALSE(p.best.empty());
  for (const Candidate& c : p.best) {
    EXPECT_LE(c.job.options.dims.tp, 2);
    EXPECT_EQ(c.job.options.dims.cp, 1);
  }
}

TEST(PlanTest, ABadRequestSaysSo) {
  PlanRequest r = request(0);
  EXPECT_THROW(plan(r, machine(), {}), InvalidArgument);
}

}  // namespace
}  // namespace weft::estimate
