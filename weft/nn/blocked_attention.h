// Attention in fixed blocks of positions, the same on any context-parallel layout
// (LeafTrees::set_sequence_blocks): layout-invariant context parallelism.
//
// Each sequence is cut into `blocks` blocks of L positions. Query block i's output is its
// attention over key block 0, then each later key block j <= i merged in (attention_merge) in
// ascending order: the same kernel calls, of one sequence's block each, in the same order,
// whichever rank holds the queries. In backward, dq of block i adds the (i, j) terms in
// ascending j on the rank holding i, and the gradients of key block j's keys and values, one
// term per query block i >= j, meet in the perfect binary tree over i (nn/leaf_sums.h) on the
// rank holding j: every rank sends each term to the holder of its key block (one all-to-all).
// Keys and values come to every rank by an all-gather.
//
// Layouts: a rank's rows as context parallelism lays them out (nn/context_parallel.h; without
// it, [batch, seq] in order), each chunk whole blocks. qkv [rows, width], the fused q|k|v rows
// after RoPE; out [rows, heads * head_dim]; lse [rows / L][heads][L], per block of rows.
#pragma once

#include <cstdint>

#include "weft/nn/context_parallel.h"
#include "weft/tensor/tensor.h"

namespace weft::nn {

struct BlockedShape {
  std::int64_t batch, sequence_rows;  // sequences, and the rows of each on this rank
  int blocks;                         // of every whole sequence
  std::int64_t heads, kv_heads, head_dim;
  std::int64_t width() const { return (heads + 2 * kv_heads) * head_dim; }
};

// Buffers kept between calls.
struct BlockedScratch {
  Tensor own, all, part, part_lse, grad_q, send, recv;
};

// cp: null or of size 1 without context parallelism. qkv float32 or bfloat16 (the
// mixed-precision kernels; the backward's out is then bfloat16 too).
template <class T>
void blocked_attention_forward(const ContextParallel* cp, const BlockedShape& s, const T* qkv,
                               float* out, float* lse, BlockedScratch& scratch);
// dqkv [rows, width] is overwritten with the gradients of q, k and v (before RoPE's backward).
template <class T>
void blocked_attention_backward(const ContextParallel* cp, const BlockedShape& s, const T* qkv,
                                const T* out, const float* dout, const float* lse, float* dqkv,
                                BlockedScratch& scratch);

}  // namespace weft::nn
