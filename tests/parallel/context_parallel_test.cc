// Context parallelism (ring attention) against one process: the same model and batch, one
// forward and backward of the whole sequences in one process, and of each rank's two chunks
// on cp thread ranks (the loss the mean of the ranks' means, the gradients summed over the
// ranks with each rank's loss scaled by 1 / cp). Chunks short and long enough to cross the
// attention kernels' 64-row tiles and 256-key blocks; with grouped-query heads, with tensor
// parallelism inside, and with activation checkpointing (the ring runs again in backward).
#include "weft/parallel/context_parallel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "weft/dist/run_threads.h"
#include "weft/nn/llama.h"
#include "weft/parallel/device_mesh.h"
#include "weft/parallel/tensor_parallel.h"
#include "weft/tensor/random.h"

namespace weft::parallel {
namespace {

constexpr std::int64_t kVocab = 64, kBatch = 2;

nn::LlamaConfig config(std::int64_t seq) {
  return {.dim = 32,
          .n_layers = 2,
          .n_heads = 4,
          .n_kv_heads = 2,
          .vocab_size = kVocab,
          .multiple_of = 16,
          .max_seq_len = seq};
}

std::vector<std::int32_t> random_tokens(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  const PhiloxKey key = philox_key(seed, "cp-test");
  for (std::int64_t i = 0; i < n; ++i) {
    t[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(
        philox_uniform(key, static_cast<std::uint64_t>(i)) * static_cast<double>(kVocab));
  }
  return t;
}

struct Result {
  double loss = 0;
  nn::StateDict grads;  // whole, or this rank's slices under tensor parallelism
};

nn::StateDict gradients_of(nn::Llama& model) {
  nn::StateDict grads;
  for (const auto& p : model.parameters().all()) grads.emplace_back(p->name, p->grad.clone());
  return grads;
}

Result one_process(const nn::LlamaConfig& c, const std::vector<std::int32_t>& tokens,
                   const std::vector<std::int32_t>& targets, std::int64_t seq) {
  nn::Llama model(c);
  model.init_weights(3);
  model.parameters().zero_grad();
  const double loss = model.forward(tokens.data(), targets.data(), kBatch, seq);
  model.backward();
  return {loss, gradients_of(model)};
}

// Largest difference of a gradient's elements relative to its largest element.
double relative_difference(const Tensor& got, const Tensor& want) {
  double diff = 0, scale = 1e-30;
  const float *g = got.data<float>(), *w = want.data<float>();
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(g[i] - w[i])));
    scale = std::max(scale, static_cast<double>(std::abs(w[i])));
  }
  return diff / scale;
}

struct Layout {
  int cp = 2, tp = 1;
  bool checkpointing = false;
  nn::KeyValueExchange exchange = nn::KeyValueExchange::kRing;
};

// The same on cp x tp thread ranks: the loss, and the largest relative difference of any
// rank's gradients (its slices under tensor parallelism) from one process's.
std::pair<double, double> context_parallel(const nn::LlamaConfig& c, const Layout& layout,
                                           const std::vector<std::int32_t>& tokens,
                                           const std::vector<std::int32_t>& targets,
                                           std::int64_t seq, const Result& want) {
  double loss_of_rank0 = 0, worst = 0;
  std::mutex mu;
  dist::run_threads(layout.cp * layout.tp, [&](dist::ProcessGroup& world) {
    auto shared = std::shared_ptr<dist::ProcessGroup>(&world, [](dist::ProcessGroup*) {});
    DeviceMesh mesh(shared, {{"cp", layout.cp}, {"tp", layout.tp}});
    dist::ProcessGroup& cp_group = mesh.group("cp");
    nn::Llama model(c);
    std::shared_ptr<ProcessGroupTensorParallel> tp;
    if (layout.tp > 1) tp = apply_tensor_parallel(model, mesh.group("tp"), true, true);
    model.apply_context_parallel(
        {std::make_shared<ProcessGroupContextParallel>(cp_group), layout.exchange});
    model.init_weights(3);
    if (layout.checkpointing) model.set_activation_checkpointing(true);
    const int r = cp_group.rank(), n = cp_group.size();
    const auto local_tokens = context_parallel_rows(tokens.data(), kBatch, seq, r, n);
    const auto local_targets = context_parallel_rows(targets.data(), kBatch, seq, r, n);
    model.parameters().zero_grad();
    std::vector<double> loss{
        model.forward(local_tokens.data(), local_targets.data(), kBatch, seq / n)};
    model.backward(1.0 / n);
    cp_group.all_reduce(loss);
    for (const auto& p : model.parameters().all()) {
      cp_group.all_reduce(dist::Buffer(p->grad.data<float>(),
                                       static_cast<std::size_t>(p->grad.numel()), DType::kFloat32));
    }
    const nn::StateDict expected =
        layout.tp > 1 ? take_slices(want.grads, model.parameters()) : want.grads;
    const nn::StateDict got = gradients_of(model);
    std::lock_guard<std::mutex> lock(mu);
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].first, expected[i].first);
      worst = std::max(worst, relative_difference(got[i].second, expected[i].second));
    }
    if (world.rank() == 0) loss_of_rank0 = loss[0] / n;
  });
  return {loss_of_rank0, worst};
}

