#include "weft/kernels/embedding.h"

#include <algorithm>

#include "weft/kernels/internal/check_ids.h"

namespace weft::kernels {
template <class T>
void embedding_forward(const std::int32_t* tokens, std::int64_t n, const T* table,
                       std::int64_t vocab, std::int64_t dim, T* out) {
  internal::check_ids(tokens, n, vocab, "embedding: token");
  for (std::int64_t i = 0; i < n; ++i) {
    std::copy_n(table + tokens[i] * dim, dim, out + i * dim);
  }
}

template <class T>
void embedding_backward(const std::int32_t* tokens, std::int64_t n, const T* dout,
                        std::int64_t vocab, std::int64_t dim, T* dtable) {
  internal::check_ids(tokens, n, vocab, "embedding: token");
  for (std::int64_t i = 0; i < n; ++i) {
    T* row = dtable + tokens[i] * dim;
    const T* d = dout + i * dim;
    for (std::int64_t j = 0; j < dim; ++j) row[j] += d[j];
  }
}

template void embedding_forward<float>(const std::int32_t*, std::int64_t, const float*,
                                       std::int64_t, std::int64_t, float*);
template void embedding_forward<double>(const std::int32_t*, std::int64_t, const double*,
                                        std::int64_t, std::int64_t, double*);
template void embedding_backward<float>(const std::int32_t*, std::int64_t, const float*,
                                        std::int64_t, std::int64_t, float*);
template void embedding_backward<double>(const std::int32_t*, std::int64_t, const double*,
                                         std::int64_t, std::int64_t, double*);

}  // namespace weft::kernels
