// Data parallelism against one process: the same model, seed and global batch, trained 20
// steps by 1 process and by DDP over 2 and 4 ranks (threads), must give the same losses.
#include "weft/parallel/ddp.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "weft/dist/run_threads.h"
#include "weft/nn/optim.h"
#include "weft/parallel/device_mesh.h"
#include "weft/parallel/zero.h"
#include "weft/tensor/random.h"

namespace weft::parallel {
namespace {

using testing::HasSubstr;

constexpr int kSteps = 20;
constexpr std::int64_t kGlobalBatch = 12, kSeq = 16, kVocab = 64;  // divides by 2, 3 and 4

nn::LlamaConfig config() {
  return {.dim = 32, .n_layers = 2, .n_heads = 2, .vocab_size = kVocab, .multiple_of = 16,
          .max_seq_len = kSeq};
}

// Global batch `step`: sequence i is a pure function of (step, i), so ranks can take slices.
std::vector<std::int32_t> sequence(int step, std::int64_t i) {
  std::vector<std::int32_t> s(kSeq + 1);
  const PhiloxKey key = philox_key(5, "ddp-test");
  for (std::int64_t t = 0; t <= kSeq; ++t) {
    s[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(
        philox_uniform(key, static_cast<std::uint64_t>((step * kGlobalBatch + i) * (kSeq + 1) + t)) * kVocab);
  }
  return s;
}

// Tokens and targets of sequences [first, first + count) of global batch `step`.
std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>> slice(int step, std::int64_t first,
                                                                       std::int64_t count) {
  std::vector<std::int32_t> tokens, targets;
  for (std::int64_t i = first; i < first + count; ++i) {
    const auto s = sequence(step, i);
    tokens.insert(tokens.end(), s.begin(), s.end() - 1);
    targets.insert(targets.end(), s.begin() + 1, s.end());
  }
  return {tokens, targets};
}

std::vector<double> single_process() {
  nn::Llama model(config());
  model.init_weights(3);
  nn::AdamW opt(model.parameters(), {.lr = 3e-3});
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    const auto [tokens, targets] = slice(step, 0, kGlobalBatch);
    model.parameters().zero_grad();
    losses.push_back(model.forward(tokens.data(), targets.data(), kGlobalBatch, kSeq));
    model.backward();
    nn::clip_grad_norm(model.parameters(), 1.0);
    opt.step(3e-3);
  }
  return losses;
}

// DDP for the gradients; AdamW whole on every rank, or split by ZeRO stage 1.
std::vector<double> data_parallel(int ranks, std::size_t bucket_bytes, bool zero1 = false) {
  std::vector<double> losses(kSteps);
  dist::run_threads(ranks, [&](dist::ProcessGroup& pg) {
    nn::Llama model(config());
    model.init_weights(3);
    DistributedDataParallel ddp(model, pg, bucket_bytes);
    ddp.check_parameters_identical();
    nn::AdamW opt(model.parameters(), {.lr = 3e-3});
    ZeroOptimizer zero(model.parameters(), pg, {.lr = 3e-3});
    if (zero1) {
      EXPECT_EQ(zero.shard_size(), (zero.total_size() + ranks - 1) / ranks);
    }
    const std::int64_t local = kGlobalBatch / ranks;
    for (int step = 0; step < kSteps; ++step) {
      const auto [tokens, targets] = slice(step, pg.rank() * local, local);
      model.parameters().zero_grad();
      std::vector<double> loss{model.forward(tokens.data(), targets.data(), local, kSeq) / ranks};
      ddp.prepare_sync();
      model.backward(1.0 / ranks);  // each rank's share of the global mean
      ddp.finish_sync();
      nn::clip_grad_norm(model.parameters(), 1.0);
      if (zero1) {
        zero.step(3e-3);
      } else {
        opt.step(3e-3);
      }
      pg.all_reduce(loss);  // the global mean loss
      if (pg.rank() == 0) losses[static_cast<std::size_t>(step)] = loss[0];
    }
  });
  return losses;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rel,
                  const std::string& what) {
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::abs(want[i]));
  }
  EXPECT_LE(worst, rel) << what;
  std::printf("%s: largest relative loss difference over %d steps %.2e\n", what.c_str(), kSteps, worst);
}

TEST(DdpTest, LossesEqualOneProcess) {
  const auto one = single_process();
  EXPECT_LT(one.back(), one.front());  // it learns
  expect_close(data_parallel(2, std::size_t{25} << 20), one, 1e-6, "DDP 2 ranks");
  expect_close(data_parallel(4, std::size_t{25} << 20), one, 1e-6, "DDP 4 ranks");
  expect_close(data_parallel(2, 4096), one, 1e-6, "DDP 2 ranks, small buckets");
}

TEST(ZeroTest, SplitOptimizerStateGivesTheSameLosses) {
  const auto one = single_process();
  expect_close(data_parallel(2, std::size_t{25} << 20, true), one, 1e-6, "ZeRO-1 2 ranks");
  expect_close(data_parallel(3, std::size_t{25} << 20, true), one, 1e-6, "ZeRO-1 3 ranks");
}

TEST(DeviceMeshTest, GroupsAndCoordinates) {
  dist::run_threads(4, [](dist::ProcessGroup& pg) {
    auto world = std::shared_ptr<dist::ProcessGroup>(&pg, [](dist::ProcessGroup*) {});
    DeviceMesh mesh(world, {{"dp_replicate", 2}, {"dp_shard", 2}});
    EXPECT_EQ(mesh.coordinate("dp_replicate"), pg.rank() / 2);
    EXPECT_EQ(mesh.coordinate("dp_shard"), pg.rank() % 2);
    EXPECT_EQ(mesh.group("dp_shard").size(), 2);
    std::vector<int> v{pg.rank()};
    mesh.group("dp_shard").all_reduce(v);  // ranks {0,1} and {2,3}
    EXPECT_EQ(v[0], pg.rank() < 2 ? 1 : 5);
    v[0] = pg.rank();
    mesh.group("dp_replicate").all_reduce(v);  // ranks {0,2} and {1,3}
    EXPECT_EQ(v[0], pg.rank() % 2 == 0 ? 2 : 4);
    try {
      DeviceMesh bad(world, {{"dp", 3}});
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("dp=3 is 3 ranks, but the job has 4"));
    }
    EXPECT_THROW(mesh.size("tp"), InvalidArgument);
  });
}

}  // namespace
}  // namespace weft::parallel
