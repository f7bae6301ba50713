// Llama: token embedding, n_layers TransformerBlocks, a final RMSNorm and the output layer,
// trained with the mean softmax cross-entropy of next-token targets.
//
//   nn::Llama model(nn::LlamaConfig{.dim = 256, .n_layers = 4});
//   model.init_weights(seed);
//   double loss = model.forward(tokens, targets, batch, seq);  // keeps activations
//   model.backward();                                          // grads += d loss / d params
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/nn/context_parallel.h"
#include "weft/nn/kv_cache.h"
#include "weft/nn/layers.h"
#include "weft/nn/tensor_parallel.h"
#include "weft/nn/transformer_block.h"

namespace weft::nn {

struct LlamaConfig {
  std::int64_t dim = 256;
  std::int64_t n_layers = 4;
  std::int64_t n_heads = 4;
  std::int64_t n_kv_heads = 0;  // 0: as many as n_heads (no grouping)
  std::int64_t vocab_size = 256;
  std::int64_t multiple_of = 32;  // the feed-forward hidden size is rounded up to this
  double ffn_dim_multiplier = 0;  // scales the feed-forward hidden size first; 0: none
  std::int64_t max_seq_len = 256;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  bool tie_embeddings = false;  // the output layer reuses tok_embeddings.weight

  std::int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  // Llama's: 2/3 of 4 * dim, times ffn_dim_multiplier (truncated) when set, rounded up to a
  // multiple of multiple_of.
  std::int64_t hidden_dim() const;
  // The whole model's parameters, names and shapes in the order Llama registers them
  // (TorchTitan's names), and their sum: computed, nothing allocated (a 405B model's description).
  std::vector<std::pair<std::string, Shape>> parameter_shapes() const;
  std::int64_t parameter_count() const;
  // Training FLOP per token at sequence length `seq`: 6 per weight of the matrix products
  // (the output layer's included, the embedding's lookup not) and attention's 12 x n_layers x
  // dim x seq (TorchTitan's count).
  double flops_per_token(std::int64_t seq) const;
  // Throws InvalidArgument naming the field when the sizes do not fit together.
  void validate() const;
  // Throws InvalidArgument naming every size that `degree` tensor-parallel ranks cannot split
  // evenly (heads, key/value heads, the feed-forward width, the vocabulary).
  void validate_tensor_parallel(std::int64_t degree) const;
};

// A pipeline stage's part of the model: blocks [first, last), with the token embedding when
// first is 0 and the final norm and output layer when last is n_layers.
struct LayerRange {
  int first = 0, last = 0;
  bool operator==(const LayerRange&) const = default;
};

// What one forward of a stage keeps for its backward, moved out of the model and back
// (Llama::swap_activations): a pipeline stage holds one set per micro-batch in flight.
struct Activations {
  std::vector<Tensor> tensors;
  std::vector<std::int32_t> tokens, targets;
  std::int64_t bytes() const;
};

class Llama {
 public:
  explicit Llama(const LlamaConfig& config);

  Llama(const Llama&) = delete;
  Llama& operator=(const Llama&) = delete;

