// Layout-invariant training (ParallelOptions::layout_invariant, nn/leaf_sums.h): one global
// batch trained 10 steps by one process and by DDP, FSDP (each mode), HSDP, every pipeline
// schedule, tensor parallelism (with 4 feature blocks, nn/feature_blocks.h) and context
// parallelism (with 8 sequence blocks, nn/blocked_attention.h) over 2, 3, 4, 6 and 8 ranks
// (threads), each with its part of the batch in 1 to 12 accumulated micro-batches,
// on 1 or 2 threads, with activation checkpointing, tied embeddings and bf16 products: every
// step's loss and gradient norm and every final parameter bitwise equal. The fast mode is
// checked to differ, so that the test can tell.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "weft/dist/run_threads.h"
#include "weft/kernels/matmul.h"
#include "weft/kernels/parallel.h"
#include "weft/nn/layers.h"
#include "weft/nn/leaf_sums.h"
#include "weft/parallel/device_mesh.h"
#include "weft/parallel/fsdp.h"
#include "weft/parallel/parallelize.h"
#include "weft/tensor/random.h"

namespace weft::parallel {
namespace {

constexpr std::int64_t kGlobalBatch = 12, kSeq = 16;  // 12 sequences: 1, 2, 3, 4, 6 ranks
constexpr int kSteps = 10;

nn::LlamaConfig config(bool tied = false, std::int64_t layers = 2) {
  return {.dim = 32,
          .n_layers = layers,
          .n_heads = 4,
          .vocab_size = 64,
          .multiple_of = 16,
          .max_seq_len = kSeq,
          .tie_embeddings = tied};
}

// Sequence i of global batch `step`, a pure function of both.
std::vector<std::int32_t> sequence(int step, std::int64_t i) {
  std::vector<std::int32_t> s(kSeq + 1);
  const PhiloxKey key = philox_key(9, "layout-test");
  for (std::int64_t t = 0; t <= kSeq; ++t) {
    const double u =
        philox_uniform(key, static_cast<std::uint64_t>((step * kGlobalBatch + i) * (kSeq + 1) + t));
    s[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(u * u * 64);
  }
  return s;
}

struct Layout {
  int ranks = 1, micro = 1, threads = 1;
  bool checkpointing = false, tied = false, bf16 = false, invariant = true;
  int shard = 1;  // FSDP over `shard` of the ranks (HSDP with replicas of them)
  ShardingMode mode = ShardingMode::kFullShard;
  std::int64_t layers = 2;
  int pp = 1;                          // pipeline stages' ranks, the others data-parallel
  int tp = 1;                          // tensor-parallel ranks
  int blocks = 1;                      // feature blocks (ParallelOptions::feature_blocks)
  int cp = 1;                          // context-parallel ranks
  int sequence_blocks = 1;             // ParallelOptions::sequence_blocks
  bool loss_parallel = false;          // with tp > 1
  bool sequence_parallel = false;      // with tp > 1
  std::string schedule;                // with pp > 1
  std::string schedule_csv;            // with pp > 1: PyTorch's CSV, in place of schedule
  bool gather_bf16 = false;            // FSDP gathers bf16 weights (with bf16)
  bool reduce_bf16 = false;            // mixed_precision_reduce = "bfloat16"
  int pipeline_micro = 4;              // micro-batches a pipeline streams per forward_backward
  std::int64_t global = kGlobalBatch;  // sequences a step
  std::string name() const {
    std::string n =
        ranks == 1 ? "1 process" : "DDP " + std::to_string(ranks / shard / pp / tp / cp);
    if (shard > 1) {
      n = (ranks > shard ? "HSDP " + std::to_string(ranks / shard) + " x FSDP " : "FSDP ") +
          std::to_string(shard) + " " + sharding_mode_name(mode);
    }
    n += ", " + std::to_string(micro) + " micro-batches, " + std::to_string(threads) + " thread";
    if (checkpointing) n += ", activation checkpointing";
    if (tied) n += ", tied embeddings";
    if (bf16) n += ", bf16";
    if (!invariant) n += ", fast mode";
    if (pp > 1) n += ", pp " + std::to_string(pp) + " " + (schedule_csv.empty() ? schedule : "CSV");
    if (gather_bf16) n += ", bf16 gathers";
    if (reduce_bf16) n += ", bf16 reduce";
    if (tp > 1) n += ", tp " + std::to_string(tp);
    if (blocks > 1) n += ", " + std::to_string(blocks) + " feature blocks";
    if (loss_parallel) n += ", loss parallel";
    if (sequence_parallel) n += ", sequence parallel";
    if (cp > 1) n += ", cp " + std::to_string(cp);
    if (sequence_blocks > 1) n += ", " + std::to_string(sequence_blocks) + " sequence blocks";
    return n;
  }
};

struct Result {
  std::vector<double> losses, norms;
  std::int64_t canonical_sums = 0;                   // bytes, rank 0's memory report
  std::map<std::string, std::vector<float>> params;  // by name: a pipeline gathers by stage
};

// As weft-train drives a step: the data loader's order, where data rank r's micro-batch m
// holds sequences (m x ranks + r) x part .. + part of the global batch.
Result train(const Layout& layout) {
  kernels::set_threads(layout.threads);
  kernels::set_product_rows(layout.invariant ? kSeq / layout.sequence_blocks : 512);
  nn::set_matmul_dtype(layout.bf16 ? DType::kBFloat16 : DType::kFloat32);
  Result result;
  dist::run_threads(layout.ranks, [&](dist::ProcessGroup& pg) {
    auto world = std::shared_ptr<dist::ProcessGroup>(&pg, [](dist::ProcessGroup*) {});
    const ParallelDims dims{
        .pp = layout.pp,
        .dp_replicate = layout.ranks / layout.shard / layout.pp / layout.tp / layout.cp,
        .dp_shard = layout.shard,
        .cp = layout.cp,
        .tp = layout.tp};
    DeviceMesh mesh(world, dims.mesh_dims());
    nn::Llama model(config(layout.tied, layout.layers));
    auto parallel =
        parallelize(model, layout.ranks > 1 ? &mesh : nullptr,
                    {.dims = dims,
                     .pipeline = {.schedule = layout.schedule.empty() ? "1F1B" : layout.schedule,
                                  .schedule_csv = layout.schedule_csv,
                                  .microbatches = layout.pipeline_micro},
                     .fsdp_mode = layout.mode,
                     .reduce_dtype = layout.reduce_bf16 ? DType::kBFloat16 : DType::kFloat32,
                     .param_dtype = layout.gather_bf16 ? DType::kBFloat16 : DType::kFloat32,
                     .sequence_parallel = layout.sequence_parallel,
                     .loss_parallel = layout.loss_parallel,
                     .optimizer = {.lr = 3e-3},
                     .layout_invariant = layout.invariant,
                     .feature_blocks = layout.blocks,
                     .sequence_blocks = layout.sequence_blocks});
    const int rank = parallel->data_rank(), ranks = parallel->data_size();
    parallel->init_weights(3);
    model.set_activation_checkpointing(layout.checkpointing);
    const std::int64_t part = layout.global / ranks / layout.micro;
    const double share = 1.0 / (ranks * layout.micro);
    for (int step = 0; step < kSteps; ++step) {
      parallel->zero_grad();
      double loss = 0;
      for (int m = 0; m < layout.micro; ++m) {
        std::vector<std::int32_t> tokens, targets;
        for (std::int64_t i = 0; i < part; ++i) {
          const auto s = sequence(step, (m * ranks + rank) * part + i);
          tokens.insert(tokens.end(), s.begin(), s.end() - 1);
          targets.insert(targets.end(), s.begin() + 1, s.end());
        }
        if (m == layout.micro - 1) parallel->prepare_sync();
        loss +=
            parallel->forward_backward(tokens.data(), targets.data(), part, kSeq, share) * share;
      }
      parallel->finish_sync();
      const double norm = parallel->clip_grad_norm(1.0);
      parallel->step(3e-3);
      loss = parallel->step_loss(loss);
      if (pg.rank() == 0) {
        result.losses.push_back(loss);
        result.norms.push_back(norm);
      }
    }
    const nn::StateDict params = parallel->state().full().first;  // collective
    if (pg.rank() != 0) return;
    result.canonical_sums = parallel->report().memory().canonical_sums;
    for (const auto& [name, value] : params) result.params[name] = value.to_vector<float>();
  });
  kernels::set_threads(1);
  kernels::set_product_rows(512);
  nn::set_matmul_dtype(DType::kFloat32);
  return result;
}

// Bitwise: == on the floats would call -0 and +0 equal.
bool bitwise_equal(const Result& a, const Result& b) {
  if (a.losses != b.losses || a.norms != b.norms || a.params.size() != b.params.size())
    return false;
  for (const auto& [name, values] : a.params) {
    const auto it = b.params.find(name);
    if (it == b.params.end() || it->second.size() != values.size() ||
        std::memcmp(it->second.data(), values.data(), values.size() * sizeof(float)) != 0)
      return false;
  }
  return true;
}

void expect_every_layout_bitwise(const Layout& reference, const std::vector<Layout>& layouts) {
  const Result want = train(reference);
  ASSERT_EQ(want.losses.size(), static_cast<std::size_t>(kSteps));
  EXPECT_LT(want.losses.back(), want.losses.front()) << "the model learns";
  for (const Layout& layout : layouts) {
    const Result got = train(layout);
    EXPECT_TRUE(bitwise_equal(got, want)) << layout.name() << " against " << reference.name();
  }
}

// The canonical tree written out: node [first, first + size) of the perfect binary tree, a
// node with one present child being that child (nullopt: no leaf present); with bf16 every
// node, leaves included, rounded to bfloat16.
std::optional<float> tree_sum(const std::map<std::int64_t, float>& leaves, std::int64_t first,
                              std::int64_t size, bool bf16 = false) {
  const auto rounded = [&](float x) { return bf16 ? static_cast<float>(BFloat16(x)) : x; };
  if (size == 1) {
    const auto it = leaves.find(first);
    return it == leaves.end() ? std::nullopt : std::optional<float>(rounded(it->second));
  }
  const auto left = tree_sum(leaves, first, size / 2, bf16);
  const auto right = tree_sum(leaves, first + size / 2, size / 2, bf16);
  if (left && right) return rounded(*left + *right);
  return left ? left : right;
}

// Leaves scattered over 64 with gaps, summed as ranks would: each a few aligned blocks merged
// locally (LeafSums), the blocks then combined in any order (combine_blocks); in float32
// nodes, and in bfloat16 ones.
TEST(LeafSumsTest, BlocksCombineInTheCanonicalTree) {
  const PhiloxKey key = philox_key(4, "leaf-sums");
  for (std::uint64_t trial = 0; trial < 400; ++trial) {
    const bool bf16 = trial % 2 == 1;
    std::map<std::int64_t, float> leaves;
    for (std::int64_t leaf = 0; leaf < 64; ++leaf) {
      const double u = philox_uniform(key, trial * 1000 + static_cast<std::uint64_t>(leaf));
      // Magnitudes 1e-4 to 1e4: the order of the additions shows in the bits.
      if (u < 0.6) leaves[leaf] = static_cast<float>(std::pow(10.0, 8 * u / 0.6 - 4) * (u - 0.3));
    }
    // Three "ranks" take runs of leaves in turn.
    std::vector<nn::LeafSums<float>> ranks;
    std::vector<float> targets(3, 0.0f);
    for (int r = 0; r < 3; ++r) ranks.emplace_back(&targets[static_cast<std::size_t>(r)], 1, bf16);
    int rank = 0;
    for (const auto& [leaf, value] : leaves) {
      if (philox_uniform(key, trial * 1000 + 500 + static_cast<std::uint64_t>(leaf)) < 0.3)
        rank = (rank + 1) % 3;
      *ranks[static_cast<std::size_t>(rank)].open() = value;
      ranks[static_cast<std::size_t>(rank)].add(leaf);
    }
    std::vector<nn::LeafBlock> blocks;
    std::vector<float> values;
    for (int r = 2; r >= 0; --r) {  // any order
      const auto& sums = ranks[static_cast<std::size_t>(r)];
      for (std::size_t i = 0; i < sums.blocks().size(); ++i) {
        blocks.push_back(sums.blocks()[i]);
        values.push_back(*sums.values(i));
      }
    }
    std::vector<float*> pointers;
    for (float& v : values) pointers.push_back(&v);
    const float* sum = nn::combine_blocks(blocks, pointers, 1, bf16);
    const auto want = tree_sum(leaves, 0, 64, bf16);
    ASSERT_EQ(sum != nullptr, want.has_value());
    if (want) {
      EXPECT_EQ(std::memcmp(sum, &*want, sizeof(float)), 0) << *sum << " " << *want;
    }
  }
}

TEST(LayoutInvarianceTest, EveryDataParallelLayoutIsBitwiseOneProcess) {
  std::vector<Layout> layouts;
  for (int micro : {2, 3, 4, 12}) layouts.push_back({.micro = micro});
  for (const auto& [ranks, micro] : std::vector<std::pair<int, int>>{
           {2, 1}, {2, 2}, {2, 3}, {2, 6}, {3, 1}, {3, 2}, {3, 4}, {4, 1}, {4, 3}, {6, 1}, {6, 2}})
    layouts.push_back({.ranks = ranks, .micro = micro});
  layouts.push_back({.ranks = 2, .micro = 2, .threads = 2});
  layouts.push_back({.ranks = 3, .micro = 1, .checkpointing = true});
  expect_every_layout_bitwise({}, layouts);
}

TEST(LayoutInvarianceTest, EveryShardedLayoutIsBitwiseOneProcess) {
  std::vector<Layout> layouts;
  for (ShardingMode mode : {ShardingMode::kZero1, ShardingMode::kZero2, ShardingMode::kFullShard}) {
    layouts.push_back({.ranks = 2, .micro = 3, .shard = 2, .mode = mode});
    layouts.push_back({.ranks = 3, .micro = 2, .shard = 3, .mode = mode});
  }
  layouts.push_back({.ranks = 4, .shard = 4});
  layouts.push_back({.ranks = 6, .micro = 2, .shard = 6});
  layouts.push_back({.ranks = 4, .micro = 3, .shard = 2});                           // HSDP 2 x 2
  layouts.push_back({.ranks = 6, .shard = 3, .mode = ShardingMode::kZero2});         // HSDP 2 x 3
  layouts.push_back({.ranks = 4, .threads = 2, .checkpointing = true, .shard = 2});  // HSDP
  expect_every_layout_bitwise({}, layouts);
  expect_every_layout_bitwise(
      {.bf16 = true},
      {{.ranks = 4, .micro = 3, .bf16 = true, .shard = 4},
       {.ranks = 2, .bf16 = true, .shard = 2, .gather_bf16 = true},
       {.ranks = 4, .bf16 = true, .shard = 2, .mode = ShardingMode::kZero2, .gather_bf16 = true}});
}

// 5 sequences a rank: rank 0's leaves 0-4 make blocks [0, 4) and [4, 5), rank 1's 5-9 make
// three; the exchanges pad to the most blocks any rank holds.
TEST(LayoutInvarianceTest, RanksWithDifferentBlockCountsAreBitwiseToo) {
  expect_every_layout_bitwise(
      {.global = 10},
      {{.ranks = 2, .global = 10},
       {.ranks = 2, .shard = 2, .mode = ShardingMode::kZero2, .global = 10},
       {.ranks = 2, .shard = 2, .global = 10},
       {.ranks = 4, .pp = 2, .schedule = "1F1B", .pipeline_micro = 5, .global = 10}});
}

// Every schedule (in any order of micro-batches and stages, zero bubble's deferred weight
// gradients too), uneven stages, with gradient accumulation and with DDP.
TEST(LayoutInvarianceTest, EveryPipelineScheduleIsBitwiseOneProcess) {
  std::vector<Layout> layouts;
  for (const char* schedule :
       {"GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble"})
    layouts.push_back({.ranks = 2, .layers = 4, .pp = 2, .schedule = schedule});
  layouts.push_back(
      {.ranks = 2, .micro = 3, .layers = 4, .pp = 2, .schedule = "1F1B", .pipeline_micro = 2});
  layouts.push_back({.ranks = 3, .layers = 4, .pp = 3, .schedule = "1F1B"});  // 2, 1, 1 layers
  layouts.push_back(                                                          // PP 2 x DDP 2
      {.ranks = 4, .layers = 4, .pp = 2, .schedule = "ZBVZeroBubble", .pipeline_micro = 6});
  layouts.push_back(
      {.ranks = 4, .shard = 2, .layers = 4, .pp = 2, .schedule = "1F1B", .pipeline_micro = 3});
  layouts.push_back({.ranks = 4,
                     .micro = 2,
                     .shard = 2,
                     .mode = ShardingMode::kZero2,
                     .layers = 4,
                     .pp = 2,
                     .schedule = "Interleaved1F1B",
                     .pipeline_micro = 3});
  layouts.push_back({.ranks = 4,
                     .shard = 2,
                     .mode = ShardingMode::kZero1,
                     .layers = 4,
                     .pp = 2,
                     .schedule = "ZBVZeroBubble",
                     .pipeline_micro = 6});
  layouts.push_back({.ranks = 4,
                     .shard = 2,
                     .layers = 4,
                     .pp = 2,
                     .schedule = "InterleavedZeroBubble",
                     .pipeline_micro = 2});
  layouts.push_back(
      {.ranks = 6, .shard = 3, .layers = 4, .pp = 2, .schedule = "GPipe", .pipeline_micro = 2});
  // A schedule of the user's, as PyTorch's CSV: backward in reverse micro-batch order, the
  // weight gradients split off and run last.
  layouts.push_back({.ranks = 2,
                     .layers = 4,
                     .pp = 2,
                     .schedule_csv = "0F0,0F1,0I1,0I0,0W0,0W1\n1F0,1F1,1I1,1I0,1W1,1W0\n",
                     .pipeline_micro = 2});
  expect_every_layout_bitwise({.layers = 4}, layouts);
}

TEST(LayoutInvarianceTest, TiedEmbeddingsAndBFloat16Products) {
  expect_every_layout_bitwise(
      {.tied = true},
      {{.ranks = 2, .micro = 3, .tied = true},
       {.ranks = 4, .micro = 1, .tied = true},
       {.ranks = 2, .tied = true, .shard = 2},
       {.ranks = 3, .micro = 2, .tied = true, .shard = 3, .mode = ShardingMode::kZero1},
       {.ranks = 4, .micro = 3, .tied = true, .shard = 2, .mode = ShardingMode::kZero2}});
  // Tied across pipeline stages: ZB-V puts the first and the last stage on rank 0.
  expect_every_layout_bitwise(
      {.tied = true, .layers = 4},
      {{.ranks = 2, .tied = true, .layers = 4, .pp = 2, .schedule = "ZBVZeroBubble"},
       // The output layer's weight gradients after the table's backward: the two sums of the
       // tied weight come in the other order.
       {.ranks = 2,
        .tied = true,
        .layers = 4,
        .pp = 2,
        .schedule_csv = "0F0,0F1,3F0,3F1,3I0,3I1,0B0,0B1,3W0,3W1\n"
                        "1F0,1F1,2F0,2F1,2B0,2B1,1B0,1B1\n",
        .pipeline_micro = 2},
       {.ranks = 4,
        .tied = true,
        .shard = 2,
        .layers = 4,
        .pp = 2,
        .schedule = "ZBVZeroBubble",
        .pipeline_micro = 3}});
  expect_every_layout_bitwise({.bf16 = true},
                              {{.micro = 4, .bf16 = true},
                               {.ranks = 3, .micro = 2, .bf16 = true},
                               {.ranks = 6, .micro = 1, .threads = 2, .bf16 = true}});
}

// mixed_precision_reduce = "bfloat16": every node of the gradients' trees is rounded to
// bfloat16 (and exchanged so), in one process too: every data-parallel layout bitwise one
// process, and close to, but not, the float32 sums.
TEST(LayoutInvarianceTest, GradientsReducedInBFloat16AreBitwiseOneProcess) {
  const Layout one{.reduce_bf16 = true};
  expect_every_layout_bitwise(
      one, {{.micro = 3, .reduce_bf16 = true},
            {.ranks = 2, .micro = 2, .reduce_bf16 = true},
            {.ranks = 3, .threads = 2, .reduce_bf16 = true},
            {.ranks = 4, .micro = 3, .reduce_bf16 = true},
            {.ranks = 2, .shard = 2, .reduce_bf16 = true},
            {.ranks = 3, .micro = 2, .shard = 3, .mode = ShardingMode::kZero1, .reduce_bf16 = true},
            {.ranks = 4, .shard = 2, .mode = ShardingMode::kZero2, .reduce_bf16 = true},
            {.ranks = 6, .micro = 2, .shard = 3, .reduce_bf16 = true}});
  expect_every_layout_bitwise(
      {.tied = true, .bf16 = true, .reduce_bf16 = true},
      {{.ranks = 2, .micro = 3, .tied = true, .bf16 = true, .reduce_bf16 = true},
       {.ranks = 2, .tied = true, .bf16 = true, .shard = 2, .reduce_bf16 = true},
       {.ranks = 4,
        .tied = true,
        .bf16 = true,
        .shard = 2,
        .gather_bf16 = true,
        .reduce_bf16 = true}});
  expect_every_layout_bitwise({.layers = 4, .reduce_bf16 = true},
                              {{.ranks = 2, .layers = 4, .pp = 2, .reduce_bf16 = true},
                               {.ranks = 4,
                                .shard = 2,
                                .layers = 4,
                                .pp = 2,
                                .schedule = "1F1B",
                                .reduce_bf16 = true,
                                .pipeline_micro = 3}});
  expect_every_layout_bitwise({.blocks = 4, .reduce_bf16 = true},
                              {{.ranks = 4, .tp = 2, .blocks = 4, .reduce_bf16 = true},
                               {.ranks = 4,
                                .shard = 2,
                                .tp = 2,
                                .blocks = 4,
                                .loss_parallel = true,
                                .sequence_parallel = true,
                                .reduce_bf16 = true}});
  const Result rounded = train(one), exact = train({});
  EXPECT_FALSE(bitwise_equal(rounded, exact));
  for (std::size_t i = 0; i < exact.losses.size(); ++i)
    EXPECT_NEAR(rounded.losses[i], exact.losses[i], 1e-3 * exact.losses[i]) << "step " << i;
}

// Without the mode the layouts agree only to rounding: the test above can tell them apart.
// The memory report counts the mode's partial sums, and nothing without it.
TEST(LayoutInvarianceTest, TheFastModeDiffers) {
  const Result one = train({.invariant = false});
  const Result ddp = train({.ranks = 3, .micro = 2, .invariant = false});
  EXPECT_FALSE(bitwise_equal(one, ddp));
  EXPECT_EQ(one.canonical_sums, 0);
  EXPECT_EQ(ddp.canonical_sums, 0);
  EXPECT_GT(train({.ranks = 3, .micro = 2}).canonical_sums, 0);
  EXPECT_GT(train({.ranks = 2, .shard = 2}).canonical_sums, 0);
  for (std::size_t i = 0; i < one.losses.size(); ++i)
    EXPECT_NEAR(ddp.losses[i], one.losses[i], 1e-5 * one.losses[i]) << "step " << i;
  const Result blocked = train({.sequence_blocks = 8});
  const Result cp = train({.ranks = 2, .invariant = false, .cp = 2});
  EXPECT_FALSE(bitwise_equal(blocked, cp));
  for (std::size_t i = 0; i < blocked.losses.size(); ++i)
    EXPECT_NEAR(cp.losses[i], blocked.losses[i], 1e-5 * blocked.losses[i]) << "step " << i;
}

// Tensor parallelism with every weight cut into 4 feature blocks: 2 and 4 ranks, with DDP,
// FSDP, pipelines, micro-batches, threads, activation checkpointing, tied embeddings and bf16
// products, bitwise one process cutting its products alike.
TEST(LayoutInvarianceTest, TensorParallelLayoutsAreBitwiseOneProcess) {
  expect_every_layout_bitwise(
      {.blocks = 4},
      {{.ranks = 2, .tp = 2, .blocks = 4},
       {.ranks = 4, .tp = 4, .blocks = 4},
       {.ranks = 4, .tp = 2, .blocks = 4},
       {.ranks = 4, .shard = 2, .tp = 2, .blocks = 4},
       {.ranks = 4, .micro = 3, .threads = 2, .checkpointing = true, .tp = 2, .blocks = 4},
       {.ranks = 4, .pp = 2, .tp = 2, .blocks = 4},
       {.micro = 2, .blocks = 4},
       {.ranks = 2, .tp = 2, .blocks = 4, .loss_parallel = true},
       {.ranks = 4, .shard = 2, .tp = 2, .blocks = 4, .loss_parallel = true},
       {.ranks = 4, .pp = 2, .tp = 2, .blocks = 4, .loss_parallel = true},
       {.ranks = 4, .tp = 4, .blocks = 4, .loss_parallel = true}});
  // Sequence parallelism: each rank's rows whole sequences.
  expect_every_layout_bitwise(
      {.blocks = 4},
      {{.ranks = 2, .tp = 2, .blocks = 4, .loss_parallel = true, .sequence_parallel = true},
       {.ranks = 4, .tp = 4, .blocks = 4, .sequence_parallel = true},
       {.ranks = 4,
        .micro = 3,
        .threads = 2,
        .checkpointing = true,
        .tp = 2,
        .blocks = 4,
        .loss_parallel = true,
        .sequence_parallel = true},
       {.ranks = 4,
        .shard = 2,
        .tp = 2,
        .blocks = 4,
        .loss_parallel = true,
        .sequence_parallel = true},
       {.ranks = 4,
        .pp = 2,
        .tp = 2,
        .blocks = 4,
        .loss_parallel = true,
        .sequence_parallel = true,
        .pipeline_micro = 2}});
  expect_every_layout_bitwise(
      {.tied = true, .bf16 = true, .blocks = 4},
      {{.ranks = 2, .micro = 2, .tied = true, .bf16 = true, .tp = 2, .blocks = 4},
       {.ranks = 2, .tied = true, .bf16 = true, .tp = 2, .blocks = 4, .loss_parallel = true},
       {.ranks = 4, .tied = true, .bf16 = true, .tp = 4, .blocks = 4},
       {.ranks = 4, .tied = true, .bf16 = true, .shard = 2, .tp = 2, .blocks = 4}});
}

// Context parallelism with each sequence cut into 8 blocks of positions: 2 and 4 ranks, with
// DDP, FSDP, pipelines, micro-batches, threads, activation checkpointing and bf16 products,
// bitwise one process cutting its sequences alike.
TEST(LayoutInvarianceTest, ContextParallelLayoutsAreBitwiseOneProcess) {
  expect_every_layout_bitwise(
      {.sequence_blocks = 8},
      {{.ranks = 2, .cp = 2, .sequence_blocks = 8},
       {.ranks = 4, .cp = 4, .sequence_blocks = 8},
       {.ranks = 4, .cp = 2, .sequence_blocks = 8},
       {.ranks = 4, .shard = 2, .cp = 2, .sequence_blocks = 8},
       {.ranks = 2, .micro = 3, .threads = 2, .checkpointing = true, .cp = 2, .sequence_blocks = 8},
       {.micro = 2, .sequence_blocks = 8}});
  expect_every_layout_bitwise(
      {.layers = 4, .sequence_blocks = 8},
      {{.ranks = 4, .layers = 4, .pp = 2, .cp = 2, .sequence_blocks = 8, .schedule = "1F1B"},
       {.ranks = 8,
        .shard = 2,
        .layers = 4,
        .pp = 2,
        .cp = 2,
        .sequence_blocks = 8,
        .schedule = "Interleaved1F1B",
        .pipeline_micro = 2}});
  expect_every_layout_bitwise(
      {.blocks = 4, .sequence_blocks = 8},
      {{.ranks = 4, .tp = 2, .blocks = 4, .cp = 2, .sequence_blocks = 8},
       {.ranks = 4, .tp = 2, .blocks = 4, .cp = 2, .sequence_blocks = 8, .loss_parallel = true},
       {.ranks = 8, .shard = 2, .tp = 2, .blocks = 4, .cp = 2, .sequence_blocks = 8},
       {.ranks = 4,
        .tp = 2,
        .blocks = 4,
        .cp = 2,
        .sequence_blocks = 8,
        .loss_parallel = true,
        .sequence_parallel = true},
       {.ranks = 2,
        .micro = 12,
        .tp = 2,
        .blocks = 4,
        .sequence_blocks = 8,
        .loss_parallel = true,
        .sequence_parallel = true}});
  expect_every_layout_bitwise({.bf16 = true, .sequence_blocks = 8},
                              {{.ranks = 2, .bf16 = true, .cp = 2, .sequence_blocks = 8},
                               {.ranks = 4, .bf16 = true, .cp = 4, .sequence_blocks = 8}});
}

// What the mode does not cover yet is refused, saying so.
TEST(LayoutInvarianceTest, RefusesWhatItDoesNotCoverYet) {
  const auto refused = [](const ParallelDims& dims, int blocks, const std::string& says,
                          int sequence_blocks = 1) {
    dist::run_threads(dims.product(), [&](dist::ProcessGroup& pg) {
      auto world = std::shared_ptr<dist::ProcessGroup>(&pg, [](dist::ProcessGroup*) {});
      DeviceMesh mesh(world, dims.mesh_dims());
      nn::Llama model(config());
      try {
        parallelize(model, &mesh,
                    {.dims = dims,
                     .layout_invariant = true,
                     .feature_blocks = blocks,
                     .sequence_blocks = sequence_blocks});
        ADD_FAILURE() << "accepted: " << says;
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      }
    });
  };
  refused({.cp = 2}, 1, "a multiple of 4");
  refused({.cp = 4}, 1, "a multiple of 8", 4);
  refused({.cp = 2}, 1, "not a power of two", 12);
  refused({.tp = 4}, 2, "a multiple of it");
  refused({.tp = 2}, 6, "not a power of two");
  refused({.tp = 2}, 64, "does not divide the model's dim");
}

}  // namespace
}  // namespace weft::parallel
