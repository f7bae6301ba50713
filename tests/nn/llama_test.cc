#include "weft/nn/llama.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "weft/tensor/random.h"

namespace weft::nn {
namespace {

LlamaConfig tiny(bool tied = false) {
  return {.dim = 16,
          .n_layers = 2,
          .n_heads = 4,
          .n_kv_heads = 2,
          .vocab_size = 11,
          .multiple_of = 8,
          .max_seq_len = 8,
          .tie_embeddings = tied};
}

struct Batch {
  std::vector<std::int32_t> tokens, targets;
};

Batch batch(std::int64_t b, std::int64_t t, std::int64_t vocab, unsigned seed) {
  std::mt19937 gen(seed);
  Batch out;
  for (std::int64_t i = 0; i < b * t; ++i) {
    out.tokens.push_back(static_cast<std::int32_t>(gen() % vocab));
    out.targets.push_back(static_cast<std::int32_t>(gen() % vocab));
  }
  return out;
}

TEST(PhiloxTest, KnownAnswerAndShardIndependence) {
  // Random123's known answer for philox4x32-10, counter 0, key 0.
  std::uint32_t w[4];
  philox4x32({0, 0}, 0, w);
  EXPECT_EQ(w[0], 0x6627e8d5u);
  EXPECT_EQ(w[1], 0xe169c58du);
  EXPECT_EQ(w[2], 0xbc57ac4cu);
  EXPECT_EQ(w[3], 0x9b00dbd8u);
  // Elements 100..149 are the same whether generated alone or as part of 0..199.
  const PhiloxKey key = philox_key(7, "layers.0.attention.wq.weight");
  std::vector<float> whole(200), part(50);
  fill_normal(whole.data(), 200, key, 0, 0.0, 1.0);
  fill_normal(part.data(), 50, key, 100, 0.0, 1.0);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(part[i], whole[100 + i]);
  double mean = 0, var = 0;
  std::vector<double> many(20000);
  fill_normal(many.data(), 20000, key, 0, 0.0, 1.0);
  for (double x : many) mean += x / 20000;
  for (double x : many) var += (x - mean) * (x - mean) / 20000;
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(var, 1.0, 0.05);
}

TEST(LlamaTest, ParametersHaveTorchTitansNamesAndShapes) {
  Llama model(tiny());
  EXPECT_EQ(model.parameters().at("layers.1.attention.wk.weight").value.shape(), (Shape{8, 16}));
  EXPECT_EQ(model.parameters().at("layers.0.feed_forward.w1.weight").value.shape(),
            (Shape{48, 16}));
  EXPECT_EQ(model.parameters().at("output.weight").value.shape(), (Shape{11, 16}));
  EXPECT_EQ(model.parameters().all().size(), 3u + 2 * 9);
  EXPECT_EQ(Llama(tiny(true)).parameters().all().size(), 2u + 2 * 9);
  EXPECT_THROW(Llama(LlamaConfig{.dim = 30, .n_heads = 4}), InvalidArgument);
}

TEST(LlamaTest, InitialLossIsNearLogVocab) {
  Llama model(LlamaConfig{.dim = 32,
                          .n_layers = 2,
                          .n_heads = 2,
                          .n_kv_heads = 2,
                          .vocab_size = 64,
                          .max_seq_len = 16});
  model.init_weights(1);
  const Batch b = batch(2, 16, 64, 3);
  const double loss = model.forward(b.tokens.data(), b.targets.data(), 2, 16);
  EXPECT_NEAR(loss, std::log(64.0), 1.0);
}

// Every parameter's gradient against central differences of the float32 loss (tolerances
// sized for float32: h = 1e-2 on a loss of about 2.4).
void check_gradients(bool tied) {
  Llama model(tiny(tied));
  model.init_weights(5);
  for (const auto& p : model.parameters().all()) {  // larger weights: gradients well above noise
    float* v = p->value.data<float>();
    for (std::int64_t i = 0; i < p->value.numel(); ++i)
      v[i] *= p->name.ends_with("norm.weight") ? 1.0f : 10.0f;
  }
  const Batch b = batch(2, 7, 11, 9);
  model.parameters().zero_grad();
  model.forward(b.tokens.data(), b.targets.data(), 2, 7);
  model.backward();
  for (const auto& p : model.parameters().all()) {
    float* v = p->value.data<float>();
    const float* g = p->grad.data<float>();
    const std::int64_t step = std::max<std::int64_t>(1, p->value.numel() / 6);
    for (std::int64_t i = 0; i < p->value.numel(); i += step) {
      const float saved = v[i];
      const float h = 1e-2f;
      v[i] = saved + h;
      const double up = model.forward(b.tokens.data(), b.targets.data(), 2, 7);
      v[i] = saved - h;
      const double down = model.forward(b.tokens.data(), b.targets.data(), 2, 7);
      v[i] = saved;
      const double numeric = (up - down) / (2.0 * h);
      EXPECT_NEAR(g[i], numeric, 2e-3 + 2e-2 * std::abs(numeric)) << p->name << "[" << i << "]";
    }
  }
}

TEST(LlamaTest, GradientsMatchFiniteDifferences) { check_gradients(false); }
TEST(LlamaTest, TiedGradientsMatchFiniteDifferences) { check_gradients(true); }

TEST(LlamaTest, ActivationCheckpointingChangesNothing) {
  const Batch b = batch(3, 8, 11, 4);
  std::vector<std::vector<float>> grads[2];
  double losses[2];
  for (int c = 0; c < 2; ++c) {
    Llama model(tiny());
    model.init_weights(11);
    model.set_activation_checkpointing(c == 1);
    for (int step = 0; step < 2; ++step) {  // twice: buffers released and remade
      model.parameters().zero_grad();
      losses[c] = model.forward(b.tokens.data(), b.targets.data(), 3, 8);
      model.backward();
    }
    for (const auto& p : model.parameters().all()) grads[c].push_back(p->grad.to_vector<float>());
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(grads[0], grads[1]);  // bitwise
}

// Zero bubble's I and W: with a DeferredWeightGrads the backward leaves every linear layer's
// gradient untouched (the norms' and the embedding's are computed), and run() then gives
// bitwise the gradients of the whole backward, with or without activation checkpointing.
TEST(LlamaTest, DeferredWeightGradientsRunLaterToTheSameBits) {
  const Batch b = batch(3, 8, 11, 5);
  for (bool checkpointing : {false, true}) {
    std::vector<std::vector<float>> grads[2];
    for (int deferring = 0; deferring < 2; ++deferring) {
      Llama model(tiny());
      model.init_weights(12);
      model.set_activation_checkpointing(checkpointing);
      model.parameters().zero_grad();
      const LayerRange whole{0, 2};
      std::vector<float> x(static_cast<std::size_t>(3 * 8 * 16));
      model.forward_stage(whole, b.tokens.data(), b.targets.data(), x.data(), 3, 8);
      DeferredWeightGrads deferred;
      model.backward_stage(whole, x.data(), 1.0, deferring == 1 ? &deferred : nullptr);
      if (deferring == 1) {
        EXPECT_FALSE(deferred.empty());
        for (const auto& p : model.parameters().all()) {
          const bool linear = p->value.ndim() == 2 && p->name != "tok_embeddings.weight";
          const auto g = p->grad.to_vector<float>();
          const bool zero = std::all_of(g.begin(), g.end(), [](float v) { return v == 0; });
          EXPECT_EQ(zero, linear) << p->name << (checkpointing ? ", checkpointing" : "");
        }
        deferred.run();
        EXPECT_TRUE(deferred.empty());
      }
      for (const auto& p : model.parameters().all())
        grads[deferring].push_back(p->grad.to_vector<float>());
    }
    EXPECT_EQ(grads[0], grads[1]) << (checkpointing ? "checkpointing" : "");  // bitwise
  }
}

// Sets Linear's product dtype for a scope, then back to float32.
struct MatmulDtype {
  explicit MatmulDtype(DType dtype) { set_matmul_dtype(dtype); }
  ~MatmulDtype() { set_matmul_dtype(DType::kFloat32); }
};

// Mixed precision: a Linear in bf16 computes, forward and both halves of backward, what a
// float32 Linear computes on the bf16-rounded weight, input and output gradient.
TEST(MixedPrecisionTest, LinearIsFloat32LinearOnRoundedOperands) {
  const std::int64_t rows = 40, in = 24, out = 16;
  auto random = [](std::int64_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> dist;
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& e : v) e = dist(gen);
    return v;
  };
  auto rounded = [](std::vector<float> v) {
    for (float& e : v) e = static_cast<float>(BFloat16(e));
    return v;
  };
  const auto x = random(rows * in, 1), dy = random(rows * out, 2), w = random(out * in, 3);
  std::vector<float> y[2], dx[2], dw[2];
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    MatmulDtype dtype(bf16 == 1 ? DType::kBFloat16 : DType::kFloat32);
    ParameterList params;
    Linear linear(params, "l", in, out);
    const auto weight = bf16 == 1 ? w : rounded(w);
    std::copy(weight.begin(), weight.end(), linear.weight().value.data<float>());
    const auto input = bf16 == 1 ? x : rounded(x), grad = bf16 == 1 ? dy : rounded(dy);
    y[bf16].resize(rows * out);
    dx[bf16].resize(rows * in);
    linear.forward(input.data(), y[bf16].data(), rows);
    linear.backward(grad.data(), input.data(), dx[bf16].data(), rows);
    dw[bf16] = linear.weight().grad.to_vector<float>();
  }
  for (auto* pair : {y, dx, dw}) {
    for (std::size_t i = 0; i < pair[0].size(); ++i)
      ASSERT_NEAR(pair[1][i], pair[0][i], 1e-5 * (1 + std::abs(pair[0][i]))) << i;
  }
  EXPECT_THROW(set_matmul_dtype(DType::kFloat16), InvalidArgument);
}

// The whole model in mixed precision follows float32: the loss within bf16's rounding, every
// gradient close, the weights and gradients still float32, and less activation memory (the
// norms' and SwiGLU's outputs kept in bf16 for the products that read them, and attention's
// q|k|v rows and output).
TEST(MixedPrecisionTest, LlamaFollowsFloat32) {
  const Batch b = batch(3, 8, 11, 4);
  double losses[2];
  std::int64_t activations[2];
  std::vector<std::vector<float>> grads[2];
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    MatmulDtype dtype(bf16 == 1 ? DType::kBFloat16 : DType::kFloat32);
    Llama model(tiny());
    model.init_weights(11);
    model.parameters().zero_grad();
    losses[bf16] = model.forward(b.tokens.data(), b.targets.data(), 3, 8);
    activations[bf16] = model.activation_bytes();
    model.backward();
    for (const auto& p : model.parameters().all()) {
      EXPECT_EQ(p->grad.dtype(), DType::kFloat32);
      grads[bf16].push_back(p->grad.to_vector<float>());
    }
  }
  EXPECT_NE(losses[0], losses[1]);  // the products did run in bf16
  // Per block 2 norm outputs of dim, w1|w3's of 2 hidden, SwiGLU's of hidden, the q|k|v rows
  // and attention's output (dim), at 2 bytes instead of 4.
  const LlamaConfig c = tiny();
  const std::int64_t qkv = (c.n_heads + 2 * c.kv_heads()) * (c.dim / c.n_heads);
  EXPECT_EQ(activations[0] - activations[1],
            c.n_layers * 3 * 8 * (3 * c.dim + 3 * c.hidden_dim() + qkv) * 2);
  EXPECT_NEAR(losses[1], losses[0], 1e-2 * losses[0]);
  for (std::size_t p = 0; p < grads[0].size(); ++p) {
    double norm = 0, diff = 0;
    for (std::size_t i = 0; i < grads[0][p].size(); ++i) {
      norm += grads[0][p][i] * grads[0][p][i];
      diff += (grads[1][p][i] - grads[0][p][i]) * (grads[1][p][i] - grads[0][p][i]);
    }
    EXPECT_LT(std::sqrt(diff), 2e-2 * std::sqrt(norm) + 1e-6) << "parameter " << p;
  }
}

