// Softmax cross-entropy over a vocabulary: loss_i = logsumexp(logits_i) - logits_i[target_i].
// Targets outside [0, vocab) throw weft::InvalidArgument naming them.
#pragma once

#include <cstdint>

#include "weft/base/dtype.h"

namespace weft::kernels {

// Per-row losses into losses[n]; returns their sum (in double).
template <class T>
double cross_entropy_forward(const T* logits, const std::int32_t* targets, std::int64_t n,
                             std::int64_t vocab, T* losses);
// dlogits (overwritten) = (softmax(logits) - onehot(target)) * dloss, for every row: dloss is
// the gradient of the objective with respect to each row's loss (1 / tokens for a mean).
template <class T>
void cross_entropy_backward(const T* logits, const std::int32_t* targets, std::int64_t n,
                            std::int64_t vocab, double dloss, T* dlogits);

// Loss parallel (the vocabulary split across ranks): `logits` [n, shard] are columns
// [first, first + shard) of a `vocab`-wide row. A rank computes, per row,
//   1. cross_entropy_shard_max: the maximum of its columns; the caller takes the maximum
//      over the ranks (all-reduce max);
//   2. cross_entropy_shard_sums: with that global max, sum(exp(logit - max)) over its
//      columns and the target's logit where the target is one of them (else 0); the caller
//      sums both over the ranks, and loss = max + log(sum_exp) - target_logit;
//   3. cross_entropy_shard_backward: dlogits = (exp(logit - shift) - onehot) * dloss over its
//      columns, with shift = max + log(sum_exp) of the whole row.
// cross_entropy_shard_sums also takes the columns at a row stride `ld` (0: shard), so that the
// layout-invariant mode sums a rank's columns in fixed blocks (nn/feature_blocks.h).
template <class T>
void cross_entropy_shard_max(const T* logits, std::int64_t n, std::int64_t shard, T* max);
template <class T>
void cross_entropy_shard_sums(const T* logits, const std::int32_t* targets, std::int64_t n,
                              std::int64_t vocab, std::int64_t first, std::int64_t shard,
                              const T* max, T* sum_exp, T* target_logit, std::int64_t ld = 0);
template <class T>
void cross_entropy_shard_backward(const T* logits, const std::int32_t* targets, std::int64_t n,
                                  std::int64_t vocab, std::int64_t first, std::int64_t shard,
                                  const T* shift, double dloss, T* dlogits);

// Mixed precision: the same gradients written in bfloat16, for the output layer's products
// that read them (computed in float32, then rounded: bitwise the float32 kernels' rounded).
void cross_entropy_backward(const float* logits, const std::int32_t* targets, std::int64_t n,
                            std::int64_t vocab, double dloss, BFloat16* dlogits);
void cross_entropy_shard_backward(const float* logits, const std::int32_t* targets, std::int64_t n,
                                  std::int64_t vocab, std::int64_t first, std::int64_t shard,
                                  const float* shift, double dloss, BFloat16* dlogits);

}  // namespace weft::kernels
