#include "weft/nn/blocked_attention.h"

#include <algorithm>
#include <vector>

#include "weft/kernels/attention.h"
#include "weft/nn/layers.h"
#include "weft/nn/leaf_sums.h"

namespace weft::nn {
namespace {

// Where each block of each sequence sits, and which rank holds it.
struct Blocks {
  const BlockedShape& s;
  int ranks, rank;

  Blocks(const ContextParallel* cp, const BlockedShape& shape)
      : s(shape), ranks(cp != nullptr ? cp->size() : 1), rank(cp != nullptr ? cp->rank() : 0) {}

  std::int64_t rows() const { return s.sequence_rows * ranks / s.blocks; }  // L
  std::int64_t local_rows() const { return s.batch * s.sequence_rows; }
  int per_chunk() const { return s.blocks / (2 * ranks); }
  int chunk(int k) const { return k / per_chunk(); }
  int owner(int k) const {
    if (ranks == 1) return 0;
    return chunk(k) < ranks ? chunk(k) : 2 * ranks - 1 - chunk(k);
  }
  // The first of block k of sequence b's rows, in its owner's rows.
  std::int64_t row(int k, std::int64_t b) const {
    if (ranks == 1) return b * s.sequence_rows + k * rows();
    const int local = chunk(k) < ranks ? 0 : 1;
    return (local * s.batch + b) * (s.sequence_rows / 2) + (k - chunk(k) * per_chunk()) * rows();
  }
  std::vector<int> held_by(int r) const {
    std::vector<int> held;
    for (int k = 0; k < s.blocks; ++k) {
      if (owner(k) == r) held.push_back(k);
    }
    return held;
  }
  std::int64_t kv_width() const { return 2 * s.kv_heads * s.head_dim; }
  std::int64_t out_width() const { return s.heads * s.head_dim; }
  // One sequence's query block i against key block j.
  kernels::AttentionShape shape(int i, int j) const {
    return {.batch = 1,
            .seq = rows(),
            .heads = s.heads,
            .kv_heads = s.kv_heads,
            .head_dim = s.head_dim,
            .q_stride = s.width(),
            .kv_stride = kv_width(),
            .causal_offset = (i - j) * rows()};
  }
  // (query block, key block) terms rank `from` computes for key blocks rank `to` holds, per
  // sequence: each sequence's come in this order, the sequences one after the other.
  std::vector<std::pair<int, int>> terms(int from, int to) const {
    std::vector<std::pair<int, int>> t;
    for (int i : held_by(from)) {
      for (int j = 0; j <= i; ++j) {
        if (owner(j) == to) t.emplace_back(i, j);
      }
    }
    return t;
  }
};

// Every rank's keys and values, packed ([rank][its rows][k | v]).
template <class T>
const T* gather_keys_values(const ContextParallel* cp, const Blocks& at, const T* qkv,
                            BlockedScratch& scratch) {
  const std::int64_t rows = at.local_rows(), width = at.kv_width(), n = rows * width;
  T* own = ensure_as<T>(scratch.own, n);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* from = qkv + r * at.s.width() + at.out_width();
    std::copy(from, from + width, own + r * width);
  }
  if (at.ranks == 1) return own;
  T* all = ensure_as<T>(scratch.all, at.ranks * n);
  cp->all_gather(own, all, n);
  return all;
}

template <class T>
const T* keys_of(const Blocks& at, const T* all, int k, std::int64_t b) {
  return all + (at.owner(k) * at.local_rows() + at.row(k, b)) * at.kv_width();
}

}  // namespace

template <class T>
void blocked_attention_forward(const ContextParallel* cp, const BlockedShape& s, const T* qkv,
                               float* out, float* lse, BlockedScratch& scratch) {
  const Blocks at(cp, s);
  const std::int64_t rows = at.rows();
  const T* all = gather_keys_values(cp, at, qkv, scratch);
  float* part = ensure(scratch.part, {rows, at.out_width()});
  float* part_lse = ensure(scratch.part_lse, {s.heads, rows});
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (int i : at.held_by(at.rank)) {
      const std::int64_t row = at.row(i, b);
      const T* q = qkv + row * s.width();
      float* o = out + row * at.out_width();
      float* l = lse + row * s.heads;
      for (int j = 0; j <= i; ++j) {
        const T* k = keys_of(at, all, j, b);
        kernels::attention_forward(at.shape(i, j), q, k, k + s.kv_heads * s.head_dim,
                                   j == 0 ? o : part, j == 0 ? l : part_lse);
        if (j > 0) kernels::attention_merge(1, rows, s.heads, s.head_dim, o, l, part, part_lse);
      }
    }
  }
}

