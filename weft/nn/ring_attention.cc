#include "weft/nn/ring_attention.h"

#include <algorithm>
#include <memory>

#include "weft/base/check.h"
#include "weft/kernels/attention.h"
#include "weft/kernels/rope.h"
#include "weft/nn/layers.h"

namespace weft::nn {
namespace {

// Tags of the two shifts that may be in flight at once in backward.
constexpr int kKeysValues = 0, kGradients = 1;

// Where one (sequence, local chunk) lies in this rank's arrays.
struct ChunkAt {
  const RingShape& s;
  std::int64_t row(std::int64_t b, int local) const { return (b * 2 + local) * s.chunk; }
  std::int64_t kv_width() const { return 2 * s.kv_heads * s.head_dim; }  // k|v in a kv block
  std::int64_t out_width() const { return s.heads * s.head_dim; }
  std::int64_t lse(std::int64_t b, int local) const { return (b * 2 + local) * s.heads * s.chunk; }
};

// Chunk `q_chunk`'s queries against chunk `kv_chunk`'s keys (global indices): whole when the
// keys come earlier, causal when they are the same chunk.
kernels::AttentionShape block_shape(const RingShape& s, int q_chunk, int kv_chunk) {
  return {.batch = 1,
          .seq = s.chunk,
          .heads = s.heads,
          .kv_heads = s.kv_heads,
          .head_dim = s.head_dim,
          .q_stride = s.width(),
          .kv_stride = 2 * s.kv_heads * s.head_dim,
          .causal_offset = (q_chunk - kv_chunk) * s.chunk};
}

// This rank's keys and values, out of the fused rows into a block of their own.
void pack_keys_values(const RingShape& s, const float* qkv, float* kv) {
  const ChunkAt at{s};
  const std::int64_t rows = s.batch * 2 * s.chunk, q_width = at.out_width();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* from = qkv + r * s.width() + q_width;
    std::copy(from, from + at.kv_width(), kv + r * at.kv_width());
  }
}

// Rank (rank - step) mod size: whose keys and values a rank holds at ring step `step`.
int holder_at(const ContextParallel& cp, int step) {
  return (cp.rank() - step % cp.size() + cp.size()) % cp.size();
}

}  // namespace

void ring_attention_forward(const ContextParallel& cp, const RingShape& s, const float* qkv,
                            float* out, float* lse, RingScratch& scratch) {
  WEFT_CHECK(cp.enabled());
  const ChunkAt at{s};
  const std::int64_t block = s.batch * 2 * s.chunk * at.kv_width();
  float* kv[2] = {ensure(scratch.kv[0], {block}), ensure(scratch.kv[1], {block})};
  float* part = ensure(scratch.part, {s.chunk, at.out_width()});
  float* part_lse = ensure(scratch.part_lse, {s.heads, s.chunk});
  pack_keys_values(s, qkv, kv[0]);
  for (int step = 0; step < cp.size(); ++step) {
    std::unique_ptr<ContextParallelGroup::Pending> next;
    if (step + 1 < cp.size()) {
      next = cp.group->ring_shift_async(kv[step % 2], kv[(step + 1) % 2], block, kKeysValues);
    }
    const int holder = holder_at(cp, step);
    const float* keys = kv[step % 2];
    for (std::int64_t b = 0; b < s.batch; ++b) {
      for (int q_local = 0; q_local < 2; ++q_local) {
        for (int kv_local = 0; kv_local < 2; ++kv_local) {
          const int q_chunk = cp.chunk(q_local), kv_chunk = cp.chunk_of(holder, kv_local);
          if (kv_chunk > q_chunk) continue;  // wholly above the diagonal
          // Step 0 holds this rank's own chunks, and chunk 0 (rank's index) comes before both
          // of them: the first block of every query chunk, written in place.
          const bool first = step == 0 && kv_local == 0;
          const float* k = keys + at.row(b, kv_local) * at.kv_width();
          float* o = out + at.row(b, q_local) * at.out_width();
          float* l = lse + at.lse(b, q_local);
          kernels::attention_forward(
              block_shape(s, q_chunk, kv_chunk), qkv + at.row(b, q_local) * s.width(), k,
              k + s.kv_heads * s.head_dim, first ? o : part, first ? l : part_lse);
          if (!first) kernels::attention_merge(s.chunk, s.heads, s.head_dim, o, l, part, part_lse);
        }
      }
    }
    if (next) next->wait();
  }
}

