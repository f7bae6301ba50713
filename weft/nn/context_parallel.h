// Context parallelism inside the model: ring attention (Liu et al. 2023) with the causal load
// balancing of Megatron-LM and TorchTitan. The ranks of a context-parallel group of size cp
// each hold 2 of the 2·cp equal chunks of every sequence, rank r chunks r and 2·cp-1-r, so that
// under the causal mask every rank has the same work. Every layer but attention works on its
// own rows; RoPE rotates each row by its global position. Attention needs the keys and values
// of every earlier position: they travel around the ring, each rank computing its queries
// against the block it holds while the next one arrives, the blocks' results merged with their
// log-sum-exps. In backward the keys and values go around again, with the gradients of the
// block's keys and values accumulating as they travel and arriving, after the last step, at
// the rank that owns them. nn does its communication through ContextParallelGroup, which
// weft::parallel implements over a process group (nn does not depend on dist). Costs:
// docs/PARALLELISM.md.
#pragma once

#include <cstdint>
#include <memory>

namespace weft::nn {

class ContextParallelGroup {
 public:
  virtual ~ContextParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  class Pending {
   public:
    virtual ~Pending() = default;
    virtual void wait() = 0;
  };
  // Sends send[n] to the next rank (rank + 1 mod size) and receives recv[n] from the previous
  // one; the buffers stay untouched (send) and unread (recv) until wait() returns. Shifts with
  // different tags may be in flight at once.
  virtual std::unique_ptr<Pending> ring_shift_async(const float* send, float* recv, std::int64_t n,
                                                    int tag) = 0;
  // out[size() * n]: rank r's in[n] at out[r * n].
  virtual void all_gather(const float* in, float* out, std::int64_t n) = 0;
  // out[n] = the sum over ranks of their in[rank() * n, + n).
  virtual void reduce_scatter(const float* in, float* out, std::int64_t n) = 0;
  // out[size() * n]: rank r's in[rank() * n, + n) at out[r * n].
  virtual void all_to_all(const float* in, float* out, std::int64_t n) = 0;
};

// How attention gets the other ranks' keys and values (TorchTitan's
// context_parallel_rotate_method): around the ring, one block per step while the previous one
// is computed on ("alltoall" in TorchTitan, whose ring steps are all-to-alls), or all at once
// before attention by an all-gather, their gradients summed back by a reduce-scatter
// ("allgather": fewer, larger transfers, not overlapped, and every rank holds the whole
// sequence's keys and values). Both compute the same blocks in the same order.
enum class KeyValueExchange { kRing, kAllGather };

struct ContextParallel {
  std::shared_ptr<ContextParallelGroup> group;  // null: no context parallelism
  KeyValueExchange exchange = KeyValueExchange::kRing;

  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
  bool enabled() const { return size() > 1; }
  // The global index (of 2·size() chunks per sequence) of rank `owner`'s local chunk 0 or 1.
  // A rank's rows are its local chunk 0 of every sequence, then its local chunk 1 of every
  // sequence (parallel::context_parallel_rows).
  int chunk_of(int owner, int local) const { return local == 0 ? owner : 2 * size() - 1 - owner; }
  int chunk(int local) const { return chunk_of(rank(), local); }
  // all[size() * n]: every rank's own[n], of float32 or of bfloat16 (sent as their bytes in
  // float-sized words: n even). Collectives copy these blocks, never add them.
  template <class T>
  void all_gather(const T* own, T* all, std::int64_t n) const {
    static_assert(sizeof(float) % sizeof(T) == 0);
    group->all_gather(
        reinterpret_cast<const float*>(own), reinterpret_cast<float*>(all),
        n * static_cast<std::int64_t>(sizeof(T)) / static_cast<std::int64_t>(sizeof(float)));
  }
};

}  // namespace weft::nn
