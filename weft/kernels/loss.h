// Softmax cross-entropy over a vocabulary: loss_i = logsumexp(logits_i) - logits_i[target_i].
// Targets outside [0, vocab) throw weft::InvalidArgument naming them.
#pragma once

#include <cstdint>

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

}  // namespace weft::kernels
