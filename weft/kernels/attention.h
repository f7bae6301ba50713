// Causal multi-head attention with grouped-query heads, computed the flash-attention way:
// in tiles of queries and keys with a running (online) softmax, so that no seq x seq score
// matrix is ever stored; the backward recomputes the scores from the saved log-sum-exp.
//
// Layouts (row-major): q and out [batch, seq, heads, head_dim]; k and v [batch, kv_seq,
// kv_heads, head_dim]; lse [batch, heads, seq]. Query head h reads key/value head
// h / (heads / kv_heads). Scores are scaled by 1 / sqrt(head_dim).
//
// Query i sees key j when j <= i + causal_offset: with kv_seq = seq and offset 0, a sequence
// attending to itself. Ring attention (context parallelism) calls the kernels on blocks of a
// longer sequence: queries at global positions [a, a + seq) against keys at [b, b + kv_seq)
// have offset a - b; each block's output and lse are merged with attention_merge, and each
// block's backward runs with the merged output and lse.
#pragma once

#include <cstdint>

#include "weft/base/dtype.h"

namespace weft::kernels {

struct AttentionShape {
  std::int64_t batch, seq, heads, kv_heads, head_dim;
  // Elements between consecutive rows of q (and dq), and of k and v (and dk, dv), 0 meaning
  // packed (heads * head_dim for q, kv_heads * head_dim for k and v). With a fused q|k|v
  // projection the three are column blocks of one [batch * seq, (heads + 2 kv_heads) *
  // head_dim] array and both are that width. out, dout are always packed.
  std::int64_t q_stride = 0, kv_stride = 0;
  // Keys per sequence (0: seq) and the causal offset, which must be >= 0 and leave no key
  // unseen: kv_seq <= seq + causal_offset.
  std::int64_t kv_seq = 0, causal_offset = 0;
};

template <class T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, T* out, T* lse);
// dq, dk, dv are overwritten.
template <class T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* out,
                        const T* dout, const T* lse, T* dq, T* dk, T* dv);

// Mixed precision: q, k and v in bfloat16 (head_dim, q_stride and kv_stride even), and the
// backward's out (the forward's output, rounded: what the output projection reads); the rest
// float32. The four products read bfloat16, P and dS rounded to nearest even, and accumulate
// in float32 (kernels/internal/attention_tiles_bf16.h: AVX512_BF16's dot product where the CPU
// has it, the same bits elsewhere); the softmax, lse, delta and the gradients' sums over tiles
// stay float32.
void attention_forward(const AttentionShape& s, const BFloat16* q, const BFloat16* k,
                       const BFloat16* v, float* out, float* lse);
void attention_backward(const AttentionShape& s, const BFloat16* q, const BFloat16* k,
                        const BFloat16* v, const BFloat16* out, const float* dout, const float* lse,
                        float* dq, float* dk, float* dv);

// Folds a block's attention into a running one, for the same queries against more keys:
// lse = log(exp(lse) + exp(block_lse)) and out = out * exp(old lse - lse) + block_out *
// exp(block_lse - lse), in attention_forward's layouts: out and block_out [batch, seq, heads,
// head_dim] packed, lse and block_lse [batch, heads, seq].
template <class T>
void attention_merge(std::int64_t batch, std::int64_t seq, std::int64_t heads,
                     std::int64_t head_dim, T* out, T* lse, const T* block_out, const T* block_lse);

}  // namespace weft::kernels
