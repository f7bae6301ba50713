// Causal multi-head attention with grouped-query heads, computed the flash-attention way:
// in tiles of queries and keys with a running (online) softmax, so that no seq x seq score
// matrix is ever stored; the backward recomputes the scores from the saved log-sum-exp.
//
// Layouts (row-major): q and out [batch, seq, heads, head_dim]; k and v [batch, seq,
// kv_heads, head_dim]; lse [batch, heads, seq]. Query head h reads key/value head
// h / (heads / kv_heads). Scores are scaled by 1 / sqrt(head_dim).
#pragma once

#include <cstdint>

namespace weft::kernels {

struct AttentionShape {
  std::int64_t batch, seq, heads, kv_heads, head_dim;
  // Elements between consecutive rows of q, k and v (and of dq, dk, dv), 0 meaning packed
  // (heads * head_dim for q, kv_heads * head_dim for k and v). With a fused q|k|v projection
  // the three are column blocks of one [batch * seq, (heads + 2 kv_heads) * head_dim] array
  // and this is that width. out, dout are always packed.
  std::int64_t qkv_stride = 0;
};

template <class T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, T* out, T* lse);
// dq, dk, dv are overwritten.
template <class T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* out,
                        const T* dout, const T* lse, T* dq, T* dk, T* dv);

}  // namespace weft::kernels
