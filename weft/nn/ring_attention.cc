#include "weft/nn/ring_attention.h"

#include <algorithm>
#include <memory>

#include "weft/base/check.h"
#include "weft/kernels/attention.h"
#include "weft/kernels/elementwise.h"
#include "weft/kernels/rope.h"
#include "weft/nn/layers.h"

namespace weft::nn {
namespace {

// Tags of the two shifts that may be in flight at once in backward.
constexpr int kKeysValues = 0, kGradients = 1;

// Where a local chunk's rows (of every sequence) start in this rank's arrays.
struct ChunkAt {
  const RingShape& s;
  std::int64_t row(int local) const { return local * s.batch * s.chunk; }
  std::int64_t rows() const { return s.batch * s.chunk; }                // of one local chunk
  std::int64_t kv_width() const { return 2 * s.kv_heads * s.head_dim; }  // k|v in a kv block
  std::int64_t out_width() const { return s.heads * s.head_dim; }
  std::int64_t lse(int local) const { return local * s.batch * s.heads * s.chunk; }
};

// Chunk `q_chunk`'s queries against chunk `kv_chunk`'s keys (global indices), of every
// sequence: whole when the keys come earlier, causal when they are the same chunk.
kernels::AttentionShape block_shape(const RingShape& s, int q_chunk, int kv_chunk) {
  return {.batch = s.batch,
          .seq = s.chunk,
          .heads = s.heads,
          .kv_heads = s.kv_heads,
          .head_dim = s.head_dim,
          .q_stride = s.width(),
          .kv_stride = 2 * s.kv_heads * s.head_dim,
          .causal_offset = (q_chunk - kv_chunk) * s.chunk};
}

// This rank's keys and values, out of the fused rows into a block of their own.
template <class T>
void pack_keys_values(const RingShape& s, const T* qkv, T* kv) {
  const ChunkAt at{s};
  const std::int64_t rows = s.batch * 2 * s.chunk, q_width = at.out_width();
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* from = qkv + r * s.width() + q_width;
    std::copy(from, from + at.kv_width(), kv + r * at.kv_width());
  }
}

// Rank (rank - step) mod size: whose keys and values a rank holds at ring step `step`.
int holder_at(const ContextParallel& cp, int step) {
  return (cp.rank() - step % cp.size() + cp.size()) % cp.size();
}

// This rank's two query chunks against `holder`'s two chunks of keys and values (`keys`, a
// packed block), merged into out and lse. The first block of every query chunk is the rank's
// own chunk 0 (chunk `rank`, which comes before both of its query chunks): written in place.
template <class T>
void attend(const ContextParallel& cp, const RingShape& s, const T* qkv, const T* keys, int holder,
            float* out, float* lse, RingScratch& scratch) {
  const ChunkAt at{s};
  float* part = ensure(scratch.part, {at.rows(), at.out_width()});
  float* part_lse = ensure(scratch.part_lse, {s.batch, s.heads, s.chunk});
  for (int q_local = 0; q_local < 2; ++q_local) {
    for (int kv_local = 0; kv_local < 2; ++kv_local) {
      const int q_chunk = cp.chunk(q_local), kv_chunk = cp.chunk_of(holder, kv_local);
      if (kv_chunk > q_chunk) continue;  // wholly above the diagonal
      const bool first = holder == cp.rank() && kv_local == 0;
      const T* k = keys + at.row(kv_local) * at.kv_width();
      float* o = out + at.row(q_local) * at.out_width();
      float* l = lse + at.lse(q_local);
      kernels::attention_forward(block_shape(s, q_chunk, kv_chunk),
                                 qkv + at.row(q_local) * s.width(), k, k + s.kv_heads * s.head_dim,
                                 first ? o : part, first ? l : part_lse);
      if (!first) {
        kernels::attention_merge(s.batch, s.chunk, s.heads, s.head_dim, o, l, part, part_lse);
      }
    }
  }
}

// The backward of attend(): dq added to q's columns of dqkv, the gradients of `holder`'s keys
// and values added to `grads` (a packed block).
template <class T>
void attend_backward(const ContextParallel& cp, const RingShape& s, const T* qkv, const T* keys,
                     int holder, const T* out, const float* dout, const float* lse, float* dqkv,
                     float* grads, RingScratch& scratch) {
  const ChunkAt at{s};
  // One block's gradients, in the strides the kernel writes them: q's rows as wide as qkv's.
  float* grad_q = ensure(scratch.grad_q, {at.rows(), s.width()});
  float* grad_kv = ensure(scratch.grad_kv, {at.rows(), at.kv_width()});
  for (int q_local = 0; q_local < 2; ++q_local) {
    for (int kv_local = 0; kv_local < 2; ++kv_local) {
      const int q_chunk = cp.chunk(q_local), kv_chunk = cp.chunk_of(holder, kv_local);
      if (kv_chunk > q_chunk) continue;
      const std::int64_t q_row = at.row(q_local), kv_row = at.row(kv_local);
      const T* k = keys + kv_row * at.kv_width();
      kernels::attention_backward(block_shape(s, q_chunk, kv_chunk), qkv + q_row * s.width(), k,
                                  k + s.kv_heads * s.head_dim, out + q_row * at.out_width(),
                                  dout + q_row * at.out_width(), lse + at.lse(q_local), grad_q,
                                  grad_kv, grad_kv + s.kv_heads * s.head_dim);
      kernels::add_rows(dqkv + q_row * s.width(), s.width(), grad_q, s.width(), at.rows(),
                        at.out_width());
      kernels::add_rows(grads + kv_row * at.kv_width(), at.kv_width(), grad_kv, at.kv_width(),
                        at.rows(), at.kv_width());
    }
  }
}

void zero_q_columns(const RingShape& s, float* dqkv) {
  const std::int64_t rows = s.batch * 2 * s.chunk, q_width = s.heads * s.head_dim;
  for (std::int64_t r = 0; r < rows; ++r)
    std::fill(dqkv + r * s.width(), dqkv + r * s.width() + q_width, 0.0f);
}

// The gradients of this rank's keys and values (a packed block) into their columns of dqkv.
void unpack_key_value_grads(const RingShape& s, const float* own, float* dqkv) {
  const ChunkAt at{s};
  const std::int64_t rows = s.batch * 2 * s.chunk;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::copy(own + r * at.kv_width(), own + (r + 1) * at.kv_width(),
              dqkv + r * s.width() + at.out_width());
  }
}

