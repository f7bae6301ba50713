#include "weft/nn/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "weft/base/error.h"
#include "weft/kernels/convert.h"
#include "weft/kernels/loss.h"
#include "weft/nn/parameter.h"
#include "weft/tensor/random.h"

namespace weft::nn {
namespace {

BlockConfig block_config(const LlamaConfig& c) {
  return {AttentionConfig{c.dim, c.n_heads, c.kv_heads(), c.rope_theta}, c.hidden_dim(),
          c.norm_eps};
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
  std::int64_t hidden = 2 * (4 * dim) / 3;
  if (ffn_dim_multiplier > 0) {
    hidden = static_cast<std::int64_t>(ffn_dim_multiplier * static_cast<double>(hidden));
  }
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

std::vector<std::pair<std::string, Shape>> LlamaConfig::parameter_shapes() const {
  const std::int64_t q = dim / n_heads * n_heads, kv = dim / n_heads * kv_heads();
  const std::int64_t hidden = hidden_dim();
  std::vector<std::pair<std::string, Shape>> shapes = {{"tok_embeddings.weight", {vocab_size, dim}},
                                                       {"norm.weight", {dim}}};
  if (!tie_embeddings) shapes.emplace_back("output.weight", Shape{vocab_size, dim});
  for (std::int64_t l = 0; l < n_layers; ++l) {
    const std::string layer = "layers." + std::to_string(l) + ".";
    for (auto& [name, shape] :
         std::vector<std::pair<std::string, Shape>>{{"attention_norm.weight", {dim}},
                                                    {"ffn_norm.weight", {dim}},
                                                    {"attention.wq.weight", {q, dim}},
                                                    {"attention.wk.weight", {kv, dim}},
                                                    {"attention.wv.weight", {kv, dim}},
                                                    {"attention.wo.weight", {dim, q}},
                                                    {"feed_forward.w1.weight", {hidden, dim}},
                                                    {"feed_forward.w3.weight", {hidden, dim}},
                                                    {"feed_forward.w2.weight", {dim, hidden}}}) {
      shapes.emplace_back(layer + name, shape);
    }
  }
  return shapes;
}

std::int64_t LlamaConfig::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& [name, shape] : parameter_shapes()) n += shape_numel(shape);
  return n;
}

double LlamaConfig::flops_per_token(std::int64_t seq) const {
  double products = 0;
  for (const auto& [name, shape] : parameter_shapes()) {
    if (shape.size() == 2 && name != "tok_embeddings.weight")
      products += static_cast<double>(shape_numel(shape));
  }
  if (tie_embeddings) products += static_cast<double>(dim * vocab_size);
  return 6.0 * products + 12.0 * static_cast<double>(n_layers * dim * seq);
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

void LlamaConfig::validate_tensor_parallel(std::int64_t degree) const {
  if (degree <= 1) return;
  std::string bad;
  const auto check = [&](const char* what, std::int64_t n) {
    if (n % degree != 0)
      bad += std::string(bad.empty() ? "" : ", ") + what + " " + std::to_string(n);
  };
  check("n_heads", n_heads);
  check("n_kv_heads", kv_heads());
  check("the feed-forward width", hidden_dim());
  check("vocab_size", vocab_size);
  if (!bad.empty()) {
    throw InvalidArgument("tensor_parallel_degree " + std::to_string(degree) + " does not divide " +
                          bad + "; every rank must hold an equal slice of each");
  }
}

std::int64_t Activations::bytes() const {
  std::int64_t n = 0;
  for (const Tensor& t : tensors) n += bytes_of({&t});
  return n;
}

Llama::Llama(const LlamaConfig& config)
    : config_((config.validate(), config)),
      tp_(std::make_unique<TensorParallelContext>(TensorParallel{})),
      stages_{{0, static_cast<int>(config_.n_layers)}} {
  build();
  whole_numel_ = params_.numel();
  for (const auto& p : params_.all()) whole_parameters_.emplace_back(p->name, p->full_shape);
}

void Llama::apply_tensor_parallel(TensorParallel tp) {
  if (!hooks_.empty()) throw InvalidArgument("apply_tensor_parallel after hooks were added");
  config_.validate_tensor_parallel(tp.size());
  tp_ = std::make_unique<TensorParallelContext>(std::move(tp));
  build();
}

void Llama::set_feature_blocks(int blocks) {
  if (blocks % tp_->plan().size() != 0) {
    throw InvalidArgument("layout-invariant feature blocks: " + std::to_string(blocks) +
                          " blocks cannot be shared by " + std::to_string(tp_->plan().size()) +
                          " tensor-parallel ranks");
  }
  params_.leaf_trees().set_feature_blocks(blocks);
  tp_->sum_canonically(&params_.leaf_trees());
}

void Llama::set_sequence_blocks(int blocks) {
  params_.leaf_trees().set_sequence_blocks(blocks, cp_.rank(), cp_.size());
}

void Llama::apply_context_parallel(ContextParallel cp) { cp_ = std::move(cp); }

void Llama::apply_pipeline(std::vector<LayerRange> stages) {
  if (!hooks_.empty()) throw InvalidArgument("apply_pipeline after hooks were added");
  require(!stages.empty(), "a pipeline rank holds at least one stage");
  int end = 0;
  for (const LayerRange& s : stages) {
    require(s.first >= end && s.first < s.last && s.last <= config_.n_layers,
            "pipeline stages must be non-empty layer ranges in [0, n_layers = " +
                std::to_string(config_.n_layers) + "], disjoint and in order; got layers " +
                std::to_string(s.first) + " to " + std::to_string(s.last));
    end = s.last;
  }
  const bool embedding = stages.front().first == 0, head = stages.back().last == config_.n_layers;
  require(!config_.tie_embeddings || embedding == head,
          "tied embeddings need the embedding and the output layer on one pipeline rank: untie "
          "them (model.tie_embeddings = false), or use ZBVZeroBubble, whose V layout puts the "
          "first and the last stage on rank 0");
  stages_ = std::move(stages);
  build();
}

void Llama::build() {
  const TensorParallel& tp = tp_->plan();
  const Sharding vocab_rows{0, tp.size(), tp.rank()};
  layers_.clear();
  output_.reset();
  norm_.reset();
  tok_embeddings_.reset();
  params_ = ParameterList();
  const int n = static_cast<int>(config_.n_layers);
  if (stages_.front().first == 0) {
    tok_embeddings_.emplace(params_, "tok_embeddings", config_.vocab_size, config_.dim, vocab_rows);
  }
  if (stages_.back().last == n) {
    norm_.emplace(params_, "norm", config_.dim, config_.norm_eps);
    if (config_.tie_embeddings) {
      output_.emplace(params_, tok_embeddings_->weight());
    } else {
      output_.emplace(params_, "output", config_.dim, config_.vocab_size, vocab_rows);
    }
  }
  // Blocks register after the embedding, norm and output: the names, not the order, identify
  // parameters in checkpoints.
  layers_.resize(static_cast<std::size_t>(n));
  for (const LayerRange& s : stages_) {
    for (int l = s.first; l < s.last; ++l) {
      layers_[static_cast<std::size_t>(l)] = std::make_unique<TransformerBlock>(
          params_, l, block_config(config_), *tp_, cp_, scratch_);
    }
  }
}

bool Llama::holds(LayerRange stage) const {
  return std::find(stages_.begin(), stages_.end(), stage) != stages_.end();
}

void Llama::check_shape(std::int64_t batch, std::int64_t seq) const {
  require(batch > 0 && seq > 0 && seq <= config_.max_seq_len,
          "batch " + std::to_string(batch) + " must be positive and sequence length " +
              std::to_string(seq) + " in [1, max_seq_len = " + std::to_string(config_.max_seq_len) +
              "]");
}

void Llama::require_whole(const char* what) const {
  require(stages_.size() == 1 && stages_[0] == LayerRange{0, static_cast<int>(config_.n_layers)},
          std::string(what) +
              " needs the whole model; this pipeline rank holds some stages only (use "
              "forward_stage and backward_stage)");
}

int Llama::add_unit_hooks(UnitHooks hooks) {
  hooks_.emplace_back(next_hooks_id_, std::move(hooks));
  return next_hooks_id_++;
}

void Llama::remove_unit_hooks(int id) {
  std::erase_if(hooks_, [id](const auto& h) { return h.first == id; });
}

void Llama::call(std::function<void(int)> UnitHooks::*hook, int unit, bool reverse) const {
  const auto run = [&](const UnitHooks& h) {
    if (h.*hook) (h.*hook)(unit);
  };
  if (reverse) {
    for (auto it = hooks_.rbegin(); it != hooks_.rend(); ++it) run(it->second);
  } else {
    for (const auto& h : hooks_) run(h.second);
  }
}

void Llama::init_weights(std::uint64_t seed) {
  for (const auto& p : params_.all()) {
    init_values(p->name, seed, 0, p->value.numel(), p->value.data<float>());
  }
}

// Elements of this rank's slice map to the whole parameter's: a slice along dimension 0 is
// one run of it, a slice along dimension 1 a run of columns in every row.
void Llama::init_values(const std::string& name, std::uint64_t seed, std::int64_t first,
                        std::int64_t count, float* out) const {
  if (name.ends_with("norm.weight")) {
    std::fill(out, out + count, 1.0f);
    return;
  }
  const Parameter& p = params_.at(name);
  const PhiloxKey key = philox_key(seed, name);
  const double stddev = init_std(name, config_);
  if (!p.sharded() || p.sharding.dim == 0) {
    const std::int64_t row = p.value.ndim() == 2 ? p.value.size(1) : 1;
    fill_normal(out, count, key, first + p.shard_offset() * row, 0.0, stddev);
    return;
  }
  const std::int64_t cols = p.value.size(1), full_cols = p.full_shape[1];
  for (std::int64_t i = first; i < first + count;) {
    const std::int64_t r = i / cols, c = i % cols, n = std::min(cols - c, first + count - i);
    fill_normal(out + (i - first), n, key, r * full_cols + p.shard_offset() + c, 0.0, stddev);
    i += n;
  }
}

void Llama::set_activation_checkpointing(bool on) {
  for (auto& block : layers_) {
    if (block) block->set_checkpointing(on);
  }
}

double Llama::forward(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t batch,
                      std::int64_t seq) {
  require_whole("forward");
  check_shape(batch, seq);
  float* x = ensure(x_, {tp_->local_rows(batch * seq), config_.dim});
  return forward_stage(stages_[0], tokens, targets, x, batch, seq);
}

// Under tensor parallelism each rank embeds the tokens of its vocabulary rows and the sum
// across the group (reduce-scattered to this rank's rows when sequence-parallel) is the
// embedding; the output layer gives this rank's vocabulary columns of the logits.
double Llama::forward_stage(LayerRange stage, const std::int32_t* tokens,
                            const std::int32_t* targets, float* x, std::int64_t batch,
                            std::int64_t seq) {
  require(holds(stage), "forward_stage of layers " + std::to_string(stage.first) + " to " +
                            std::to_string(stage.last) + ", which this rank does not hold");
  check_shape(batch, seq);
  const std::int64_t rows = batch * seq, dim = config_.dim;
  batch_ = batch;
  seq_ = seq;
  if (stage.first == 0) {
    tokens_.assign(tokens, tokens + rows);
    call(&UnitHooks::before_forward, -1, false);
    if (tp_->enabled()) {
      float* part = tp_->partial(rows, dim);
      tok_embeddings_->forward(tokens, rows, part);
      tp_->reduce(part, rows, dim, x, /*accumulate=*/false);
    } else {
      tok_embeddings_->forward(tokens, rows, x);
    }
    call(&UnitHooks::after_forward, -1, true);
  }
  for (int l = stage.first; l < stage.last; ++l) {
    call(&UnitHooks::before_forward, l, false);
    layers_[static_cast<std::size_t>(l)]->forward(x, batch, seq);
    call(&UnitHooks::after_forward, l, true);
  }
  if (stage.last < config_.n_layers) return 0;
  targets_.assign(targets, targets + rows);
  head_forward(x, rows);
  const double loss = loss_forward(rows);
  record_leaf_losses(rows);
  return loss / static_cast<double>(rows);
}

// The layout-invariant mode's loss: each leaf's losses summed in row order (double), for the
// canonical tree.
void Llama::record_leaf_losses(std::int64_t rows) {
  LeafTrees& trees = params_.leaf_trees();
  if (!trees.active()) return;
  const float* losses = losses_.data<float>();
  trees.for_each_leaf(rows, [&](std::int64_t leaf, std::int64_t first) {
    double sum = 0;
    for (std::int64_t i = first; i < first + trees.leaf_rows(); ++i) sum += losses[i];
    *trees.loss().open() = sum;
    trees.loss().add(leaf);
  });
}

// The final norm and the output layer, as unit n_layers.
void Llama::head_forward(float* x, std::int64_t rows) {
  const int last = static_cast<int>(config_.n_layers);
  const std::int64_t dim = config_.dim, local = tp_->local_rows(rows);
  call(&UnitHooks::before_forward, last, false);
  std::memcpy(ensure(final_in_, {local, dim}), x,
              static_cast<std::size_t>(local * dim) * sizeof(float));
  float* xn = ensure(xn_, {local, dim});
  norm_->forward(x, xn, ensure(rstd_, {local}), local);
  const float* xn_rows = xn;
  if (tp_->plan().sequence_sharded()) {  // kept for the output layer's backward
    float* full = ensure(xn_full_, {rows, dim});
    tp_->group().all_gather(xn, full, local * dim, DType::kFloat32);
    xn_rows = full;
  }
  float* logits = ensure(logits_, {rows, output_->out()});
  output_->forward(xn_rows, logits, rows);
  call(&UnitHooks::after_forward, last, true);
}

// The summed loss of the rows. Loss parallel: each rank's vocabulary columns, combined with
// a max and a sum all-reduce (3 floats a row); without it the logits are gathered.
double Llama::loss_forward(std::int64_t rows) {
  if (params_.leaf_trees().blocked()) return blocked_loss_forward(rows);
  const float* logits = logits_.data<float>();
  float* losses = ensure(losses_, {rows});
  if (!tp_->enabled()) {
    return kernels::cross_entropy_forward(logits, targets_.data(), rows, config_.vocab_size,
                                          losses);
  }
  const std::int64_t shard = output_->out(), first = tp_->plan().rank() * shard;
  if (!tp_->plan().loss_parallel) {
    float* gathered = ensure(gathered_logits_, {tp_->plan().size(), rows, shard});
    tp_->group().all_gather(logits, gathered, rows * shard, DType::kFloat32);
    float* all = ensure(all_logits_, {rows, config_.vocab_size});
    for (int r = 0; r < tp_->plan().size(); ++r) {
      for (std::int64_t i = 0; i < rows; ++i) {
        std::memcpy(all + i * config_.vocab_size + r * shard, gathered + (r * rows + i) * shard,
                    static_cast<std::size_t>(shard) * sizeof(float));
      }
    }
    return kernels::cross_entropy_forward(static_cast<const float*>(all), targets_.data(), rows,
                                          config_.vocab_size, losses);
  }
  float* max = ensure(shift_, {rows});
  float* sums = ensure(sums_, {2, rows});  // sum_exp, then the target's logit
  kernels::cross_entropy_shard_max(logits, rows, shard, max);
  tp_->group().all_reduce_max(max, rows);
  kernels::cross_entropy_shard_sums(logits, targets_.data(), rows, config_.vocab_size, first, shard,
                                    static_cast<const float*>(max), sums, sums + rows);
  tp_->group().all_reduce_sum(sums, 2 * rows);
  return losses_from(max, sums, sums + rows, rows);
}

// Each row's loss, max + log(sum_exp) - target_logit, into losses_, and their sum in row order
// (as the one-process kernel sums); max becomes the shift backward needs, max + log(sum_exp).
double Llama::losses_from(float* max, const float* sum_exp, const float* target_logit,
                          std::int64_t rows) {
  float* losses = losses_.data<float>();
  double total = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    max[i] += std::log(sum_exp[i]);
    losses[i] = max[i] - target_logit[i];
    total += static_cast<double>(losses[i]);
  }
  return total;
}

// This rank's vocabulary columns in blocks of vocab / blocks, loss-parallel whether or not
// loss parallelism is on (the logits are never gathered): the row's max over the group (exact),
// each block's sum of exponentials and target logit, then the blocks' tree, finished over the
// group on the ranks' subtrees (the target logit is one block's, zeros elsewhere: exact).
double Llama::blocked_loss_forward(std::int64_t rows) {
  const float* logits = logits_.data<float>();
  ensure(losses_, {rows});
  const int blocks = params_.leaf_trees().feature_blocks(), parts = tp_->plan().size();
  const std::int64_t shard = output_->out(), local = blocks / parts, width = shard / local;
  float* max = ensure(shift_, {rows});
  kernels::cross_entropy_shard_max(logits, rows, shard, max);
  if (tp_->enabled()) tp_->group().all_reduce_max(max, rows);
  LeafSums<float> tree(nullptr, 2 * rows);  // per block: sum_exp, then the target's logit
  for (std::int64_t j = 0; j < local; ++j) {
    float* s = tree.open(/*zeroed=*/false);
    kernels::cross_entropy_shard_sums(logits + j * width, targets_.data(), rows, config_.vocab_size,
                                      tp_->plan().rank() * shard + j * width, width,
                                      static_cast<const float*>(max), s, s + rows, shard);
    tree.add(tp_->plan().rank() * local + j);
  }
  const float* sums = tree.values(0);
  if (tp_->enabled()) {
    float* all = ensure(sums_, {parts, 2 * rows});
    tp_->group().all_gather(sums, all, 2 * rows, DType::kFloat32);
    sums = tp_->combine_subtrees(all, 2 * rows);
  }
  return losses_from(max, sums, sums + rows, rows);
}

// dlogits in float32, or in bfloat16 for the output layer's products under mixed precision.
// With blocked_loss_forward's shift, every rank's columns as loss parallelism computes them.
template <class G>
void Llama::loss_backward(std::int64_t rows, double scale, G* dlogits) {
  const float* logits = logits_.data<float>();
  if (params_.leaf_trees().blocked()) {
    kernels::cross_entropy_shard_backward(
        logits, targets_.data(), rows, config_.vocab_size, tp_->plan().rank() * output_->out(),
        output_->out(), static_cast<const float*>(shift_.data<float>()), scale, dlogits);
    return;
  }
  if (!tp_->enabled()) {
    kernels::cross_entropy_backward(logits, targets_.data(), rows, config_.vocab_size, scale,
                                    dlogits);
    return;
  }
  const std::int64_t shard = output_->out(), first = tp_->plan().rank() * shard;
  if (tp_->plan().loss_parallel) {
    kernels::cross_entropy_shard_backward(logits, targets_.data(), rows, config_.vocab_size, first,
                                          shard, static_cast<const float*>(shift_.data<float>()),
                                          scale, dlogits);
    return;
  }
  float* all = all_logits_.data<float>();  // the whole logits, turned into their gradient
  kernels::cross_entropy_backward(static_cast<const float*>(all), targets_.data(), rows,
                                  config_.vocab_size, scale, all);
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* mine = all + i * config_.vocab_size + first;
    if constexpr (std::is_same_v<G, BFloat16>) {
      kernels::to_bfloat16(mine, dlogits + i * shard, shard);
    } else {
      std::memcpy(dlogits + i * shard, mine, static_cast<std::size_t>(shard) * sizeof(float));
    }
  }
}

