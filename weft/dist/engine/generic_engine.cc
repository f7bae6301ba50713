#include "weft/dist/engine/generic_engine.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "weft/base/check.h"
#include "weft/dist/algorithms/collectives.h"
#include "weft/dist/errors.h"

namespace weft::dist {
namespace {

// The table. Only all-reduce has a choice: below the tuning's ring_all_reduce_min, recursive
// doubling (log n exchanges of m bytes, latency-bound sizes); above, the ring (2 (n - 1) messages
// of m / n bytes, whose bandwidth term does not grow with n); docs/COLLECTIVES.md has the costs,
// docs/PERFORMANCE_LOG.md ("Recursive doubling against the ring") the measured crossover.
// Every other operation has one algorithm: binomial trees for broadcast and reduce, rings for
// all-gather and reduce-scatter, direct sends for gather and scatter, pairwise exchange for
// all-to-all, dissemination for the barrier.
// WEFT_ALL_REDUCE_ALGORITHM=doubling|tree|ring overrides the choice (tree: reduce, then
// broadcast; for measuring the crossover; it must be the same on every rank).
enum class AllReduce { kRecursiveDoubling, kReduceBroadcast, kRing };

std::optional<AllReduce> forced_all_reduce() {
  static const std::optional<AllReduce> forced = []() -> std::optional<AllReduce> {
    const char* v = std::getenv("WEFT_ALL_REDUCE_ALGORITHM");
    if (v == nullptr || std::string_view(v).empty() || std::string_view(v) == "auto") return {};
    if (std::string_view(v) == "doubling") return AllReduce::kRecursiveDoubling;
    if (std::string_view(v) == "tree") return AllReduce::kReduceBroadcast;
    if (std::string_view(v) == "ring") return AllReduce::kRing;
    throw InvalidArgument("WEFT_ALL_REDUCE_ALGORITHM='" + std::string(v) +
                          "': use auto, doubling, tree or ring");
  }();
  return forced;
}

AllReduce all_reduce_algorithm(const Buffer& buf, int ranks, std::size_t ring_min) {
  const std::optional<AllReduce> forced = forced_all_reduce();
  if (buf.count < static_cast<std::size_t>(ranks)) {
    return forced == AllReduce::kReduceBroadcast ? *forced : AllReduce::kRecursiveDoubling;
  }
  if (forced) return *forced;
  return buf.size_bytes() >= ring_min ? AllReduce::kRing : AllReduce::kRecursiveDoubling;
}

}  // namespace

GenericEngine::GenericEngine(std::shared_ptr<Transport> transport, std::vector<int> members,
                             std::shared_ptr<ArrivalBoard> board)
    : transport_(std::move(transport)), members_(std::move(members)), board_(std::move(board)) {
  const auto me = std::find(members_.begin(), members_.end(), transport_->rank());
  WEFT_CHECK(me != members_.end());
  rank_ = static_cast<int>(me - members_.begin());
}

Comm GenericEngine::comm(const OpContext& op) const {
  return Comm{*transport_, members_, rank_, op.tag, op.deadline};
}

void GenericEngine::broadcast(Buffer buf, int root, const OpContext& op) {
  algorithms::broadcast(comm(op), buf, root);
}

void GenericEngine::all_reduce(Buffer buf, ReduceOp reduce, const OpContext& op) {
  if (size() == 1) return;
  switch (all_reduce_algorithm(buf, size(), ring_min_)) {
    case AllReduce::kRecursiveDoubling:
      return algorithms::all_reduce_recursive_doubling(comm(op), buf, reduce);
    case AllReduce::kReduceBroadcast:
      return algorithms::all_reduce_reduce_broadcast(comm(op), buf, reduce);
    case AllReduce::kRing:
      return algorithms::all_reduce_ring(comm(op), buf, reduce);
  }
}

void GenericEngine::reduce(Buffer buf, int root, ReduceOp reduce, const OpContext& op) {
  algorithms::reduce(comm(op), buf, root, reduce);
}

void GenericEngine::all_gather(Buffer out, Buffer in, const OpContext& op) {
  all_gather_v(out, in, std::vector<std::size_t>(members_.size(), in.count), op);
}

void GenericEngine::all_gather_v(Buffer out, Buffer in, const std::vector<std::size_t>& counts,
                                 const OpContext& op) {
  algorithms::all_gather_v(comm(op), out, in, counts);
}

void GenericEngine::gather(Buffer out, Buffer in, int root, const OpContext& op) {
  algorithms::gather(comm(op), out, in, root);
}

void GenericEngine::scatter(Buffer out, Buffer in, int root, const OpContext& op) {
  algorithms::scatter(comm(op), out, in, root);
}

void GenericEngine::reduce_scatter(Buffer out, Buffer in, ReduceOp reduce, const OpContext& op) {
  algorithms::reduce_scatter(comm(op), out, in, reduce);
}

void GenericEngine::all_to_all(Buffer out, Buffer in, const OpContext& op) {
  const std::vector<std::size_t> counts(members_.size(), in.count / members_.size());
  algorithms::all_to_all_v(comm(op), out, counts, in, counts);
}

void GenericEngine::all_to_all_v(Buffer out, const std::vector<std::size_t>& out_counts, Buffer in,
                                 const std::vector<std::size_t>& in_counts, const OpContext& op) {
  algorithms::all_to_all_v(comm(op), out, out_counts, in, in_counts);
}

void GenericEngine::barrier(const OpContext& op) { algorithms::barrier(comm(op)); }

void GenericEngine::note_arrival(Tag tag) {
  if (board_) board_->note_arrival(tag, transport_->rank(), size());
}

std::optional<std::vector<int>> GenericEngine::not_arrived(Tag tag) {
  if (!board_) return std::nullopt;
  std::vector<int> missing;
  for (int global : board_->not_arrived(tag, members_)) {
    const auto at = std::find(members_.begin(), members_.end(), global);
    missing.push_back(static_cast<int>(at - members_.begin()));
  }
  return missing;
}

}  // namespace weft::dist
