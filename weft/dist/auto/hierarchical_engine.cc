#include "weft/dist/auto/hierarchical_engine.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <memory>
#include <utility>
#include <vector>

#include "weft/dist/algorithms/scratch.h"

namespace weft::dist {
namespace {

// Below this a two-level all-reduce sends three rounds of tiny shards: reducing to one
// rank per host and back costs fewer messages.
constexpr std::size_t kShardedAllReduceBytes = 64 << 10;
// From this size the all-reduce runs its levels chunk by chunk, so that the link carries one
// chunk's shards while the host reduce-scatters the next and all-gathers the one before;
// at most kLevelChunks chunks of at least kLevelChunkBytes (each chunk is a few handoffs
// and scheduler rounds; the first and last are the only time the link idles). Measured:
// docs/PERFORMANCE.md.
constexpr std::size_t kOverlappedAllReduceBytes = 4 << 20;
constexpr std::size_t kLevelChunkBytes = 1 << 20;
constexpr std::size_t kLevelChunks = 16;

// The operation's phases get tags of their own within its tag space (below 2^11; each
// sub-engine adds its steps, under 512 for groups under 256 ranks), so that two phases
// between the same two ranks cannot take each other's messages.
OpContext phase(const OpContext& op, int k) {
  return OpContext{op.tag + static_cast<Tag>(k) * 512, op.deadline};
}

}  // namespace

HierarchicalEngine::HierarchicalEngine(HostLayout layout, std::unique_ptr<CollectiveEngine> local,
                                       std::unique_ptr<CollectiveEngine> cross,
                                       std::unique_ptr<CollectiveEngine> flat)
    : ForwardingEngine(std::move(flat)),
      layout_(layout),
      name_("hierarchical(" + std::string(local->name()) + ", " + std::string(cross->name()) + ")"),
      local_(std::move(local)),
      cross_(std::move(cross)) {}

void HierarchicalEngine::all_reduce(Buffer buf, ReduceOp reduce, const OpContext& op) {
  const auto per_host = static_cast<std::size_t>(layout_.per_host);
  if (buf.size_bytes() < kShardedAllReduceBytes || buf.count % per_host != 0) {
    local_->reduce(buf, 0, reduce, phase(op, 0));
    if (layout_.local == 0) cross_->all_reduce(buf, reduce, phase(op, 1));
    local_->broadcast(buf, 0, phase(op, 2));
    return;
  }
  if (buf.size_bytes() >= kOverlappedAllReduceBytes) return all_reduce_overlapped(buf, reduce, op);
  const Buffer shard(
      algorithms::scratch(algorithms::Scratch::kLevelsA, buf.size_bytes() / per_host),
      buf.count / per_host, buf.dtype);
  local_->reduce_scatter(shard, buf, reduce, phase(op, 0));
  cross_->all_reduce(shard, reduce, phase(op, 1));
  local_->all_gather(buf, shard, phase(op, 2));
}

// The three levels of all_reduce on chunks of `buf`, each chunk's cross-host all-reduce on
// the cross thread (in chunk order, as every rank issues them) while this thread runs the
// in-host phases of the others. Chunk k's shard sits at k * chunk / per_host in shards_.
void HierarchicalEngine::all_reduce_overlapped(Buffer buf, ReduceOp reduce, const OpContext& op) {
  // A failed call left its chunks to fail on the cross thread once ProcessGroup aborted the
  // transports; they must be done with shards_ before it is used again.
  for (auto& chunk_done : crossing_) {
    if (chunk_done.valid()) chunk_done.wait();
  }
  crossing_.clear();
  const auto per_host = static_cast<std::size_t>(layout_.per_host);
  const std::size_t es = dtype_size(buf.dtype);
  const std::size_t chunk_bytes = std::max(kLevelChunkBytes, buf.size_bytes() / kLevelChunks);
  const std::size_t chunk = std::max<std::size_t>(chunk_bytes / es / per_host, 1) * per_host;
  if (shards_.size() < buf.size_bytes() / per_host) shards_.resize(buf.size_bytes() / per_host);
  const auto part = [&](std::size_t first) {  // chunk from element `first`: it and its shard
    const std::size_t count = std::min(chunk, buf.count - first);
    return std::pair{Buffer(buf.bytes() + first * es, count, buf.dtype),
                     Buffer(shards_.data() + first / per_host * es, count / per_host, buf.dtype)};
  };
  if (cross_thread_ == nullptr) cross_thread_ = std::make_unique<internal::OpQueue>();
  const OpContext cross_op = phase(op, 1);  // copied here: starts the deadline on this thread
  for (std::size_t first = 0; first < buf.count; first += chunk) {
    const auto [whole, shard] = part(first);
    local_->reduce_scatter(shard, whole, reduce, phase(op, 0));
    auto task = std::make_shared<std::packaged_task<void()>>(
        [this, shard, reduce, cross_op] { cross_->all_reduce(shard, reduce, cross_op); });
    crossing_.push_back(task->get_future());
    cross_thread_->push([task] { (*task)(); });
  }
  for (std::size_t first = 0, k = 0; first < buf.count; first += chunk, ++k) {
    crossing_[k].get();
    const auto [whole, shard] = part(first);
    local_->all_gather(whole, shard, phase(op, 2));
  }
  crossing_.clear();
}

void HierarchicalEngine::broadcast(Buffer buf, int root, const OpContext& op) {
  const int root_host = root / layout_.per_host;
  const int root_local = root % layout_.per_host;
  if (layout_.local == root_local) cross_->broadcast(buf, root_host, phase(op, 0));
  local_->broadcast(buf, root_local, phase(op, 1));
}

void HierarchicalEngine::all_gather(Buffer out, Buffer in, const OpContext& op) {
  const std::size_t block = in.size_bytes();
  gather_blocks(
      in, [&](std::size_t q) { return out.bytes() + q * block; }, op);
}

void HierarchicalEngine::all_gather_list(const std::vector<Buffer>& outs, Buffer in,
                                         const OpContext& op) {
  gather_blocks(
      in, [&](std::size_t q) { return outs[q].bytes(); }, op);
}

// Rank (h, i)'s block goes to the ranks (*, i) across hosts, then every host gathers what
// its ranks got: local index major, which the last step puts in rank order, at block_of(q)
// for rank q's block.
void HierarchicalEngine::gather_blocks(Buffer in, FunctionRef<std::byte*(std::size_t)> block_of,
                                       const OpContext& op) {
  const auto hosts = static_cast<std::size_t>(layout_.hosts);
  const auto per_host = static_cast<std::size_t>(layout_.per_host);
  const std::size_t block = in.size_bytes();
  // `in` may alias this rank's block of `out`, which the copies below overwrite last.
  std::byte* across = algorithms::scratch(algorithms::Scratch::kLevelsA, hosts * block);
  std::byte* gathered =
      algorithms::scratch(algorithms::Scratch::kLevelsB, hosts * per_host * block);
  cross_->all_gather(Buffer(across, hosts * in.count, in.dtype), in, phase(op, 0));
  local_->all_gather(Buffer(gathered, hosts * per_host * in.count, in.dtype),
                     Buffer(across, hosts * in.count, in.dtype), phase(op, 1));
  if (block == 0) return;
  for (std::size_t i = 0; i < per_host; ++i) {
    for (std::size_t h = 0; h < hosts; ++h) {
      std::memcpy(block_of(h * per_host + i), gathered + (i * hosts + h) * block, block);
    }
  }
}

}  // namespace weft::dist