void Llama::backward(double loss_scale) {
  require_whole("backward");
  require(batch_ * seq_ > 0, "backward() before forward()");
  backward_stage(stages_[0], x_.data<float>(), loss_scale);  // x_ is no longer needed
}

void Llama::backward_stage(LayerRange stage, float* dx, double loss_scale,
                           DeferredWeightGrads* deferred) {
  const std::int64_t rows = batch_ * seq_, dim = config_.dim;
  require(rows > 0, "backward before forward");
  require(holds(stage), "backward_stage of layers " + std::to_string(stage.first) + " to " +
                            std::to_string(stage.last) + ", which this rank does not hold");
  if (stage.last == config_.n_layers) head_backward(dx, loss_scale, rows, deferred);
  for (int l = stage.last - 1; l >= stage.first; --l) {
    call(&UnitHooks::before_backward, l, false);
    layers_[static_cast<std::size_t>(l)]->backward(dx, batch_, seq_, deferred);
    call(&UnitHooks::after_backward, l, true);
  }
  if (stage.first > 0) return;
  call(&UnitHooks::before_backward, -1, false);
  tok_embeddings_->backward(tokens_.data(), rows,
                            tp_->enabled() ? tp_->gather(dx, rows, dim, 1) : dx);
  call(&UnitHooks::after_backward, -1, true);
}

