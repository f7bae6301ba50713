// Token embedding: out[i] = table[tokens[i]] (rows of `dim`). Tokens are checked against the
// vocabulary: an id outside [0, vocab) throws weft::InvalidArgument naming it.
#pragma once

#include <cstdint>

namespace weft::kernels {

template <class T>
void embedding_forward(const std::int32_t* tokens, std::int64_t n, const T* table,
                       std::int64_t vocab, std::int64_t dim, T* out);
// dtable[tokens[i]] += dout[i] (accumulates, in token order: deterministic).
template <class T>
void embedding_backward(const std::int32_t* tokens, std::int64_t n, const T* dout,
                        std::int64_t vocab, std::int64_t dim, T* dtable);

// The same on a shard of the table (tensor parallelism over the vocabulary): `table` holds
// rows [first, first + rows) of the vocab rows. A token outside them gives a zero row in
// forward and nothing in backward, so the sum over the shards is the whole lookup.
template <class T>
void embedding_forward_shard(const std::int32_t* tokens, std::int64_t n, const T* table,
                             std::int64_t vocab, std::int64_t first, std::int64_t rows,
                             std::int64_t dim, T* out);
template <class T>
void embedding_backward_shard(const std::int32_t* tokens, std::int64_t n, const T* dout,
                              std::int64_t vocab, std::int64_t first, std::int64_t rows,
                              std::int64_t dim, T* dtable);

}  // namespace weft::kernels