void ring_attention_backward(const ContextParallel& cp, const RingShape& s, const float* qkv,
                             const float* out, const float* dout, const float* lse, float* dqkv,
                             RingScratch& scratch) {
  WEFT_CHECK(cp.enabled());
  const ChunkAt at{s};
  const std::int64_t block = s.batch * 2 * s.chunk * at.kv_width();
  float* kv[2] = {ensure(scratch.kv[0], {block}), ensure(scratch.kv[1], {block})};
  float* dkv[2] = {ensure(scratch.dkv[0], {block}), ensure(scratch.dkv[1], {block})};
  // One block's gradients, in the strides the kernel writes them: q's rows as wide as qkv's.
  float* grad_q = ensure(scratch.grad_q, {s.chunk, s.width()});
  float* grad_kv = ensure(scratch.grad_kv, {s.chunk, at.kv_width()});
  pack_keys_values(s, qkv, kv[0]);
  std::fill(dkv[0], dkv[0] + block, 0.0f);
  const std::int64_t rows = s.batch * 2 * s.chunk;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::fill(dqkv + r * s.width(), dqkv + r * s.width() + at.out_width(), 0.0f);
  }
  for (int step = 0; step < cp.size(); ++step) {
    std::unique_ptr<ContextParallelGroup::Pending> next_kv;
    if (step + 1 < cp.size()) {
      next_kv = cp.group->ring_shift_async(kv[step % 2], kv[(step + 1) % 2], block, kKeysValues);
    }
    const int holder = holder_at(cp, step);
    const float* keys = kv[step % 2];
    float* grads = dkv[step % 2];
    for (std::int64_t b = 0; b < s.batch; ++b) {
      for (int q_local = 0; q_local < 2; ++q_local) {
        for (int kv_local = 0; kv_local < 2; ++kv_local) {
          const int q_chunk = cp.chunk(q_local), kv_chunk = cp.chunk_of(holder, kv_local);
          if (kv_chunk > q_chunk) continue;
          const std::int64_t q_row = at.row(b, q_local), kv_row = at.row(b, kv_local);
          const float* k = keys + kv_row * at.kv_width();
          kernels::attention_backward(block_shape(s, q_chunk, kv_chunk), qkv + q_row * s.width(), k,
                                      k + s.kv_heads * s.head_dim, out + q_row * at.out_width(),
                                      dout + q_row * at.out_width(), lse + at.lse(b, q_local),
                                      grad_q, grad_kv, grad_kv + s.kv_heads * s.head_dim);
          for (std::int64_t r = 0; r < s.chunk; ++r) {
            float* dq = dqkv + (q_row + r) * s.width();
            const float* g = grad_q + r * s.width();
            for (std::int64_t x = 0; x < at.out_width(); ++x) dq[x] += g[x];
          }
          float* dk = grads + kv_row * at.kv_width();
          for (std::int64_t x = 0; x < s.chunk * at.kv_width(); ++x) dk[x] += grad_kv[x];
        }
      }
    }
    // The gradients go on with their keys and values; after the last step they reach the rank
    // that owns them, which holds its own in dkv[size % 2] then.
    const auto shifted = cp.group->ring_shift_async(grads, dkv[(step + 1) % 2], block, kGradients);
    if (next_kv) next_kv->wait();
    shifted->wait();
  }
  const float* own = dkv[cp.size() % 2];
  for (std::int64_t r = 0; r < rows; ++r) {
    std::copy(own + r * at.kv_width(), own + (r + 1) * at.kv_width(),
              dqkv + r * s.width() + at.out_width());
  }
}

void rope_chunks(const ContextParallel& cp, const RingShape& s, double theta, float* qkv,
                 bool backward) {
  const ChunkAt at{s};
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (int local = 0; local < 2; ++local) {
      float* x = qkv + at.row(b, local) * s.width();
      const std::int64_t position = cp.chunk(local) * s.chunk;
      if (backward) {
        kernels::rope_backward(x, 1, s.chunk, s.heads + s.kv_heads, s.head_dim, theta, position,
                               s.width());
      } else {
        kernels::rope_forward(x, 1, s.chunk, s.heads + s.kv_heads, s.head_dim, theta, position,
                              s.width());
      }
    }
  }
}

}  // namespace weft::nn