template <class T>
void blocked_attention_backward(const ContextParallel* cp, const BlockedShape& s, const T* qkv,
                                const T* out, const float* dout, const float* lse, float* dqkv,
                                BlockedScratch& scratch) {
  const Blocks at(cp, s);
  const std::int64_t rows = at.rows(), term = rows * at.kv_width();
  const T* all = gather_keys_values(cp, at, qkv, scratch);
  // Each rank's terms for each other rank, sized for the most any pair of ranks exchanges.
  std::size_t most = 0;
  for (int from = 0; from < at.ranks; ++from) {
    for (int to = 0; to < at.ranks; ++to) most = std::max(most, at.terms(from, to).size());
  }
  const std::int64_t slot = static_cast<std::int64_t>(most) * s.batch * term;  // a pair's
  float* send = ensure(scratch.send, {at.ranks * slot});
  float* grad_q = ensure(scratch.grad_q, {rows, s.width()});
  for (std::int64_t r = 0; r < s.batch * s.sequence_rows; ++r)
    std::fill(dqkv + r * s.width(), dqkv + r * s.width() + at.out_width(), 0.0f);
  std::vector<std::int64_t> sent(static_cast<std::size_t>(at.ranks), 0);
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (int i : at.held_by(at.rank)) {
      const std::int64_t row = at.row(i, b);
      for (int j = 0; j <= i; ++j) {
        const T* k = keys_of(at, all, j, b);
        const int to = at.owner(j);
        float* dkv = send + to * slot + sent[static_cast<std::size_t>(to)]++ * term;
        kernels::attention_backward(at.shape(i, j), qkv + row * s.width(), k,
                                    k + s.kv_heads * s.head_dim, out + row * at.out_width(),
                                    dout + row * at.out_width(), lse + row * s.heads, grad_q, dkv,
                                    dkv + s.kv_heads * s.head_dim);
        for (std::int64_t r = 0; r < rows; ++r) {
          float* dq = dqkv + (row + r) * s.width();
          const float* g = grad_q + r * s.width();
          for (std::int64_t x = 0; x < at.out_width(); ++x) dq[x] += g[x];
        }
      }
    }
  }
  float* recv = send;
  if (at.ranks > 1) {
    recv = ensure(scratch.recv, {at.ranks * slot});
    cp->group->all_to_all(send, recv, slot);
  }
  // Key block j of sequence b: the terms of every query block, from whichever rank.
  std::vector<std::vector<LeafBlock>> leaves(static_cast<std::size_t>(s.batch * s.blocks));
  std::vector<std::vector<float*>> values(leaves.size());
  for (int from = 0; from < at.ranks; ++from) {
    const auto terms = at.terms(from, at.rank);
    float* next = recv + from * slot;
    for (std::int64_t b = 0; b < s.batch; ++b) {
      for (const auto& [i, j] : terms) {
        const auto at_key = static_cast<std::size_t>(b * s.blocks + j);
        leaves[at_key].push_back({i, 1});
        values[at_key].push_back(next);
        next += term;
      }
    }
  }
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (int j : at.held_by(at.rank)) {
      const auto at_key = static_cast<std::size_t>(b * s.blocks + j);
      const float* sum = combine_blocks(leaves[at_key], values[at_key], term);
      const std::int64_t row = at.row(j, b);
      for (std::int64_t r = 0; r < rows; ++r) {
        std::copy(sum + r * at.kv_width(), sum + (r + 1) * at.kv_width(),
                  dqkv + (row + r) * s.width() + at.out_width());
      }
    }
  }
}

#define WEFT_BLOCKED_ATTENTION(T)                                                                 \
  template void blocked_attention_forward(const ContextParallel*, const BlockedShape&, const T*,  \
                                          float*, float*, BlockedScratch&);                       \
  template void blocked_attention_backward(const ContextParallel*, const BlockedShape&, const T*, \
                                           const T*, const float*, const float*, float*,          \
                                           BlockedScratch&);
WEFT_BLOCKED_ATTENTION(float)
WEFT_BLOCKED_ATTENTION(BFloat16)
#undef WEFT_BLOCKED_ATTENTION

}  // namespace weft::nn
