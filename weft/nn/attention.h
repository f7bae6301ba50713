// Multi-head causal self-attention with grouped-query heads and rotary positions, Llama's:
// q = x Wq, k = x Wk, v = x Wv (n_kv_heads heads), RoPE on q and k, tiled attention
// (kernels/attention.h), out = attention Wo.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/kernels/attention.h"
#include "weft/nn/block_scratch.h"
#include "weft/nn/blocked_attention.h"
#include "weft/nn/context_parallel.h"
#include "weft/nn/kv_cache.h"
#include "weft/nn/layers.h"
#include "weft/nn/ring_attention.h"

namespace weft::nn {

struct AttentionConfig {
  std::int64_t dim, n_heads, n_kv_heads;
  double rope_theta;
  std::int64_t head_dim() const { return dim / n_heads; }
};

class Attention {
 public:
  // Tensor-parallel over `parts` ranks, this one `part`: n_heads / parts query heads and the
  // n_kv_heads / parts key/value heads they use (wq, wk, wv column-parallel, wo row-parallel).
  // Context-parallel when `cp` (which outlives the layer) is enabled: each sequence of seq
  // rows is then this rank's two chunks of a sequence cp.size() times as long, and attention
  // runs around the ring (nn/context_parallel.h). `scratch` (shared with the model's other
  // blocks) outlives the layer.
  Attention(ParameterList& params, const std::string& prefix, const AttentionConfig& config,
            BlockScratch& scratch, int parts = 1, int part = 0,
            const ContextParallel* cp = nullptr);
  // x and out: [batch * seq, dim]; the output (this rank's heads' share of it under tensor
  // parallelism) is written to out, or added to it inside the output projection's product
  // when accumulate (the block's residual stream). Keeps q, k, v, the attention output and
  // lse for backward. x is float32, or bfloat16 (the norm's output in mixed precision).
  template <ProductOperand X>
  void forward(const X* x, float* out, std::int64_t batch, std::int64_t seq, bool accumulate);
  // dx ([batch * seq, dim]) is overwritten (this rank's heads' share of it under tensor
  // parallelism); x is the forward's input.
  // With `deferred`, the weight gradients are recorded there instead (DeferredWeightGrads).
  template <ProductOperand X>
  void backward(const float* dout, const X* x, float* dx, std::int64_t batch, std::int64_t seq,
                DeferredWeightGrads* deferred = nullptr);
  // backward in two halves: everything but wq|wk|wv's weight gradient (which needs x), then
  // that gradient. Between them the caller may reduce dx and fetch x (tensor parallelism),
  // but not run another block (the second half reads the shared scratch: block_scratch.h).
  // copy_x: x may change before a deferred gradient runs.
  void backward_input(const float* dout, float* dx, std::int64_t batch, std::int64_t seq,
                      DeferredWeightGrads* deferred = nullptr);
  template <ProductOperand X>
  void backward_weight(const X* x, std::int64_t rows, DeferredWeightGrads* deferred = nullptr,
                       bool copy_x = false);
  // Inference: x [n, dim] are positions cache.length .. + n of one sequence; their keys and
  // values are appended to `cache` and each attends to every cached position up to itself;
  // the output is added to residual, as in forward.
  void forward_cached(const float* x, float* residual, std::int64_t n, std::int64_t position,
                      LayerCache& cache);
  std::int64_t activation_bytes() const { return bytes_of({&qkv_, &att_, &lse_}); }
  void append_saved(std::vector<Tensor*>& saved) {
    saved.insert(saved.end(), {&qkv_, &att_, &lse_});
  }
  // Frees what forward kept (activation checkpointing: forward runs again before backward).
  void release();

 private:
  std::int64_t qkv_width() const;  // (heads + 2 kv_heads) * head_dim, this rank's
  // The kernels' view of this rank's heads in the fused q|k|v rows of `batch` sequences.
  kernels::AttentionShape attention_shape(std::int64_t batch, std::int64_t seq) const;
  bool ring() const { return cp_ != nullptr && cp_->enabled(); }
  RingShape ring_shape(std::int64_t batch, std::int64_t seq) const;
  BlockedShape blocked_shape(std::int64_t batch, std::int64_t seq) const;
  void rotate(float* qkv, std::int64_t batch, std::int64_t seq, bool backward);
  void rotate(const float* x, BFloat16* y, std::int64_t batch, std::int64_t seq, bool backward);
  // Attention of the fused q|k|v rows (float32, or bfloat16 in mixed precision) into att_ and
  // lse_, and its backward into the fused gradient rows: in fixed blocks of positions while the
  // layout-invariant sums are (LeafTrees::sequence_blocked), around the ring under context
  // parallelism, else in one call.
  template <class T>
  void attend(const T* qkv, float* att, float* lse, std::int64_t batch, std::int64_t seq);
  template <class T>
  void attend_backward(const T* qkv, const float* datt, float* dqkv, std::int64_t batch,
                       std::int64_t seq);

  AttentionConfig config_;  // this rank's heads
  std::int64_t hd_;         // head dimension
  // wq, wk and wv are stacked in one weight: training runs one product for the three
  // (wqkv_), generation the parts (wq_, wk_, wv_: its keys and values go to the cache).
  Parameter qkv_weight_;
  Linear wqkv_, wq_, wk_, wv_, wo_;
  // Kept by forward: q|k|v rows after RoPE (bfloat16 in mixed precision), attention output.
  Tensor qkv_, att_, lse_;
  Tensor q_;  // generation's queries
  BlockScratch& scratch_;
  const ContextParallel* cp_;
  const LeafTrees& trees_;
};

}  // namespace weft::nn
