// The step-time model against figures computed independently: the FLOPs LlamaConfig counts,
// the alpha-beta formulas, the pipeline's simulation; and the machine's file and fits.
#include "weft/estimate/step_time.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "tests/estimate/described_machine.h"
#include "tests/support/temp_dir.h"
#include "weft/base/error.h"
#include "weft/parallel/pipeline_schedule.h"

namespace weft::estimate {
namespace {

using ::testing::HasSubstr;

constexpr double kRate = 100;  // GFLOP/s, every product

// Products at kRate, memory infinitely fast, weft's kernels free unless a test prices them,
// collectives at alpha 10 us and beta 1 ns a byte on "shm".
Machine synthetic(int cores = 2) {
  return test::described_machine({.cores = cores, .product_gflops = kRate});
}

Job debug_job() {
  Job job;
  job.model = test::debug_model();
  job.batch = 8;
  job.seq = 256;
  return job;
}

// Seconds of the products of one step on one process: the FLOPs LlamaConfig counts for
// training (6 x the products' parameters a token), without attention's.
double product_seconds(const Job& job) {
  const double attention = 12.0 * static_cast<double>(job.model.n_layers * job.model.dim * job.seq);
  const double tokens = static_cast<double>(job.batch * job.seq);
  return tokens * (job.model.flops_per_token(job.seq) - attention) / (kRate * 1e9);
}

TEST(StepTimeTest, OneProcessCostsTheModelsProductFlopsAtTheMeasuredRate) {
  const Job job = debug_job();
  const StepEstimate t = estimate_step_time(job, synthetic(), {});
  ASSERT_EQ(t.ranks.size(), 1u);
  EXPECT_NEAR(t.seconds, product_seconds(job), 1e-9);
  EXPECT_NEAR(t.ranks[0].backward, 2 * t.ranks[0].forward, 1e-9);
  EXPECT_EQ(t.ranks[0].blocking + t.ranks[0].background + t.ranks[0].pipeline_idle, 0);
  EXPECT_NEAR(t.tokens_per_second, 8 * 256 / t.seconds, 1e-6);
}

TEST(StepTimeTest, KernelsCostTheirNanosecondsPerElement) {
  const Job job = debug_job();
  Machine m = synthetic();
  m.float32.ns["rmsnorm_forward"] = 1;  // two a block and the final norm's, rows x dim each
  m.float32.ns["adamw"] = 2;            // every parameter once
  const StepEstimate t = estimate_step_time(job, m, {});
  const double rows = 8 * 256, norms = (2 * 4 + 1) * rows * 256 * 1e-9;
  double params = 0;
  for (const auto& [name, shape] : job.model.parameter_shapes()) {
    double n = 1;
    for (const std::int64_t d : shape) n *= static_cast<double>(d);
    params += n;
  }
  EXPECT_NEAR(t.ranks[0].optimizer, 2 * params * 1e-9, 1e-12);
  EXPECT_NEAR(t.seconds, product_seconds(job) + norms + 2 * params * 1e-9, 1e-9);
}

TEST(StepTimeTest, CheckpointingRunsEachBlocksForwardAgainInBackward) {
  Job job = debug_job();
  const StepEstimate plain = estimate_step_time(job, synthetic(), {});
  job.activation_checkpointing = true;
  const StepEstimate ckpt = estimate_step_time(job, synthetic(), {});
  const double head = 8.0 * 256 * 2 * 256 * 256 / (kRate * 1e9);  // the output layer's forward
  EXPECT_NEAR(ckpt.ranks[0].backward - plain.ranks[0].backward, plain.ranks[0].forward - head,
              1e-9);
}

TEST(StepTimeTest, TensorParallelismSplitsTheProductsAndAddsItsCollectives) {
  Job job = debug_job();
  job.options.dims.tp = 2;
  job.options.sequence_parallel = false;
  job.options.loss_parallel = false;
  const StepEstimate t = estimate_step_time(job, synthetic(), {});
  ASSERT_EQ(t.ranks.size(), 1u);
  EXPECT_NEAR(t.ranks[0].forward + t.ranks[0].backward, product_seconds(job) / 2, 1e-9);
  // Per block two all-reduces of rows x dim floats each way; the embedding all-reduces its
  // output, the head its input's gradient, and all-gathers the logits.
  const double rows = 8 * 256, block = rows * 256 * 4;
  const AlphaBeta ab{10e-6, 1e-9};
  const double expected = 4 * 4 * collective_seconds("all_reduce", ab, 2, block) +
                          2 * collective_seconds("all_reduce", ab, 2, block) +
                          collective_seconds("all_gather", ab, 2, rows * 256 * 4);
  EXPECT_NEAR(t.ranks[0].blocking, expected, 1e-12);
}

TEST(StepTimeTest, GroupsThatSpanHostsRunAtTheSlowerLink) {
  Job job = debug_job();
  job.options.dims.tp = 2;
  job.options.dims.dp_replicate = 2;
  Placement two_hosts;
  two_hosts.ranks_per_host = 2;
  two_hosts.between_hosts = AlphaBeta{50e-6, 10e-9};
  const Machine m = synthetic(/*cores=*/4);
  const StepEstimate one_host = estimate_step_time(job, m, {});
  const StepEstimate across = estimate_step_time(job, m, two_hosts);
  // TP's pairs stay on a host; DDP's replicas (2 ranks apart) cross the network.
  EXPECT_DOUBLE_EQ(across.ranks[0].blocking, one_host.ranks[0].blocking);
  const double gradients = across.ranks[0].background / one_host.ranks[0].background;
  EXPECT_GT(gradients, 5);
  two_hosts.ranks_per_host = 1;  // now TP's pairs cross it too
  EXPECT_GT(estimate_step_time(job, m, two_hosts).ranks[0].blocking, one_host.ranks[0].blocking);
}

TEST(StepTimeTest, DataParallelCollectivesHideOnlyWithACoreToSpare) {
  Job job = debug_job();
  job.options.dims.dp_replicate = 2;
  const StepEstimate busy = estimate_step_time(job, synthetic(/*cores=*/2), {});
  const RankTime& r = busy.ranks[0];
  double params = 0;
  for (const auto& [name, shape] : job.model.parameter_shapes()) {
    double n = 1;
    for (const std::int64_t d : shape) n *= static_cast<double>(d);
    params += n;
  }
  // One bucket: the whole model's gradients (under 25 MiB), all of it after backward.
  EXPECT_NEAR(r.background, collective_seconds("all_reduce", {10e-6, 1e-9}, 2, params * 4), 1e-12);
  EXPECT_EQ(r.exposed, r.background);
  EXPECT_EQ(estimate_step_time(job, synthetic(/*cores=*/8), {}).ranks[0].exposed, r.background);
  // Buckets of 1 MiB: with a core to spare all but the last hide behind backward.
  job.options.bucket_bytes = 1 << 20;
  const double buckets = std::ceil(params * 4 / (1 << 20));
  const StepEstimate spare = estimate_step_time(job, synthetic(/*cores=*/8), {});
  EXPECT_NEAR(spare.ranks[0].exposed, spare.ranks[0].background / buckets, 1e-12);
  EXPECT_LT(spare.seconds, estimate_step_time(job, synthetic(/*cores=*/2), {}).seconds);
}

TEST(StepTimeTest, DdpCopiesTheGradientsIntoItsBucketsAndBack) {
  Job job = debug_job();
  const Machine m = test::described_machine({.product_gflops = kRate, .bandwidth_gbs = 10});
  const double alone = estimate_step_time(job, m, {}).ranks[0].optimizer;
  job.options.dims.dp_replicate = 2;
  double params = 0;
  for (const auto& [name, shape] : job.model.parameter_shapes()) {
    double n = 1;
    for (const std::int64_t d : shape) n *= static_cast<double>(d);
    params += n;
  }
  // Two copies of every gradient's 4 bytes, each read and written at 10 GB/s.
  EXPECT_NEAR(estimate_step_time(job, m, {}).ranks[0].optimizer - alone, 2 * 2 * params * 4 / 10e9,
              1e-12);
}

TEST(StepTimeTest, APipelineIsItsScheduleSimulatedWithTheEstimatedCosts) {
  Job job = debug_job();
  job.options.dims.pp = 2;
  job.options.pipeline.schedule = "GPipe";
  job.options.pipeline.microbatches = 4;
  // A core to spare: the transfers are latency only (else they take the ranks' time too).
  const StepEstimate t = estimate_step_time(job, synthetic(/*cores=*/4), {});
  ASSERT_EQ(t.ranks.size(), 2u);
  ASSERT_EQ(t.schedule.ranks, 2);
  EXPECT_EQ(t.simulation.makespan,
            parallel::simulate(t.schedule,
                               [&] {
                                 std::vector<parallel::ActionCosts> costs;
                                 for (const RankTime& r : t.ranks) {
                                   parallel::ActionCosts a;
                                   a.forward = r.forward / 4;
                                   a.backward_input =
                                       r.backward / 4;  // B = I + W; the simulation sums them
                                   a.backward_weight = 0;
                                   a.transfer_latency = collective_seconds(
                                       "sendrecv", {10e-6, 1e-9}, 2, 2.0 * 256 * 256 * 4);
                                   costs.push_back(a);
                                 }
                                 return costs;
                               }())
                .makespan);
  for (const RankTime& r : t.ranks) {
    EXPECT_GT(r.pipeline_idle, 0);
    EXPECT_NEAR(r.step() - r.optimizer, t.simulation.makespan, 1e-9);
  }
}

TEST(StepTimeTest, OversubscribedCoresSlowComputeDown) {
  Job job = debug_job();
  job.options.dims.dp_replicate = 4;
  const Machine m = synthetic(/*cores=*/2);  // measured with one rank
  const StepEstimate t = estimate_step_time(job, m, {});
  EXPECT_NEAR(t.ranks[0].forward + t.ranks[0].backward, 2 * product_seconds(debug_job()), 1e-9);
}

// Four pipeline ranks on two cores: compute slows by 2 x the share of the step the ranks are
// busy at the full rate, not by 2, since a rank in the bubble leaves its core to the others.
TEST(StepTimeTest, PipelineRanksInTheBubbleLeaveTheirCoresToTheOthers) {
  Job job = debug_job();
  job.options.dims.pp = 2;
  job.options.dims.dp_replicate = 2;
  job.options.pipeline.schedule = "GPipe";
  job.options.pipeline.microbatches = 4;
  const StepEstimate alone = estimate_step_time(job, synthetic(/*cores=*/4), {});
  const StepEstimate crowded = estimate_step_time(job, synthetic(/*cores=*/2), {});
  double busy = 0;
  for (const RankTime& r : alone.ranks) busy += (r.step() - r.pipeline_idle) / 2;
  const double factor = 2 * busy / alone.seconds;
  ASSERT_GT(factor, 1);
  ASSERT_LT(factor, 2);  // the bubble
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_NEAR(crowded.ranks[r].forward, factor * alone.ranks[r].forward, 1e-12);
    EXPECT_NEAR(crowded.ranks[r].backward, factor * alone.ranks[r].backward, 1e-12);
  }
  EXPECT_LT(crowded.seconds, 2 * alone.seconds);
  EXPECT_GT(crowded.seconds, alone.seconds);
}

TEST(StepTimeTest, AMissingBackendSaysHowToMeasureIt) {
  Job job = debug_job();
  job.options.dims.dp_replicate = 2;
  Placement tcp;
  tcp.backend = "tcp";
  try {
    estimate_step_time(job, synthetic(), tcp);
    FAIL() << "no tcp fits";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("weft-bench machine"));
    EXPECT_THAT(e.what(), HasSubstr("only shm"));
  }
}

