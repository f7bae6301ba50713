// Matrix products through OpenBLAS (row-major), and the Linear layer's forward and backward
// written with them. T is float (sgemm) or double (dgemm: the finite-difference checks).
#pragma once

#include <cstdint>

namespace weft::kernels {

// C[m, n] = alpha * op(A) op(B) + beta * C, all row-major; op(A) is A[m, k] or, with
// trans_a, A[k, m] read transposed (likewise B). ld* are the row strides.
template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
          const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c,
          std::int64_t ldc);

// y[rows, out] = x[rows, in] W[out, in]^T, or y += that product when accumulate: a residual
// add inside the product, with no pass of its own (and none of the zeroing of y that OpenBLAS
// does first when it overwrites, beta 0).
template <class T>
void linear_forward(const T* x, const T* w, T* y, std::int64_t rows, std::int64_t in,
                    std::int64_t out, bool accumulate = false);
// dx[rows, in] = dy W (added to dx when accumulate_dx, else overwritten; skipped when dx is
// null), dW[out, in] += dy^T x (skipped when dw is null): either half alone, so that callers
// can move data between them (tensor parallelism reduces dx while dW computes).
template <class T>
void linear_backward(const T* dy, const T* x, const T* w, T* dx, T* dw, std::int64_t rows,
                     std::int64_t in, std::int64_t out, bool accumulate_dx = false);

// OpenBLAS's own threads (1 per rank by default: weft parallelises around it).
void set_blas_threads(int threads);
int blas_threads();

}  // namespace weft::kernels
