#include "weft/kernels/blas.h"

#include <cblas.h>

#include <mutex>

namespace weft::kernels {
namespace {

// OpenBLAS starts with one thread per core; weft's default is one per rank, set once before
// the first product unless the caller chose already.
std::once_flag g_default_threads;
void ensure_default_threads() {
  std::call_once(g_default_threads, [] { openblas_set_num_threads(1); });
}

CBLAS_TRANSPOSE op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

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

template <class T>
void linear_forward(const T* x, const T* w, T* y, std::int64_t rows, std::int64_t in,
                    std::int64_t out) {
  gemm<T>(false, true, rows, out, in, T(1), x, in, w, in, T(0), y, out);
}

template <class T>
void linear_backward(const T* dy, const T* x, const T* w, T* dx, T* dw, std::int64_t rows,
                     std::int64_t in, std::int64_t out) {
  if (dx != nullptr) gemm<T>(false, false, rows, in, out, T(1), dy, out, w, in, T(0), dx, in);
  gemm<T>(true, false, out, in, rows, T(1), dy, out, x, in, T(1), dw, in);
}

void set_blas_threads(int threads) {
  std::call_once(g_default_threads, [] {});
  openblas_set_num_threads(threads);
}

int blas_threads() {
  ensure_default_threads();
  return openblas_get_num_threads();
}

template void linear_forward<float>(const float*, const float*, float*, std::int64_t,
                                    std::int64_t, std::int64_t);
template void linear_forward<double>(const double*, const double*, double*, std::int64_t,
                                     std::int64_t, std::int64_t);
template void linear_backward<float>(const float*, const float*, const float*, float*, float*,
                                     std::int64_t, std::int64_t, std::int64_t);
template void linear_backward<double>(const double*, const double*, const double*, double*,
                                      double*, std::int64_t, std::int64_t, std::int64_t);

}  // namespace weft::kernels