// Returns the loss.
double expect_matches(const Layout& layout, std::int64_t seq) {
  const nn::LlamaConfig c = config(seq);
  const auto tokens = random_tokens(kBatch * seq, 1), targets = random_tokens(kBatch * seq, 2);
  const Result want = one_process(c, tokens, targets, seq);
  const auto [loss, worst] = context_parallel(c, layout, tokens, targets, seq, want);
  const std::string what =
      "cp " + std::to_string(layout.cp) + " x tp " + std::to_string(layout.tp) + ", sequence " +
      std::to_string(seq) + (layout.checkpointing ? ", checkpointing" : "") +
      (layout.exchange == nn::KeyValueExchange::kAllGather ? ", all-gather" : "");
  EXPECT_NEAR(loss, want.loss, 1e-6 * want.loss) << what;
  EXPECT_LT(worst, 1e-5) << what;
  std::printf("%-40s loss %.9f against %.9f, gradients within %.1e\n", what.c_str(), loss,
              want.loss, worst);
  return loss;
}

TEST(ContextParallelTest, ChunksTakenInTheLoadBalancedOrder) {
  std::vector<std::int32_t> rows(2 * 16);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::int32_t>(i);
  // 2 sequences of 16 tokens, 4 ranks: 8 chunks of 2; rank 1 holds chunks 1 and 6 of each.
  EXPECT_THAT(context_parallel_rows(rows.data(), 2, 16, 1, 4),
              testing::ElementsAre(2, 3, 18, 19, 12, 13, 28, 29));
  EXPECT_THAT(context_parallel_rows(rows.data(), 1, 16, 0, 2),
              testing::ElementsAre(0, 1, 2, 3, 12, 13, 14, 15));
  // In 2 micro-batches of 1 sequence each, each laid out on its own.
  EXPECT_THAT(context_parallel_rows(rows.data(), 2, 16, 1, 4, 2),
              testing::ElementsAre(2, 3, 12, 13, 18, 19, 28, 29));
  EXPECT_THROW(context_parallel_rows(rows.data(), 2, 16, 0, 3), InvalidArgument);
}

TEST(ContextParallelTest, OneStepEqualsOneProcess) {
  expect_matches({.cp = 2}, 32);
  expect_matches({.cp = 4}, 32);
  expect_matches({.cp = 2}, 640);  // chunks of 160 rows: across tiles and blocks
  expect_matches({.cp = 3}, 48);
  expect_matches({.cp = 2, .checkpointing = true}, 32);
}

TEST(ContextParallelTest, ComposesWithTensorParallelism) { expect_matches({.cp = 2, .tp = 2}, 32); }

// The all-gather variant computes the same blocks in the ring's order: the same loss, bit for
// bit (the gradients of keys and values are summed in another order).
TEST(ContextParallelTest, AllGatherComputesWhatTheRingDoes) {
  constexpr auto kAllGather = nn::KeyValueExchange::kAllGather;
  for (const int cp : {2, 3, 4}) {
    const std::int64_t seq = 24 * cp;
    EXPECT_EQ(expect_matches({.cp = cp, .exchange = kAllGather}, seq),
              expect_matches({.cp = cp}, seq));
  }
  expect_matches({.cp = 2, .tp = 2, .checkpointing = true, .exchange = kAllGather}, 32);
}

}  // namespace
}  // namespace weft::parallel