std::int64_t block_size(const RingShape& s) {
  return s.batch * 2 * s.chunk * 2 * s.kv_heads * s.head_dim;
}

// Blocks of keys and values travel as they are stored: bfloat16 ones as their bytes, in
// float-sized words (the shift copies them, never adds; a block's element count is even).
template <class T>
float* words(T* p) {
  return reinterpret_cast<float*>(p);
}
template <class T>
std::int64_t word_count(std::int64_t n) {
  return n * static_cast<std::int64_t>(sizeof(T)) / static_cast<std::int64_t>(sizeof(float));
}

template <class T>
std::unique_ptr<ContextParallelGroup::Pending> shift(const ContextParallel& cp, T* send, T* recv,
                                                     std::int64_t n) {
  return cp.group->ring_shift_async(words(send), words(recv), word_count<T>(n), kKeysValues);
}

// The ring: cp steps, each computing against the block held while the next one arrives.
template <class T>
void ring_forward(const ContextParallel& cp, const RingShape& s, const T* qkv, float* out,
                  float* lse, RingScratch& scratch) {
  const std::int64_t block = block_size(s);
  T* kv[2] = {ensure_as<T>(scratch.kv[0], block), ensure_as<T>(scratch.kv[1], block)};
  pack_keys_values(s, qkv, kv[0]);
  for (int step = 0; step < cp.size(); ++step) {
    std::unique_ptr<ContextParallelGroup::Pending> next;
    if (step + 1 < cp.size()) next = shift(cp, kv[step % 2], kv[(step + 1) % 2], block);
    attend(cp, s, qkv, kv[step % 2], holder_at(cp, step), out, lse, scratch);
    if (next) next->wait();
  }
}

// The keys and values go around again, each block's gradients travelling with it; after the
// last step one more shift brings each block's gradients to the rank that owns it, which
// holds its own in dkv[size % 2] then.
template <class T>
void ring_backward(const ContextParallel& cp, const RingShape& s, const T* qkv, const T* out,
                   const float* dout, const float* lse, float* dqkv, RingScratch& scratch) {
  const std::int64_t block = block_size(s);
  T* kv[2] = {ensure_as<T>(scratch.kv[0], block), ensure_as<T>(scratch.kv[1], block)};
  float* dkv[2] = {ensure(scratch.dkv[0], {block}), ensure(scratch.dkv[1], {block})};
  pack_keys_values(s, qkv, kv[0]);
  std::fill(dkv[0], dkv[0] + block, 0.0f);
  for (int step = 0; step < cp.size(); ++step) {
    std::unique_ptr<ContextParallelGroup::Pending> next_kv;
    if (step + 1 < cp.size()) next_kv = shift(cp, kv[step % 2], kv[(step + 1) % 2], block);
    attend_backward(cp, s, qkv, kv[step % 2], holder_at(cp, step), out, dout, lse, dqkv,
                    dkv[step % 2], scratch);
    const auto shifted =
        cp.group->ring_shift_async(dkv[step % 2], dkv[(step + 1) % 2], block, kGradients);
    if (next_kv) next_kv->wait();
    shifted->wait();
  }
  unpack_key_value_grads(s, dkv[cp.size() % 2], dqkv);
}

