// The working memory of a model's blocks, shared by all of them (nn::Llama owns one). A block
// writes it before reading it and is done with it when its forward or backward returns, so
// the blocks must run one at a time, and a backward split in two (backward_input, then
// backward_weight) must have no other block's forward or backward between its halves unless
// its weight gradients are deferred (DeferredWeightGrads copies what it reads from here).
#pragma once

#include "weft/nn/blocked_attention.h"
#include "weft/nn/ring_attention.h"
#include "weft/tensor/tensor.h"

namespace weft::nn {

// Buffers a block writes before it reads them and does not need after its backward (and, in
// mixed precision, its forward): one set for a model's blocks, which run one at a time, not
// one set each (at Llama 3 8B's sequence length, 30 GB a rank).
struct BlockScratch {
  Tensor qkv_grad;         // Attention: q|k|v's gradient (mixed precision: the projection's output)
  Tensor attention_grad;   // Attention: its output's gradient (mixed precision: the output)
  Tensor hidden_grad;      // FeedForward: the gradient of g, then of w1|w3's output
  Tensor residual_grad;    // TransformerBlock: the gradient of a norm's input
  RingScratch ring;        // Attention under context parallelism: the ring's buffers
  BlockedScratch blocked;  // Attention in sequence blocks: the exchanges' buffers
};

}  // namespace weft::nn