  const LlamaConfig& config() const { return config_; }
  ParameterList& parameters() { return params_; }
  // Makes the model tensor-parallel over tp's group (tensor_parallel.h): every layer is
  // rebuilt with this rank's slices of the parameters, zero-filled (init_weights next). Call
  // it before anything holds a parameter or a hook; the degree must divide the heads, the
  // key/value heads, the feed-forward width and the vocabulary (InvalidArgument otherwise).
  void apply_tensor_parallel(TensorParallel tp);
  const TensorParallel& tensor_parallel() const { return tp_->plan(); }
  // Layout-invariant training across tensor-parallel degrees: the products cut their sharded
  // dimension into `blocks` fixed feature blocks and the tensor-parallel reductions finish
  // the canonical tree over them (nn/feature_blocks.h); the degree must divide `blocks`. Call
  // it after apply_tensor_parallel.
  void set_feature_blocks(int blocks);
  // Layout-invariant training across context-parallel degrees: each sequence's positions cut
  // into `blocks` fixed blocks, each a leaf of the canonical tree, attention run block by
  // block (nn/blocked_attention.h); twice the degree must divide `blocks`. Call it after
  // apply_context_parallel.
  void set_sequence_blocks(int blocks);
  // Makes the model context-parallel over cp's group (context_parallel.h): forward and
  // backward then take this rank's two chunks of each sequence (seq rows: seq / 2 of chunk
  // cp.chunk(0), then seq / 2 of chunk cp.chunk(1)), and the loss is the mean over this
  // rank's tokens. Composes with the other strategies; the parameters do not change.
  void apply_context_parallel(ContextParallel cp);
  const ContextParallel& context_parallel() const { return cp_; }
  // Makes the model a pipeline-parallel rank's: it holds only the layers of `stages` (disjoint,
  // non-empty, in model order), the embedding when one starts at 0 and the final norm and
  // output when one ends at n_layers; the rest is rebuilt as apply_tensor_parallel does (the
  // two compose in either order). Tied embeddings need the embedding and the output on this
  // rank. InvalidArgument otherwise.
  void apply_pipeline(std::vector<LayerRange> stages);
  // This rank's stages ({0, n_layers} without pipeline parallelism).
  const std::vector<LayerRange>& stages() const { return stages_; }
  // Rows of the residual stream this rank holds of batch * seq = `rows` (rows / tp when
  // sequence-parallel): the size of a pipeline stage's activations is that times dim.
  std::int64_t local_rows(std::int64_t rows) const { return tp_->local_rows(rows); }
  // Every parameter from (seed, its name, element index) alone (tensor/random.h), so a shard
  // of a parameter gets the values the whole one has there. Scheme: docs/TRAINING.md.
  void init_weights(std::uint64_t seed);
  // What init_weights(seed) puts in elements [first, first + count) of this rank's slice of
  // parameter `name` (row-major), for initialising one shard of it alone.
  void init_values(const std::string& name, std::uint64_t seed, std::int64_t first,
                   std::int64_t count, float* out) const;

  // tokens and targets: [batch, seq] with seq <= max_seq_len (every tensor-parallel rank
  // passes the same). Returns the mean loss and keeps what backward needs.
  double forward(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t batch,
                 std::int64_t seq);
  // Adds d(loss_scale * loss) / d(parameter) to every parameter's grad (1 / micro-batches
  // for gradient accumulation).
  void backward(double loss_scale = 1.0);

  // One pipeline stage (one of stages()). x: [local rows, dim] (tensor_parallel's local rows
  // of batch * seq), the stage's input activations, replaced by its output; the first stage
  // reads `tokens` instead (x receives the embedding), the last reads `targets`, consumes x
  // and returns the mean loss (0 from the others). forward(...) is the whole model's stage.
  double forward_stage(LayerRange stage, const std::int32_t* tokens, const std::int32_t* targets,
                       float* x, std::int64_t batch, std::int64_t seq);
  // The stage's backward after its forward: dx holds the gradient of the stage's output
  // (ignored by the last stage, which starts from loss_scale * the loss) and receives that
  // of its input (the first stage's is left unspecified). With `deferred`, the linear layers'
  // weight gradients are recorded there instead (zero bubble's I; run() is its W), reading
  // the saved activations, which must then stay as they are until run().
  void backward_stage(LayerRange stage, float* dx, double loss_scale,
                      DeferredWeightGrads* deferred = nullptr);
  // Swaps what the stage's last forward kept for backward with `saved`: out after a forward,
  // back in before its backward. Tensors swapped in are reused by the next forward.
  void swap_activations(LayerRange stage, Activations& saved);
  // The last forward's logits, [batch * seq, vocab_size] (this rank's vocab_size / tp
  // columns under tensor parallelism).
  const Tensor& logits() const { return logits_; }
  // Bytes of the activations the last forward kept for backward (its saved tensors).
  std::int64_t activation_bytes() const;

  void set_activation_checkpointing(bool on);