TEST(MachineTest, TheFitRecoversAlphaAndBetaOfExactTimes) {
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "sendrecv"}) {
    for (const int n : {2, 4}) {
      const AlphaBeta truth{25e-6, 0.3e-9};
      std::map<double, double> seconds;
      for (double bytes = 4096; bytes <= 16 << 20; bytes *= 4)
        seconds[bytes] = collective_seconds(op, truth, n, bytes);
      const AlphaBeta fit = fit_alpha_beta(op, n, seconds);
      EXPECT_NEAR(fit.alpha_s, truth.alpha_s, 1e-12) << op << " on " << n;
      EXPECT_NEAR(fit.beta_s_per_byte, truth.beta_s_per_byte, 1e-18) << op << " on " << n;
      EXPECT_LT(fit.worst_fit_error, 1e-9);
    }
  }
}

TEST(MachineTest, AFitNeverGoesNegative) {
  // Times that fall with size would want a negative beta: the fit keeps alpha alone.
  const AlphaBeta fit = fit_alpha_beta("all_reduce", 2, {{4096, 2e-3}, {1 << 20, 1e-3}});
  EXPECT_GE(fit.alpha_s, 0);
  EXPECT_EQ(fit.beta_s_per_byte, 0);
}

TEST(MachineTest, ProductRatesInterpolateInLogSizeAndClampAtTheEdges) {
  ComputeCosts c;
  c.set_product_rate(1);
  std::vector<double>& grid =
      c.product_grids[static_cast<std::size_t>(ProductKind::kBackwardWeight)];
  for (std::size_t i = 0; i < grid.size(); ++i) grid[i] = 100 + static_cast<double>(i);
  const auto rate = [&](std::int64_t rows, std::int64_t in, std::int64_t out) {
    return c.product_rate(ProductKind::kBackwardWeight, rows, in, out);
  };
  EXPECT_DOUBLE_EQ(rate(256, 128, 128), 100);
  EXPECT_DOUBLE_EQ(rate(1024, 2048, 2048), 100 + static_cast<double>(grid.size()) - 1);
  EXPECT_DOUBLE_EQ(rate(1 << 20, 1 << 16, 1 << 16), rate(1024, 2048, 2048));
  EXPECT_DOUBLE_EQ(rate(64, 16, 16), 100);
  // Halfway in log2 between out 128 and 256 (index 0 and 1): halfway between their rates.
  EXPECT_NEAR(rate(256, 128, static_cast<std::int64_t>(std::round(128 * std::sqrt(2)))), 100.5,
              1e-2);
  EXPECT_DOUBLE_EQ(c.product_rate(ProductKind::kForward, 1024, 2048, 2048), 1);
}

TEST(MachineTest, TheFileRoundTripsAndABadOneSaysWhatIsWrong) {
  const test::TempDir dir("weft-machine");
  const std::string path = (dir.path() / "machine.json").string();
  std::ofstream(path) << to_json(synthetic());
  const Machine m = read_machine(path);
  EXPECT_EQ(m.cores, 2);
  EXPECT_DOUBLE_EQ(m.backend("shm").op("sendrecv").alpha_s, 10e-6);
  EXPECT_EQ(m.float32.product_rate(ProductKind::kBackwardInput, 1000, 1000, 1000), kRate);
  std::ofstream(path) << R"({"cpu": "x"})";
  EXPECT_THROW(read_machine(path), InvalidArgument);
  EXPECT_THROW(read_machine((dir.path() / "absent.json").string()), InvalidArgument);
}

}  // namespace
}  // namespace weft::estimate
