#include "weft/kernels/blas.h"

#include <cblas.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

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

constexpr std::int64_t kRowGrain = 128;  // rows per share at least

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

// With several threads, the rows (tokens) are split between them, each running a
// single-threaded product on its share: for the tall, narrow products of training this
// scales better than OpenBLAS's own threading (docs/PERFORMANCE.md). dW sums over the rows,
// so each share's part goes to its own buffer and the parts are added in share order.
template <class T>
void linear_forward(const T* x, const T* w, T* y, std::int64_t rows, std::int64_t in,
                    std::int64_t out) {
  parallel_for(rows, kRowGrain, [&](std::int64_t first, std::int64_t end) {
    gemm<T>(false, true, end - first, out, in, T(1), x + first * in, in, w, in, T(0), y + first * out, out);
  });
}

template <class T>
void linear_backward(const T* dy, const T* x, const T* w, T* dx, T* dw, std::int64_t rows,
                     std::int64_t in, std::int64_t out) {
  if (dx != nullptr) {
    parallel_for(rows, kRowGrain, [&](std::int64_t first, std::int64_t end) {
      gemm<T>(false, false, end - first, in, out, T(1), dy + first * out, out, w, in, T(0),
              dx + first * in, in);
    });
  }
  const int shares = static_cast<int>(std::min<std::int64_t>(threads(), rows / kRowGrain));
  if (shares <= 1) {
    gemm<T>(true, false, out, in, rows, T(1), dy, out, x, in, T(1), dw, in);
    return;
  }
  // Uninitialised: the products below overwrite them (beta = 0).
  std::vector<std::unique_ptr<T[]>> parts(static_cast<std::size_t>(shares));
  parallel_for(shares, 1, [&](std::int64_t s0, std::int64_t s1) {
    for (std::int64_t s = s0; s < s1; ++s) {
      const std::int64_t first = rows * s / shares, end = rows * (s + 1) / shares;
      auto& part = parts[static_cast<std::size_t>(s)];
      part.reset(new T[static_cast<std::size_t>(out * in)]);
      gemm<T>(true, false, out, in, end - first, T(1), dy + first * out, out, x + first * in, in,
              T(0), part.get(), in);
    }
  });
  // Each element sums the parts in share order, whichever thread adds it.
  parallel_for(out * in, 1 << 14, [&](std::int64_t first, std::int64_t end) {
    for (const auto& part : parts) {
      for (std::int64_t i = first; i < end; ++i) dw[i] += part[static_cast<std::size_t>(i)];
    }
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

template void linear_forward<float>(const float*, const float*, float*, std::int64_t,
                                    std::int64_t, std::int64_t);
template void linear_forward<double>(const double*, const double*, double*, std::int64_t,
                                     std::int64_t, std::int64_t);
template void linear_backward<float>(const float*, const float*, const float*, float*, float*,
                                     std::int64_t, std::int64_t, std::int64_t);
template void linear_backward<double>(const double*, const double*, const double*, double*,
                                      double*, std::int64_t, std::int64_t, std::int64_t);

}  // namespace weft::kernels
