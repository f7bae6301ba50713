// Tensor parallelism against one process: the same model and batch on 2 and 4 thread ranks,
// with and without sequence parallelism and loss parallel, grouped-query heads, tied
// embeddings and activation checkpointing. Each rank's initial slices must be bitwise those
// of the whole model; the loss and every gradient (gathered into whole tensors) must match.
#include "weft/parallel/tensor_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "weft/dist/run_threads.h"
#include "weft/tensor/random.h"

namespace weft::parallel {
namespace {

constexpr std::int64_t kBatch = 2, kSeq = 8, kVocab = 64;

struct Case {
  int tp;
  bool sequence_parallel, loss_parallel, tie = false, checkpointing = false;
};

std::string name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return "tp" + std::to_string(c.tp) + (c.sequence_parallel ? "_sp" : "") +
         (c.loss_parallel ? "_lossparallel" : "") + (c.tie ? "_tied" : "") +
         (c.checkpointing ? "_checkpointing" : "");
}

nn::LlamaConfig config(bool tie) {
  return {.dim = 64,
          .n_layers = 2,
          .n_heads = 8,
          .n_kv_heads = 4,
          .vocab_size = kVocab,
          .multiple_of = 16,
          .max_seq_len = kSeq,
          .tie_embeddings = tie};
}

std::vector<std::int32_t> tokens(std::uint64_t salt) {
  std::vector<std::int32_t> t(kBatch * kSeq);
  for (std::size_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<std::int32_t>(philox_uniform(philox_key(salt, "tp"), i) * kVocab);
  return t;
}

// The largest |a - b| over the largest |b|: gradients are compared as whole tensors.
double relative_difference(const Tensor& a, const Tensor& b) {
  double diff = 0, scale = 1e-30;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, std::fabs(double(a.data<float>()[i]) - b.data<float>()[i]));
    scale = std::max(scale, std::fabs(double(b.data<float>()[i])));
  }
  return diff / scale;
}

class TensorParallelTest : public testing::TestWithParam<Case> {};

TEST_P(TensorParallelTest, MatchesOneProcess) {
  const Case c = GetParam();
  const auto input = tokens(1), target = tokens(2);
  nn::Llama whole(config(c.tie));
  whole.init_weights(7);
  const double loss = whole.forward(input.data(), target.data(), kBatch, kSeq);
  whole.backward(0.5);
  nn::StateDict grads;
  for (const auto& p : whole.parameters().all()) grads.emplace_back(p->name, p->grad);

  dist::run_threads(c.tp, [&](dist::ProcessGroup& pg) {
    nn::Llama model(config(c.tie));
    apply_tensor_parallel(model, pg, c.sequence_parallel, c.loss_parallel);
    model.set_activation_checkpointing(c.checkpointing);
    model.init_weights(7);
    const nn::StateDict expected = take_slices(whole.parameters().state_dict(), model.parameters());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const Tensor& mine = model.parameters().all()[i]->value;
      ASSERT_EQ(mine.shape(), expected[i].second.shape()) << expected[i].first;
      ASSERT_TRUE(std::equal(mine.data<float>(), mine.data<float>() + mine.numel(),
                             expected[i].second.contiguous().data<float>()))
          << expected[i].first << " is not the whole model's slice";
    }
    for (int pass = 0; pass < 2; ++pass) {  // twice: gradients accumulate, buffers are reused
      const double l = model.forward(input.data(), target.data(), kBatch, kSeq);
      EXPECT_NEAR(l, loss, 1e-6 * loss) << "rank " << pg.rank();
      model.backward(0.25);
    }
    nn::StateDict mine;
    for (const auto& p : model.parameters().all()) mine.emplace_back(p->name, p->grad);
    const nn::StateDict full = gather_full(mine, model.parameters(), pg);
    if (pg.rank() != 0) return;
    ASSERT_EQ(full.size(), grads.size());
    for (std::size_t i = 0; i < full.size(); ++i) {
      EXPECT_LT(relative_difference(full[i].second, grads[i].second), 1e-5) << full[i].first;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, TensorParallelTest,
                         testing::Values(Case{2, false, false}, Case{2, false, true},
                                         Case{2, true, false}, Case{2, true, true},
                                         Case{4, true, true}, Case{4, false, true},
                                         Case{2, true, true, /*tie=*/true},
                                         Case{2, true, true, false,
                                              /*checkpointing=*/true}),
                         name);

// The config has 8 heads, 4 key/value heads, a feed-forward width of 176 and 64 words.
TEST(TensorParallelErrors, DegreesThatDoNotDivideAreNamed) {
  const auto message = [](std::int64_t degree) {
    try {
      config(false).validate_tensor_parallel(degree);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(3),
            "tensor_parallel_degree 3 does not divide n_heads 8, n_kv_heads 4, the feed-forward "
            "width 176, vocab_size 64; every rank must hold an equal slice of each");
  EXPECT_EQ(message(8),
            "tensor_parallel_degree 8 does not divide n_kv_heads 4; every rank must hold an "
            "equal slice of each");
  EXPECT_EQ(message(4), "no error");
}

TEST(TensorParallelErrors, SequenceParallelNeedsRowsThatDivide) {
  dist::run_threads(2, [&](dist::ProcessGroup& pg) {
    nn::Llama model(config(false));
    apply_tensor_parallel(model, pg, true, true);
    model.init_weights(1);
    const auto t = tokens(3);
    try {
      model.forward(t.data(), t.data(), 1, 7);
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("enable_sequence_parallel"), std::string::npos);
    }
  });
}

}  // namespace
}  // namespace weft::parallel
