#include "weft/nn/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "weft/base/error.h"
#include "weft/kernels/loss.h"
#include "weft/tensor/random.h"

namespace weft::nn {
namespace {

BlockConfig block_config(const LlamaConfig& c) {
  return {AttentionConfig{c.dim, c.n_heads, c.kv_heads(), c.rope_theta}, c.hidden_dim(),
          c.norm_eps};
}

void call(const std::function<void(int)>& hook, int unit) {
  if (hook) hook(unit);
}

void require(bool ok, const std::string& what) {
  if (!ok) throw InvalidArgument("model: " + what);
}

// The standard deviation a parameter starts from (TorchTitan's scheme, without truncation):
// embedding 1 (dim^-0.5 when tied to the output), output dim^-0.5, norms 1 (constant),
// wq/wk/wv/w1 0.02, and the layers that write into the residual stream (wo, w2, w3)
// 0.02 / sqrt(2 (layer + 1)).
double init_std(const std::string& name, const LlamaConfig& c) {
  const double dim_scale = 1.0 / std::sqrt(static_cast<double>(c.dim));
  if (name == "tok_embeddings.weight") return c.tie_embeddings ? dim_scale : 1.0;
  if (name == "output.weight") return dim_scale;
  const bool residual = name.find(".wo.") != std::string::npos ||
                        name.find(".w2.") != std::string::npos ||
                        name.find(".w3.") != std::string::npos;
  if (!residual) return 0.02;
  const int layer = std::stoi(name.substr(7));  // "layers.<i>...."
  return 0.02 / std::sqrt(2.0 * (layer + 1));
}

}  // namespace

std::int64_t LlamaConfig::hidden_dim() const {
  const std::int64_t hidden = 2 * (4 * dim) / 3;
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

void LlamaConfig::validate() const {
  require(dim > 0 && n_layers > 0 && n_heads > 0 && vocab_size > 0 && max_seq_len > 0 &&
              multiple_of > 0,
          "dim, n_layers, n_heads, vocab_size, max_seq_len and multiple_of must be positive");
  require(dim % n_heads == 0,
          "dim " + std::to_string(dim) + " is not divisible by n_heads " + std::to_string(n_heads));
  require((dim / n_heads) % 2 == 0,
          "the head dimension dim / n_heads = " + std::to_string(dim / n_heads) +
              " must be even (RoPE pairs)");
  require(n_kv_heads >= 0 && n_heads % kv_heads() == 0, "n_heads " + std::to_string(n_heads) +
                                                            " must be a multiple of n_kv_heads " +
                                                            std::to_string(n_kv_heads));
  require(rope_theta > 0 && norm_eps > 0, "rope_theta and norm_eps must be positive");
}

Llama::Llama(const LlamaConfig& config)
    : config_((config.validate(), config)),
      tok_embeddings_(params_, "tok_embeddings", config.vocab_size, config.dim),
      norm_(params_, "norm", config.dim, config.norm_eps),
      output_(config.tie_embeddings
                  ? Linear(tok_embeddings_.weight(), config.dim, config.vocab_size)
                  : Linear(params_, "output", config.dim, config.vocab_size)) {
  // Blocks register after the embedding, norm and output: the names, not the order, identify
  // parameters in checkpoints.
  for (int l = 0; l < config.n_layers; ++l) {
    layers_.push_back(std::make_unique<TransformerBlock>(params_, l, block_config(config)));
  }
}

void Llama::init_weights(std::uint64_t seed) {
  for (const auto& p : params_.all()) {
    init_values(p->name, seed, 0, p->value.numel(), p->value.data<float>());
  }
}

void Llama::init_values(const std::string& name, std::uint64_t seed, std::int64_t first,
                        std::int64_t count, float* out) const {
  if (name.ends_with("norm.weight")) {
    std::fill(out, out + count, 1.0f);
    return;
  }
  fill_normal(out, count, philox_key(seed, name), first, 0.0, init_std(name, config_));
}

void Llama::set_activation_checkpointing(bool on) {
  for (auto& block : layers_) block->set_checkpointing(on);
}

double Llama::forward(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t batch,
                      std::int64_t seq) {
  require(batch > 0 && seq > 0 && seq <= config_.max_seq_len,
          "sequence length " + std::to_string(seq) +
              " must be in [1, max_seq_len = " + std::to_string(config_.max_seq_len) + "]");
  batch_ = batch;
  seq_ = seq;
  const std::int64_t rows = batch * seq, dim = config_.dim;
  tokens_.assign(tokens, tokens + rows);
  targets_.assign(targets, targets + rows);
  const int last = static_cast<int>(config_.n_layers);
  float* x = ensure(x_, {rows, dim});
  call(hooks_.before_forward, -1);
  tok_embeddings_.forward(tokens, rows, x);
  call(hooks_.after_forward, -1);
  for (int l = 0; l < last; ++l) {
    call(hooks_.before_forward, l);
    layers_[static_cast<std::size_t>(l)]->forward(x, batch, seq);
    call(hooks_.after_forward, l);
  }
  call(hooks_.before_forward, last);
  std::memcpy(ensure(final_in_, {rows, dim}), x,
              static_cast<std::size_t>(rows * dim) * sizeof(float));
  float* xn = ensure(xn_, {rows, dim});
  norm_.forward(x, xn, ensure(rstd_, {rows}), rows);
  float* logits = ensure(logits_, {rows, config_.vocab_size});
  output_.forward(xn, logits, rows);
  call(hooks_.after_forward, last);
  const double total = kernels::cross_entropy_forward(logits, targets, rows, config_.vocab_size,
                                                      ensure(losses_, {rows}));
  return total / static_cast<double>(rows);
}

void Llama::backward(double loss_scale) {
  const std::int64_t rows = batch_ * seq_, dim = config_.dim;
  require(rows > 0, "backward() before forward()");
  const int last = static_cast<int>(config_.n_layers);
  call(hooks_.before_backward, last);
  float* dlogits = ensure(dlogits_, {rows, config_.vocab_size});
  kernels::cross_entropy_backward(logits_.data<float>(), targets_.data(), rows, config_.vocab_size,
                                  loss_scale / static_cast<double>(rows), dlogits);
  float* dxn = ensure(dxn_, {rows, dim});
  output_.backward(dlogits, xn_.data<float>(), dxn, rows);
  float* dx = x_.data<float>();  // the forward's activations are no longer needed
  norm_.backward(dxn, final_in_.data<float>(), rstd_.data<float>(), dx, rows);
  call(hooks_.after_backward, last);
  for (int l = last - 1; l >= 0; --l) {
    call(hooks_.before_backward, l);
    layers_[static_cast<std::size_t>(l)]->backward(dx, batch_, seq_);
    call(hooks_.after_backward, l);
  }
  call(hooks_.before_backward, -1);
  tok_embeddings_.backward(tokens_.data(), rows, dx);
  call(hooks_.after_backward, -1);
}

int Llama::unit_of(const std::string& name) const {
  if (name == "tok_embeddings.weight") return -1;  // tied or not: the embedding's backward is last
  if (name.rfind("layers.", 0) == 0) return std::stoi(name.substr(7));
  return static_cast<int>(config_.n_layers);  // norm, output
}

KVCache Llama::make_cache() const {
  KVCache cache;
  const std::int64_t width = config_.kv_heads() * (config_.dim / config_.n_heads);
  for (std::int64_t l = 0; l < config_.n_layers; ++l) {
    cache.layers.push_back(
        {Tensor::zeros({config_.max_seq_len, width}), Tensor::zeros({config_.max_seq_len, width})});
  }
  cache.capacity = config_.max_seq_len;
  return cache;
}

const float* Llama::forward_cached(const std::int32_t* tokens, std::int64_t n, KVCache& cache) {
  require(n > 0 && cache.length + n <= cache.capacity,
          "generating past max_seq_len = " + std::to_string(cache.capacity) + " positions");
  const std::int64_t dim = config_.dim, position = cache.length;
  float* x = ensure(x_, {n, dim});
  tok_embeddings_.forward(tokens, n, x);
  for (std::size_t l = 0; l < layers_.size(); ++l)
    layers_[l]->forward_cached(x, n, position, cache.layers[l]);
  float* xn = ensure(xn_, {1, dim});
  norm_.forward(x + (n - 1) * dim, xn, ensure(rstd_, {1}), 1);
  float* logits = ensure(logits_, {1, config_.vocab_size});
  output_.forward(xn, logits, 1);
  cache.length += n;
  return logits;
}

double Llama::flops_per_token(std::int64_t seq) const {
  double matmul = 0;
  for (const auto& p : params_.all()) {
    if (p->value.ndim() == 2 && p->name != "tok_embeddings.weight")
      matmul += static_cast<double>(p->value.numel());
  }
  if (config_.tie_embeddings) matmul += static_cast<double>(config_.dim * config_.vocab_size);
  return 6.0 * matmul + 12.0 * static_cast<double>(config_.n_layers * config_.dim * seq);
}

}  // namespace weft::nn