// The loss, the output layer and the final norm: dx receives the gradient of the norm's input.
void Llama::head_backward(float* dx, double loss_scale, std::int64_t rows,
                          DeferredWeightGrads* deferred) {
  const int last = static_cast<int>(config_.n_layers);
  const std::int64_t dim = config_.dim, local = tp_->local_rows(rows);
  call(&UnitHooks::before_backward, last, false);
  ensure_operand(dlogits_, {rows, output_->out()});
  float* dxn = ensure(dxn_, {rows, dim});
  const float* xn = tp_->plan().sequence_sharded() ? xn_full_.data<float>() : xn_.data<float>();
  // The invariant mode's gradient of every token's loss: 1 / (the global batch's tokens), the
  // same number whatever share of them this rank holds.
  const double scale =
      params_.leaf_trees().active()
          ? 1.0 / static_cast<double>(std::llround(static_cast<double>(rows) / loss_scale))
          : loss_scale / static_cast<double>(rows);
  auto output_backward = [&](auto* dlogits) {
    loss_backward(rows, scale, dlogits);
    if (deferred == nullptr) {
      output_->backward(dlogits, xn, dxn, rows);
    } else {  // dlogits is scratch; xn is kept with the activations
      output_->backward_input(dlogits, dxn, rows);
      output_->backward_weight(dlogits, xn, rows, deferred, /*copy_dy=*/true, false);
    }
  };
  if (dlogits_.dtype() == DType::kBFloat16) {
    output_backward(dlogits_.data<BFloat16>());
  } else {
    output_backward(dlogits_.data<float>());
  }
  if (tp_->enabled()) {
    float* dxn_local = ensure(dxn_local_, {local, dim});
    tp_->reduce(dxn, rows, dim, dxn_local, /*accumulate=*/false);
    norm_backward(dxn_local, dx, local);
  } else {
    norm_backward(dxn, dx, local);
  }
  call(&UnitHooks::after_backward, last, true);
}

