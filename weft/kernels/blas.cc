#include "weft/kernels/blas.h"

#include <cblas.h>

#include <algorithm>
#include <functional>
#include <mutex>

#include "weft/kernels/parallel.h"

namespace weft::kernels {
namespace {

// OpenBLAS starts with one thread per core; weft's default is one per rank, set once before
// the first product unless the caller chose already.
std::once_flag g_default_threads;
void ensure_default_threads() {
  std::call_once(g_default_threads, [] { openblas_set_num_threads(1); });
}

CBLAS_TRANSPOSE op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

// The products are cut into blocks of these sizes whatever the thread count (below).
constexpr std::int64_t kRowBlock = 512;      // rows (tokens) of y and dx per product
constexpr std::int64_t kFeatureBlock = 128;  // rows (output features) of dW per product

// fn(first, end) for the blocks [b * block, (b + 1) * block) of [0, n), the last one shorter,
// shared among the threads a whole block at a time.
void for_fixed_blocks(std::int64_t n, std::int64_t block,
                      const std::function<void(std::int64_t, std::int64_t)>& fn) {
  const std::int64_t blocks = (n + block - 1) / block;
  parallel_for(blocks, 1, [&](std::int64_t first_block, std::int64_t end_block) {
    for (std::int64_t b = first_block; b < end_block; ++b)
      fn(b * block, std::min(n, (b + 1) * block));
  });
}

}  // namespace

template <>
void gemm<float>(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                 float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                 float beta, float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  ensure_default_threads();
  cblas_sgemm(CblasRowMajor, op(trans_a), op(trans_b), static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda),
              b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

template <>
void gemm<double>(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                  double alpha, const double* a, std::int64_t lda, const double* b,
                  std::int64_t ldb, double beta, double* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  ensure_default_threads();
  cblas_dgemm(CblasRowMajor, op(trans_a), op(trans_b), static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda),
              b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

// With several threads each runs single-threaded products on its share: for the tall, narrow
// products of training splitting rows measured as fast as OpenBLAS's own threading or faster
// (docs/TRAINING.md). y and dx split the rows (tokens); dW splits its own rows (output features),
// each block summing over every token, so no partial sums are needed. The blocks are fixed, one
// OpenBLAS call each, so that one thread makes the same calls as many: OpenBLAS's result for a row
// depends on the shape of the call it is in (on Zen 3, rows of a 300-row product differ in
// their last bits from the same rows in its 150-row halves), and results must not depend on
// the thread count (docs/TRAINING.md).
template <class T>
void linear_forward(const T* x, const T* w, T* y, std::int64_t rows, std::int64_t in,
                    std::int64_t out, bool accumulate) {
  const T beta = accumulate ? T(1) : T(0);
  for_fixed_blocks(rows, kRowBlock, [&](std::int64_t first, std::int64_t end) {
    gemm<T>(false, true, end - first, out, in, T(1), x + first * in, in, w, in, beta,
            y + first * out, out);
  });
}

template <class T>
void linear_backward(const T* dy, const T* x, const T* w, T* dx, T* dw, std::int64_t rows,
                     std::int64_t in, std::int64_t out, bool accumulate_dx) {
  if (dx != nullptr) {
    const T beta = accumulate_dx ? T(1) : T(0);
    for_fixed_blocks(rows, kRowBlock, [&](std::int64_t first, std::int64_t end) {
      gemm<T>(false, false, end - first, in, out, T(1), dy + first * out, out, w, in, beta,
              dx + first * in, in);
    });
  }
  if (dw == nullptr) return;
  for_fixed_blocks(out, kFeatureBlock, [&](std::int64_t first, std::int64_t end) {
    gemm<T>(true, false, end - first, in, rows, T(1), dy + first, out, x, in, T(1), dw + first * in,
            in);
  });
}

void set_blas_threads(int threads) {
  std::call_once(g_default_threads, [] {});
  openblas_set_num_threads(threads);
}

int blas_threads() {
  ensure_default_threads();
  return openblas_get_num_threads();
}

template void linear_forward<float>(const float*, const float*, float*, std::int64_t, std::int64_t,
                                    std::int64_t, bool);
template void linear_forward<double>(const double*, const double*, double*, std::int64_t,
                                     std::int64_t, std::int64_t, bool);
template void linear_backward<float>(const float*, const float*, const float*, float*, float*,
                                     std::int64_t, std::int64_t, std::int64_t, bool);
template void linear_backward<double>(const double*, const double*, const double*, double*, double*,
                                      std::int64_t, std::int64_t, std::int64_t, bool);

}  // namespace weft::kernels
