// Ring attention over a context-parallel group (nn/context_parallel.h): the attention of this
// rank's two chunks of every sequence against every earlier position of the whole sequence,
// and its backward, with keys and values travelling around the ring.
//
// Layouts, for `batch` sequences of which this rank holds 2 chunks of `chunk` rows each, local
// chunk 0 of every sequence first, then local chunk 1 of every sequence (so that each chunk's
// rows are one [batch, chunk] block for the kernels): qkv [2, batch, chunk, width], the fused
// q|k|v rows after RoPE (q's heads, then k's, then v's); out [2, batch, chunk, heads *
// head_dim]; lse [2, batch, heads, chunk]. Per ring step a rank sends and receives one block
// of keys and values, 2 * batch * chunk * 2 * kv_heads * head_dim elements of qkv's type
// (bfloat16 in mixed precision), in backward also their gradients (float32).
#pragma once

#include <cstdint>

#include "weft/nn/context_parallel.h"
#include "weft/tensor/tensor.h"

namespace weft::nn {

struct RingShape {
  std::int64_t batch, chunk, heads, kv_heads, head_dim;
  std::int64_t width() const { return (heads + 2 * kv_heads) * head_dim; }
};

// The buffers the ring passes around (kept between calls, so that each step allocates
// nothing): two blocks of keys and values, two of their gradients, one block's output.
struct RingScratch {
  Tensor kv[2], dkv[2], part, part_lse, grad_q, grad_kv;
};

// qkv float32, or bfloat16 (kernels/attention.h's mixed-precision kernels; the backward's out,
// the forward's output, is then bfloat16 too).
template <class T>
void ring_attention_forward(const ContextParallel& cp, const RingShape& s, const T* qkv, float* out,
                            float* lse, RingScratch& scratch);
// dqkv [batch, 2 * chunk, width] is overwritten with the gradients of q, k and v (before RoPE's
// backward); out and lse are the forward's.
template <class T>
void ring_attention_backward(const ContextParallel& cp, const RingShape& s, const T* qkv,
                             const T* out, const float* dout, const float* lse, float* dqkv,
                             RingScratch& scratch);

// RoPE on this rank's rows of qkv (q's and k's heads), each chunk at its global position.
void rope_chunks(const ContextParallel& cp, const RingShape& s, double theta, float* qkv,
                 bool backward);
// The same into bfloat16 rows (every column rounded; kernels::rope_forward_bf16), qkv unchanged.
void rope_chunks_bf16(const ContextParallel& cp, const RingShape& s, double theta, const float* qkv,
                      BFloat16* out, bool backward);

}  // namespace weft::nn
