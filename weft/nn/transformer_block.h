// One Llama block: x = x + attention(attention_norm(x)); x = x + feed_forward(ffn_norm(x)).
// With activation checkpointing the block keeps only its input after forward and runs its
// forward again at the start of backward: less memory, the same results. Under tensor
// parallelism (tensor_parallel.h) the attention and the feed-forward are parallel regions:
// their input is gathered (sequence parallelism) and their partial outputs summed across
// the group into the residual stream, which holds this rank's rows.
#pragma once

#include <cstdint>
#include <vector>

#include "weft/nn/attention.h"
#include "weft/nn/feed_forward.h"
#include "weft/nn/layers.h"
#include "weft/nn/tensor_parallel.h"

namespace weft::nn {

struct BlockConfig {
  AttentionConfig attention;
  std::int64_t hidden;  // feed-forward hidden size
  double norm_eps;
};

class TransformerBlock {
 public:
  // `tp`, `cp` and `scratch` (shared by the model's blocks) outlive the block.
  TransformerBlock(ParameterList& params, int layer, const BlockConfig& config,
                   TensorParallelContext& tp, const ContextParallel& cp, BlockScratch& scratch);
  // x: [local rows, dim] (tp.local_rows(batch * seq)), transformed in place.
  void forward(float* x, std::int64_t batch, std::int64_t seq);
  // dx: the gradient of the block's output, turned in place into that of its input. With
  // `deferred`, the linear layers' weight gradients are recorded there instead (the norms'
  // are computed at once); what they read stays in the saved activations, which with
  // checkpointing are then kept (not freed) until the deferred gradients have run.
  void backward(float* dx, std::int64_t batch, std::int64_t seq,
                DeferredWeightGrads* deferred = nullptr);
  void set_checkpointing(bool on) { checkpointing_ = on; }
  // The tensors forward keeps for backward (pipeline parallelism moves them out per
  // micro-batch: Llama::swap_activations).
  void append_saved(std::vector<Tensor*>& saved);
  // Bytes forward kept for backward.
  std::int64_t activation_bytes() const {
    return bytes_of({&input_, &h1_, &rstd1_, &x2_, &h2_, &rstd2_}) + attention_.activation_bytes() +
           feed_forward_.activation_bytes();
  }
  // Inference with a KV cache (one process): x [n, dim] at positions position .. + n, in place.
  void forward_cached(float* x, std::int64_t n, std::int64_t position, LayerCache& cache);

 private:
  void run_forward(float* x, std::int64_t batch, std::int64_t seq);
  // norm(x) into `out`, made float32 or (mixed precision) bfloat16 for the products.
  void norm_forward(const RMSNorm& norm, const float* x, Tensor& out, float* rstd,
                    std::int64_t rows);
  void release();

  std::int64_t dim_;
  bool checkpointing_ = false;
  TensorParallelContext& tp_;
  BlockScratch& scratch_;
  RMSNorm attention_norm_, ffn_norm_;
  Attention attention_;
  FeedForward feed_forward_;
  Tensor input_;                         // always kept
  Tensor h1_, rstd1_, x2_, h2_, rstd2_;  // kept unless checkpointing
  Tensor recompute_, norm_grads_;        // scratch
};

}  // namespace weft::nn