// Generating with the KV cache gives the logits of the full forward, position by position.
TEST(LlamaTest, KvCacheMatchesTheFullForward) {
  Llama model(tiny());
  model.init_weights(2);
  const Batch b = batch(1, 7, 11, 6);
  model.forward(b.tokens.data(), b.targets.data(), 1, 7);
  const std::vector<float> full = model.logits().to_vector<float>();
  KVCache cache = model.make_cache();
  const float* last = model.forward_cached(b.tokens.data(), 3, cache);  // a prompt of 3
  for (int v = 0; v < 11; ++v) EXPECT_NEAR(last[v], full[2 * 11 + v], 1e-5);
  for (int t = 3; t < 7; ++t) {
    last = model.forward_cached(&b.tokens[static_cast<std::size_t>(t)], 1, cache);
    for (int v = 0; v < 11; ++v)
      EXPECT_NEAR(last[v], full[static_cast<std::size_t>(t * 11 + v)], 1e-5) << t;
  }
  EXPECT_EQ(cache.length, 7);
  const std::int32_t more[2] = {1, 2};
  EXPECT_THROW(model.forward_cached(more, 2, cache), InvalidArgument);  // past max_seq_len 8
}

TEST(LlamaTest, StateDictRoundTrips) {
  Llama a(tiny()), b(tiny());
  a.init_weights(3);
  auto state = a.parameters().state_dict();
  EXPECT_EQ(state.front().first, "tok_embeddings.weight");
  b.parameters().load_state_dict(state);
  EXPECT_EQ(b.parameters().at("layers.1.attention.wv.weight").value.to_vector<float>(),
            a.parameters().at("layers.1.attention.wv.weight").value.to_vector<float>());
  auto repeated = state;
  repeated[1] = repeated[0];
  EXPECT_THROW(b.parameters().load_state_dict(repeated), InvalidArgument);
  state.back().second = Tensor::zeros({3});
  EXPECT_THROW(b.parameters().load_state_dict(state), InvalidArgument);
  state.pop_back();
  EXPECT_THROW(b.parameters().load_state_dict(state), InvalidArgument);
}

TEST(LlamaTest, InitDependsOnlyOnSeedAndName) {
  Llama a(tiny()), b(tiny());
  a.init_weights(3);
  b.init_weights(3);
  EXPECT_EQ(a.parameters().at("layers.1.feed_forward.w2.weight").value.to_vector<float>(),
            b.parameters().at("layers.1.feed_forward.w2.weight").value.to_vector<float>());
  b.init_weights(4);
  EXPECT_NE(a.parameters().at("norm.weight").value.to_vector<float>(), std::vector<float>());
  EXPECT_NE(a.parameters().at("output.weight").value.to_vector<float>(),
            b.parameters().at("output.weight").value.to_vector<float>());
}

}  // namespace
}  // namespace weft::nn
