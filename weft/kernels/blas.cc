#include "weft/kernels/blas.h"

#include <cblas.h>

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

constexpr std::int64_t kRowGrain = 128;     // rows per share at least
constexpr std::int64_t kFeatureGrain = 64;  // rows of dW per share at least

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

// With several threads each runs a single-threaded product on its share: for the tall,
// narrow products of training this scales better than OpenBLAS's own threading
// (docs/PERFORMANCE.md). y and dx split the rows (tokens); dW splits its own rows (output
// features), each share summing over every token, so no partial sums are needed and the
// result does not depend on the number of threads.
template <class T>
void linear_forward(const T* x, const T* w, T* y, std::int64_t rows, std::int64_t in,
                    std::int64_t out, bool accumulate) {
  const T beta = accumulate ? T(1) : T(0);
  parallel_for(rows, kRowGrain, [&](std::int64_t first, std::int64_t end) {
    gemm<T>(false, true, end - first, out, in, T(1), x + first * in, in, w, in, beta,
            y + first * out, out);
  });
}

template <class T>
void linear_backward(const T* dy, const T* x, const T* w, T* dx, T* dw, std::int64_t rows,
                     std::int64_t in, std::int64_t out, bool accumulate_dx) {
  if (dx != nullptr) {
    const T beta = accumulate_dx ? T(1) : T(0);
    parallel_for(rows, kRowGrain, [&](std::int64_t first, std::int64_t end) {
      gemm<T>(false, false, end - first, in, out, T(1), dy + first * out, out, w, in, beta,
              dx + first * in, in);
    });
  }
  parallel_for(out, kFeatureGrain, [&](std::int64_t first, std::int64_t end) {
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
template void linear_backward<double>(const double*, const double*, const double*, double*,
                                      double*, std::int64_t, std::int64_t, std::int64_t, bool);

}  // namespace weft::kernels
