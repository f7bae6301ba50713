// Rotary position embedding (Llama's): within each head of `head_dim`, the pairs (x[2i],
// x[2i+1]) at position p are rotated by the angle p * theta^(-2i / head_dim). Applied in
// place to x[batch, seq, heads, head_dim]; positions start at `first_position` (the KV
// cache's offset when generating); head_dim must be even. Rows (positions) are `row_stride`
// elements apart, 0 meaning heads * head_dim (packed); a larger stride reads q or k inside a
// fused q|k|v row.
#pragma once

#include <cstdint>

#include "weft/base/dtype.h"

namespace weft::kernels {

template <class T>
void rope_forward(T* x, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                  std::int64_t head_dim, double theta, std::int64_t first_position = 0,
                  std::int64_t row_stride = 0);
// The inverse rotation, applied in place to the gradient.
template <class T>
void rope_backward(T* dx, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                   std::int64_t head_dim, double theta, std::int64_t first_position = 0,
                   std::int64_t row_stride = 0);

// Mixed precision, out of place: y = x with the rotation (forward: +angle, backward: -angle)
// applied to the first `heads` heads of each row and the rest of the row (v's heads in a fused
// q|k|v row) as it is, rounded to bfloat16: bitwise rope_forward (rope_backward) in place and
// then each element rounded to nearest even. x and y rows are row_width elements apart
// (row_width >= heads * head_dim); x is not changed.
void rope_forward_bf16(const float* x, BFloat16* y, std::int64_t batch, std::int64_t seq,
                       std::int64_t heads, std::int64_t head_dim, double theta,
                       std::int64_t first_position, std::int64_t row_width);
void rope_backward_bf16(const float* dx, BFloat16* dy, std::int64_t batch, std::int64_t seq,
                        std::int64_t heads, std::int64_t head_dim, double theta,
                        std::int64_t first_position, std::int64_t row_width);

}  // namespace weft::kernels