// All-gather: every rank's block at once, then the same blocks in the ring's order (so the
// forward gives the ring's bits); in backward the blocks' key and value gradients are summed
// onto their owners by one reduce-scatter.
template <class T>
void gathered_forward(const ContextParallel& cp, const RingShape& s, const T* qkv, float* out,
                      float* lse, RingScratch& scratch) {
  const std::int64_t block = block_size(s);
  T* own = ensure_as<T>(scratch.kv[0], block);
  T* all = ensure_as<T>(scratch.kv[1], cp.size() * block);
  pack_keys_values(s, qkv, own);
  cp.all_gather(own, all, block);
  for (int step = 0; step < cp.size(); ++step) {
    const int holder = holder_at(cp, step);
    attend(cp, s, qkv, all + holder * block, holder, out, lse, scratch);
  }
}

template <class T>
void gathered_backward(const ContextParallel& cp, const RingShape& s, const T* qkv, const T* out,
                       const float* dout, const float* lse, float* dqkv, RingScratch& scratch) {
  const std::int64_t block = block_size(s);
  T* own = ensure_as<T>(scratch.kv[0], block);
  T* all = ensure_as<T>(scratch.kv[1], cp.size() * block);
  float* grads = ensure(scratch.dkv[1], {cp.size() * block});
  float* own_grads = ensure(scratch.dkv[0], {block});
  pack_keys_values(s, qkv, own);
  cp.all_gather(own, all, block);
  std::fill(grads, grads + cp.size() * block, 0.0f);
  for (int step = 0; step < cp.size(); ++step) {
    const int holder = holder_at(cp, step);
    attend_backward(cp, s, qkv, all + holder * block, holder, out, dout, lse, dqkv,
                    grads + holder * block, scratch);
  }
  cp.group->reduce_scatter(grads, own_grads, block);
  unpack_key_value_grads(s, own_grads, dqkv);
}

}  // namespace

template <class T>
void ring_attention_forward(const ContextParallel& cp, const RingShape& s, const T* qkv, float* out,
                            float* lse, RingScratch& scratch) {
  WEFT_CHECK(cp.enabled());
  if (cp.exchange == KeyValueExchange::kAllGather) {
    gathered_forward(cp, s, qkv, out, lse, scratch);
  } else {
    ring_forward(cp, s, qkv, out, lse, scratch);
  }
}

template <class T>
void ring_attention_backward(const ContextParallel& cp, const RingShape& s, const T* qkv,
                             const T* out, const float* dout, const float* lse, float* dqkv,
                             RingScratch& scratch) {
  WEFT_CHECK(cp.enabled());
  zero_q_columns(s, dqkv);
  if (cp.exchange == KeyValueExchange::kAllGather) {
    gathered_backward(cp, s, qkv, out, dout, lse, dqkv, scratch);
  } else {
    ring_backward(cp, s, qkv, out, dout, lse, dqkv, scratch);
  }
}

#define WEFT_RING_ATTENTION(T)                                                                     \
  template void ring_attention_forward(const ContextParallel&, const RingShape&, const T*, float*, \
                                       float*, RingScratch&);                                      \
  template void ring_attention_backward(const ContextParallel&, const RingShape&, const T*,        \
                                        const T*, const float*, const float*, float*,              \
                                        RingScratch&);
WEFT_RING_ATTENTION(float)
WEFT_RING_ATTENTION(BFloat16)
#undef WEFT_RING_ATTENTION

void rope_chunks(const ContextParallel& cp, const RingShape& s, double theta, float* qkv,
                 bool backward) {
  const ChunkAt at{s};
  for (int local = 0; local < 2; ++local) {
    float* x = qkv + at.row(local) * s.width();
    const std::int64_t position = cp.chunk(local) * s.chunk;
    if (backward) {
      kernels::rope_backward(x, s.batch, s.chunk, s.heads + s.kv_heads, s.head_dim, theta, position,
                             s.width());
    } else {
      kernels::rope_forward(x, s.batch, s.chunk, s.heads + s.kv_heads, s.head_dim, theta, position,
                            s.width());
    }
  }
}

void rope_chunks_bf16(const ContextParallel& cp, const RingShape& s, double theta, const float* qkv,
                      BFloat16* out, bool backward) {
  const ChunkAt at{s};
  for (int local = 0; local < 2; ++local) {
    const std::int64_t offset = at.row(local) * s.width(), position = cp.chunk(local) * s.chunk;
    const auto rope = backward ? kernels::rope_backward_bf16 : kernels::rope_forward_bf16;
    rope(qkv + offset, out + offset, s.batch, s.chunk, s.heads + s.kv_heads, s.head_dim, theta,
         position, s.width());
  }
}

}  // namespace weft::nn
