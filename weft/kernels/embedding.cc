#include "weft/kernels/embedding.h"

#include <algorithm>

#include "weft/kernels/internal/check_ids.h"

namespace weft::kernels {

template <class T>
void embedding_forward(const std::int32_t* tokens, std::int64_t n, const T* table,
                       std::int64_t vocab, std::int64_t dim, T* out) {
  embedding_forward_shard(tokens, n, table, vocab, 0, vocab, dim, out);
}

template <class T>
void embedding_backward(const std::int32_t* tokens, std::int64_t n, const T* dout,
                        std::int64_t vocab, std::int64_t dim, T* dtable) {
  embedding_backward_shard(tokens, n, dout, vocab, 0, vocab, dim, dtable);
}

template <class T>
void embedding_forward_shard(const std::int32_t* tokens, std::int64_t n, const T* table,
                             std::int64_t vocab, std::int64_t first, std::int64_t rows,
                             std::int64_t dim, T* out) {
  internal::check_ids(tokens, n, vocab, "embedding: token");
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t row = tokens[i] - first;
    if (row >= 0 && row < rows) {
      std::copy_n(table + row * dim, dim, out + i * dim);
    } else {
      std::fill_n(out + i * dim, dim, T(0));
    }
  }
}

template <class T>
void embedding_backward_shard(const std::int32_t* tokens, std::int64_t n, const T* dout,
                              std::int64_t vocab, std::int64_t first, std::int64_t rows,
                              std::int64_t dim, T* dtable) {
  internal::check_ids(tokens, n, vocab, "embedding: token");
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = tokens[i] - first;
    if (r < 0 || r >= rows) continue;
    T* row = dtable + r * dim;
    const T* d = dout + i * dim;
    for (std::int64_t j = 0; j < dim; ++j) row[j] += d[j];
  }
}

#define WEFT_EMBEDDING(T)                                                                          \
  template void embedding_forward<T>(const std::int32_t*, std::int64_t, const T*, std::int64_t,    \
                                     std::int64_t, T*);                                            \
  template void embedding_backward<T>(const std::int32_t*, std::int64_t, const T*, std::int64_t,   \
                                      std::int64_t, T*);                                           \
  template void embedding_forward_shard<T>(const std::int32_t*, std::int64_t, const T*,            \
                                           std::int64_t, std::int64_t, std::int64_t, std::int64_t, \
                                           T*);                                                    \
  template void embedding_backward_shard<T>(const std::int32_t*, std::int64_t, const T*,           \
                                            std::int64_t, std::int64_t, std::int64_t,              \
                                            std::int64_t, T*);
WEFT_EMBEDDING(float)
WEFT_EMBEDDING(double)
#undef WEFT_EMBEDDING

}  // namespace weft::kernels