  // The model's parameters fall into units: -1 the token embedding, 0 .. n_layers - 1 the
  // blocks, n_layers the final norm and the output layer (whose weight, when tied, is the
  // embedding's and so in unit -1). Parallelism hooks into the units' forward and backward:
  //   forward:  before_forward(u), unit u, after_forward(u) for u = -1, 0, ..., n_layers
  //   backward: before_backward(u), unit u, after_backward(u) for u = n_layers, ..., 0, -1
  // After after_backward(u) the gradients of unit u's parameters are final for this backward.
  // Data parallelism starts a bucket's reduction there; sharded data parallelism gathers a
  // unit's parameters in before_* and frees them in after_*. Hooks left empty are skipped.
  // Several sets compose, as wrappers nest: the before_* hooks run in the order the sets were
  // added, the after_* hooks in the reverse order.
  struct UnitHooks {
    std::function<void(int unit)> before_forward, after_forward, before_backward, after_backward;
  };
  // Returns the id remove_unit_hooks takes.
  int add_unit_hooks(UnitHooks hooks);
  void remove_unit_hooks(int id);
  int unit_of(const std::string& name) const;

  // Inference: an empty cache for sequences of up to max_seq_len positions.
  KVCache make_cache() const;
  // Runs tokens[0..n) at positions cache.length .., appends them to the cache and returns the
  // logits of the last one ([vocab_size], valid until the next call). Throws InvalidArgument
  // when the cache would exceed max_seq_len, or under tensor parallelism (generation runs on
  // one process; checkpoints hold the whole model).
  const float* forward_cached(const std::int32_t* tokens, std::int64_t n, KVCache& cache);
  // Model FLOPs per token for training, of the whole model whatever this rank holds:
  // 6 x (matmul parameters) + 12 x layers x dim x seq.
  double flops_per_token(std::int64_t seq) const;
  // Elements of the whole model's parameters, whatever this rank holds.
  std::int64_t whole_numel() const { return whole_numel_; }
  // The whole model's parameters (name, full shape) in registration order, whatever this
  // rank holds: what a checkpoint of this model must contain.
  const std::vector<std::pair<std::string, Shape>>& whole_parameters() const {
    return whole_parameters_;
  }

 private:
  void build();  // the layers of stages_, over tp_
  bool holds(LayerRange stage) const;
  void require_whole(const char* what) const;
  void check_shape(std::int64_t batch, std::int64_t seq) const;
  void head_forward(float* x, std::int64_t rows);
  void head_backward(float* dx, double loss_scale, std::int64_t rows,
                     DeferredWeightGrads* deferred);
  void call(std::function<void(int)> UnitHooks::*hook, int unit, bool reverse) const;
  double loss_forward(std::int64_t rows);
  // The layout-invariant mode's loss with feature blocks: each row's sum of exponentials over
  // fixed blocks of the vocabulary in the canonical tree, whatever the tensor-parallel degree
  // and loss parallelism (nn/feature_blocks.h).
  double blocked_loss_forward(std::int64_t rows);
  double losses_from(float* max, const float* sum_exp, const float* target_logit,
                     std::int64_t rows);
  void record_leaf_losses(std::int64_t rows);
  template <class G>
  void loss_backward(std::int64_t rows, double scale, G* dlogits);
  void norm_backward(const float* dxn, float* dx, std::int64_t local);

  LlamaConfig config_;
  std::unique_ptr<TensorParallelContext> tp_;  // stable: the blocks refer to it
  ContextParallel cp_;                         // the blocks refer to it
  BlockScratch scratch_;                       // the blocks share it
  ParameterList params_;
  std::optional<Embedding> tok_embeddings_;
  std::vector<LayerRange> stages_;
  std::vector<std::unique_ptr<TransformerBlock>> layers_;  // [n_layers]; null where not held
  std::int64_t whole_numel_ = 0;
  std::vector<std::pair<std::string, Shape>> whole_parameters_;
  std::optional<RMSNorm> norm_;
  std::optional<Linear> output_;
  std::vector<std::pair<int, UnitHooks>> hooks_;
  int next_hooks_id_ = 0;
  std::int64_t batch_ = 0, seq_ = 0;
  std::vector<std::int32_t> tokens_, targets_;
  Tensor x_, final_in_, xn_, xn_full_, rstd_, logits_, losses_, dlogits_, dxn_, dxn_local_;
  Tensor shift_, sums_, gathered_logits_, all_logits_,
      dnorm_;  // tensor parallelism's loss and final norm
};

}  // namespace weft::nn
