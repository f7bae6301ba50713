// estimate_memory against what weft holds: each layout trains one step on ranks as threads,
// and every rank's parallel::MemoryReport (parameters, gradients and optimizer state between
// steps; the activations forward kept, a pipeline's peak over its schedule) is compared with
// the estimate made from the configuration alone, to the byte.
#include "weft/estimate/memory_estimate.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "weft/dist/run_threads.h"
#include "weft/dist/shm/shm_transport.h"
#include "weft/nn/layers.h"
#include "weft/parallel/device_mesh.h"
#include "weft/parallel/parallelize.h"
#include "weft/parallel/pipeline_schedule.h"

namespace weft::estimate {
namespace {

using parallel::ShardingMode;

constexpr std::int64_t kBatch = 4, kSeq = 16;

struct Layout {
  std::string name;
  parallel::ParallelDims dims;
  std::string schedule = "1F1B";
  ShardingMode mode = ShardingMode::kFullShard;
  bool bf16 = false, checkpointing = false, sequence_parallel = true, loss_parallel = true;
  bool tied = false;
};

void PrintTo(const Layout& layout, std::ostream* os) { *os << layout.name; }

Job job_of(const Layout& layout) {
  Job job{.model = {.dim = 32,
                    .n_layers = 4,
                    .n_heads = 4,
                    .n_kv_heads = 2,
                    .vocab_size = 64,
                    .multiple_of = 16,
                    .max_seq_len = kSeq,
                    .tie_embeddings = layout.tied},
          .batch = kBatch,
          .seq = kSeq,
          .activation_checkpointing = layout.checkpointing};
  parallel::ParallelOptions& o = job.options;
  o.dims = layout.dims;
  o.pipeline = {.schedule = layout.schedule, .microbatches = 4};
  o.fsdp_mode = layout.mode;
  o.param_dtype = layout.bf16 ? DType::kBFloat16 : DType::kFloat32;
  o.sequence_parallel = layout.sequence_parallel;
  o.loss_parallel = layout.loss_parallel;
  return job;
}

// Every world rank's report after one training step.
std::vector<parallel::MemoryReport> measure(const Job& job) {
  nn::set_matmul_dtype(job.options.param_dtype);
  const int world = job.options.dims.product();
  std::vector<parallel::MemoryReport> reports(static_cast<std::size_t>(world));
  dist::run_threads(world, [&](dist::ProcessGroup& pg) {
    auto shared = std::shared_ptr<dist::ProcessGroup>(&pg, [](dist::ProcessGroup*) {});
    parallel::DeviceMesh mesh(shared, job.options.dims.mesh_dims());
    nn::Llama model(job.model);
    auto parallel = parallelize(model, world > 1 ? &mesh : nullptr, job.options);
    parallel->init_weights(5);
    model.set_activation_checkpointing(job.activation_checkpointing);
    std::vector<std::int32_t> tokens(kBatch * kSeq), targets(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<std::int32_t>((i * 7 + 3) % 64);
      targets[i] = static_cast<std::int32_t>((i * 5 + 1) % 64);
    }
    parallel->zero_grad();
    parallel->prepare_sync();
    parallel->forward_backward(tokens.data(), targets.data(), kBatch, kSeq, 1.0);
    parallel->finish_sync();
    parallel->clip_grad_norm(1.0);
    parallel->step(1e-3);
    reports[static_cast<std::size_t>(pg.rank())] = parallel->report().memory();
  });
  nn::set_matmul_dtype(DType::kFloat32);
  return reports;
}

class MemoryEstimateTest : public testing::TestWithParam<Layout> {};

TEST_P(MemoryEstimateTest, MatchesWhatEachRankHolds) {
  const Job job = job_of(GetParam());
  const std::vector<RankMemory> estimate = estimate_memory(job);
  const std::vector<parallel::MemoryReport> held = measure(job);
  ASSERT_EQ(estimate.size(), held.size());
  for (std::size_t r = 0; r < held.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(estimate[r].parameters, held[r].parameters);
    EXPECT_EQ(estimate[r].gradients, held[r].gradients);
    EXPECT_EQ(estimate[r].optimizer, held[r].optimizer);
    EXPECT_EQ(estimate[r].activations, held[r].activations);
  }
}

parallel::ParallelDims dims(int pp, int dp_replicate, int dp_shard, int cp, int tp) {
  return {.pp = pp, .dp_replicate = dp_replicate, .dp_shard = dp_shard, .cp = cp, .tp = tp};
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, MemoryEstimateTest,
    testing::Values(
        Layout{.name = "one_process", .dims = dims(1, 1, 1, 1, 1)},
        Layout{.name = "one_process_bf16", .dims = dims(1, 1, 1, 1, 1), .bf16 = true},
        Layout{.name = "checkpointing", .dims = dims(1, 1, 1, 1, 1), .checkpointing = true},
        Layout{.name = "tied", .dims = dims(1, 1, 1, 1, 1), .tied = true},
        Layout{.name = "ddp2", .dims = dims(1, 2, 1, 1, 1)},
        Layout{.name = "fsdp2", .dims = dims(1, 1, 2, 1, 1)},
        Layout{.name = "fsdp2_zero1", .dims = dims(1, 1, 2, 1, 1), .mode = ShardingMode::kZero1},
        Layout{.name = "fsdp2_zero2", .dims = dims(1, 1, 2, 1, 1), .mode = ShardingMode::kZero2},
        Layout{.name = "fsdp3", .dims = dims(1, 1, 3, 1, 1)},
        Layout{.name = "hsdp2x2", .dims = dims(1, 2, 2, 1, 1)},
        Layout{.name = "tp2", .dims = dims(1, 1, 1, 1, 2)},
        Layout{.name = "tp2_bf16", .dims = dims(1, 1, 1, 1, 2), .bf16 = true},
        Layout{.name = "tp2_no_sp", .dims = dims(1, 1, 1, 1, 2), .sequence_parallel = false},
        Layout{.name = "tp2_no_loss_parallel", .dims = dims(1, 1, 1, 1, 2), .loss_parallel = false},
        Layout{.name = "cp2", .dims = dims(1, 1, 1, 2, 1)},
        Layout{.name = "fsdp2_cp2", .dims = dims(1, 1, 2, 2, 1)},
        Layout{.name = "fsdp2_tp2", .dims = dims(1, 1, 2, 1, 2)},
        Layout{.name = "pp2_gpipe", .dims = dims(2, 1, 1, 1, 1), .schedule = "GPipe"},
        Layout{.name = "pp2_1f1b", .dims = dims(2, 1, 1, 1, 1)},
        Layout{
            .name = "pp2_1f1b_checkpointing", .dims = dims(2, 1, 1, 1, 1), .checkpointing = true},
        Layout{
            .name = "pp2_interleaved", .dims = dims(2, 1, 1, 1, 1), .schedule = "Interleaved1F1B"},
        Layout{.name = "pp2_zero_bubble",
               .dims = dims(2, 1, 1, 1, 1),
               .schedule = "InterleavedZeroBubble"},
        Layout{.name = "pp2_zero_bubble_checkpointing",
               .dims = dims(2, 1, 1, 1, 1),
               .schedule = "InterleavedZeroBubble",
               .checkpointing = true},
        Layout{.name = "pp2_zbv_bf16",
               .dims = dims(2, 1, 1, 1, 1),
               .schedule = "ZBVZeroBubble",
               .bf16 = true},
        Layout{.name = "pp2_zbv_tp2", .dims = dims(2, 1, 1, 1, 2), .schedule = "ZBVZeroBubble"},
        Layout{.name = "pp2_fsdp2", .dims = dims(2, 1, 2, 1, 1)}),
    [](const testing::TestParamInfo<Layout>& p) { return p.param.name; });

// The shm transport's rings, one each way with every rank a rank exchanges point-to-point
// messages with: a pipeline's neighbouring stages and context parallelism's ring; none for the
// collectives' layouts or a transport without rings.
TEST(MemoryEstimateRingsTest, PointToPointPeersCountTheTransportsRingsEachWay) {
  const auto scratch = [](Job job, std::string_view backend, int rank = 0) {
    job.p2p_ring_bytes = p2p_ring_bytes(backend);
    return estimate_memory(job)[static_cast<std::size_t>(rank)].scratch;
  };
  const std::int64_t ring = static_cast<std::int64_t>(dist::ShmTransportOptions{}.ring_bytes);
  EXPECT_EQ(p2p_ring_bytes("shm"), ring);
  EXPECT_EQ(p2p_ring_bytes("auto"), ring);
  EXPECT_EQ(Job{}.p2p_ring_bytes, ring);  // the default backend's
  for (const Layout& layout :
       {Layout{.name = "pp2", .dims = dims(2, 1, 1, 1, 1)},
        Layout{.name = "zbv", .dims = dims(2, 1, 1, 1, 1), .schedule = "ZBVZeroBubble"},
        Layout{.name = "cp2", .dims = dims(1, 1, 1, 2, 1)}}) {
    EXPECT_EQ(scratch(job_of(layout), "shm"), scratch(job_of(layout), "tcp") + 2 * ring)
        << layout.name;
  }
  // The middle of three stages talks to both neighbours.
  const Job pp3 = job_of({.name = "pp3", .dims = dims(3, 1, 1, 1, 1)});
  EXPECT_EQ(scratch(pp3, "shm", 1), scratch(pp3, "mpi", 1) + 4 * ring);
  for (const Layout& layout : {Layout{.name = "fsdp2", .dims = dims(1, 1, 2, 1, 1)},
                               Layout{.name = "tp2", .dims = dims(1, 1, 1, 1, 2)}}) {
    EXPECT_EQ(scratch(job_of(layout), "shm"), scratch(job_of(layout), "tcp")) << layout.name;
  }
}

TEST(MemoryEstimateErrorsTest, NameWhatDoesNotFit) {
  Job heads = job_of({.name = "tp3", .dims = dims(1, 1, 1, 1, 3)});
  EXPECT_THROW(estimate_memory(heads), InvalidArgument);
  Job deep = job_of({.name = "pp8", .dims = dims(8, 1, 1, 1, 1)});
  EXPECT_THROW(estimate_memory(deep), InvalidArgument);
  Job csv = job_of({.name = "csv", .dims = dims(2, 1, 1, 1, 1)});
  csv.options.pipeline.schedule_csv =
      parallel::write_schedule_csv(parallel::make_schedule(parallel::ScheduleKind::k1F1B, 4, 1, 4));
  EXPECT_THROW(estimate_memory(csv), InvalidArgument);  // a schedule for 4 ranks on 2
}

}  // namespace
}  // namespace weft::estimate
