// SwiGLU's gate: h = silu(a) * b element-wise, with silu(a) = a * sigmoid(a). The feed-forward
// around it is w2(silu(w1 x) * w3 x); the matrix products are Linear layers (blas.h).
#pragma once

#include <cstdint>

namespace weft::kernels {

template <class T>
void swiglu_forward(const T* a, const T* b, T* h, std::int64_t n);
// da and db (overwritten) from dh.
template <class T>
void swiglu_backward(const T* dh, const T* a, const T* b, T* da, T* db, std::int64_t n);

}  // namespace weft::kernels
