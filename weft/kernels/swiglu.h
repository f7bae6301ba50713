// SwiGLU's gate: h = silu(a) * b element-wise, with silu(a) = a * sigmoid(a). The feed-forward
// around it is w2(silu(w1 x) * w3 x); the matrix products are Linear layers (matmul.h).
#pragma once

#include <cstdint>

#include "weft/base/dtype.h"

namespace weft::kernels {

// Over `rows` rows of `cols`: row r of a and b starts at r * ab_stride (a and b may be the two
// halves of one fused w1|w3 output row), of h at r * cols.
template <class T>
void swiglu_forward(const T* a, const T* b, T* h, std::int64_t rows, std::int64_t cols,
                    std::int64_t ab_stride);
// Replaces a and b by da and db, from dh: in place, since the forward's a and b are needed by
// nothing after it, and writing into the lines just read costs no fetch of a fresh buffer's.
// dh overlaps neither; a and b are disjoint (two halves of each row, or two arrays).
template <class T>
void swiglu_backward(const T* dh, T* a, T* b, std::int64_t rows, std::int64_t cols,
                     std::int64_t ab_stride);

// Mixed precision (the products read and write bfloat16): a and b bfloat16 (w1|w3's output),
// computed in float32, h written as bfloat16 (rounded to nearest even) for the product that
// reads it.
void swiglu_forward(const BFloat16* a, const BFloat16* b, BFloat16* h, std::int64_t rows,
                    std::int64_t cols, std::int64_t ab_stride);
// Its backward: dh [rows, cols] float32 is replaced by the gradients of a and b as bfloat16
// rows [da | db] of 2 * cols, in dh's own bytes (such a row is the size of one of dh's), for
// the product that reads them; a and b are left as they are. Returns dh's bytes as that
// [rows, 2 * cols] bfloat16 array.
BFloat16* swiglu_backward_bf16(float* dh, const BFloat16* a, const BFloat16* b, std::int64_t rows,
                               std::int64_t cols, std::int64_t ab_stride);

// n contiguous elements.
template <class T>
void swiglu_forward(const T* a, const T* b, T* h, std::int64_t n) {
  swiglu_forward(a, b, h, 1, n, n);
}
template <class T>
void swiglu_backward(const T* dh, T* a, T* b, std::int64_t n) {
  swiglu_backward(dh, a, b, 1, n, n);
}

}  // namespace weft::kernels