void Llama::swap_activations(LayerRange stage, Activations& saved) {
  require(holds(stage), "swap_activations of a stage this rank does not hold");
  std::vector<Tensor*> kept;
  for (int l = stage.first; l < stage.last; ++l)
    layers_[static_cast<std::size_t>(l)]->append_saved(kept);
  if (stage.last == config_.n_layers) {
    kept.insert(kept.end(), {&final_in_, &xn_, &xn_full_, &rstd_, &logits_, &shift_, &all_logits_});
    std::swap(targets_, saved.targets);
  }
  if (stage.first == 0) std::swap(tokens_, saved.tokens);
  saved.tensors.resize(kept.size());
  for (std::size_t i = 0; i < kept.size(); ++i) std::swap(*kept[i], saved.tensors[i]);
}

// The final norm; sequence-parallel, its weight's gradient from this rank's rows is summed
// across the group.
void Llama::norm_backward(const float* dxn, float* dx, std::int64_t local) {
  if (!tp_->plan().sequence_sharded()) {
    norm_->backward(dxn, final_in_.data<float>(), rstd_.data<float>(), dx, local);
    return;
  }
  if (norm_->sums_leaves()) {  // the layout-invariant mode: each leaf's gradient gathered
    norm_->backward_sequence_sharded(dxn, final_in_.data<float>(), rstd_.data<float>(), dx, local,
                                     /*accumulate_dx=*/false, tp_->plan().size(),
                                     tp_->gather_floats());
    return;
  }
  const std::int64_t dim = config_.dim;
  float* dw = ensure(dnorm_, {dim});
  std::fill(dw, dw + dim, 0.0f);
  norm_->backward(dxn, final_in_.data<float>(), rstd_.data<float>(), dx, local, false, dw);
  tp_->all_reduce(dw, dim);
  float* grad = norm_->weight().grad.data<float>();
  for (std::int64_t j = 0; j < dim; ++j) grad[j] += dw[j];
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
  require_whole("generation");
  require(!tp_->enabled(),
          "generation runs on one process, not under tensor parallelism: load the checkpoint "
          "(which holds the whole model) into an unsharded model");
  require(n > 0 && cache.length + n <= cache.capacity,
          "generating past max_seq_len = " + std::to_string(cache.capacity) + " positions");
  const std::int64_t dim = config_.dim, position = cache.length;
  float* x = ensure(x_, {n, dim});
  tok_embeddings_->forward(tokens, n, x);
  for (std::size_t l = 0; l < layers_.size(); ++l)
    layers_[l]->forward_cached(x, n, position, cache.layers[l]);
  float* xn = ensure(xn_, {1, dim});
  norm_->forward(x + (n - 1) * dim, xn, ensure(rstd_, {1}), 1);
  float* logits = ensure(logits_, {1, config_.vocab_size});
  output_->forward(xn, logits, 1);
  cache.length += n;
  return logits;
}

std::int64_t Llama::activation_bytes() const {
  std::int64_t n = bytes_of({&x_, &final_in_, &xn_, &xn_full_, &rstd_, &logits_, &all_logits_});
  for (const auto& block : layers_) {
    if (block) n += block->activation_bytes();
  }
  return n;
}

double Llama::flops_per_token(std::int64_t seq) const { return config_.flops_per_token(seq); }

}  // namespace weft::nn
