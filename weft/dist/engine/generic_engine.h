// The generic engine: every collective as an algorithm of weft/dist/algorithms over the
// backend's Transport (send, recv), so it runs on any transport. The thread and tcp backends
// use it for every group, shm for the groups its step engine has no region for. Where an
// operation has several algorithms, the table in generic_engine.cc picks one by message size
// and group size (docs/COLLECTIVES.md has each one's cost, docs/PERFORMANCE_LOG.md, "Recursive
// doubling against the ring", the measured crossover).
#pragma once

#include <memory>
#include <vector>

#include "weft/dist/algorithms/comm.h"
#include "weft/dist/engine/collective_engine.h"
#include "weft/dist/transport/transport.h"

namespace weft::dist {

// Where ranks note which collectives they have entered, so that a timeout can name the
// ranks that never came (the thread backend's hub keeps one; other transports cannot).
class ArrivalBoard {
 public:
  virtual ~ArrivalBoard() = default;
  // `rank` (global) entered the collective tagged `tag` of a group of `group_size` ranks.
  virtual void note_arrival(Tag tag, int rank, int group_size) = 0;
  // Which of `ranks` (global) have not entered it.
  virtual std::vector<int> not_arrived(Tag tag, const std::vector<int>& ranks) = 0;
};

class GenericEngine final : public CollectiveEngine {
 public:
  // members: the group's global ranks in group order, transport->rank() among them.
  GenericEngine(std::shared_ptr<Transport> transport, std::vector<int> members,
                std::shared_ptr<ArrivalBoard> board = nullptr);

  std::string_view name() const override { return "generic"; }
  void broadcast(Buffer buf, int root, const OpContext& op) override;
  void all_reduce(Buffer buf, ReduceOp reduce, const OpContext& op) override;
  void reduce(Buffer buf, int root, ReduceOp reduce, const OpContext& op) override;
  void all_gather(Buffer out, Buffer in, const OpContext& op) override;
  void all_gather_v(Buffer out, Buffer in, const std::vector<std::size_t>& counts,
                    const OpContext& op) override;
  void gather(Buffer out, Buffer in, int root, const OpContext& op) override;
  void scatter(Buffer out, Buffer in, int root, const OpContext& op) override;
  void reduce_scatter(Buffer out, Buffer in, ReduceOp reduce, const OpContext& op) override;
  void all_to_all(Buffer out, Buffer in, const OpContext& op) override;
  void all_to_all_v(Buffer out, const std::vector<std::size_t>& out_counts, Buffer in,
                    const std::vector<std::size_t>& in_counts, const OpContext& op) override;
  void barrier(const OpContext& op) override;
  void note_arrival(Tag tag) override;
  std::optional<std::vector<int>> not_arrived(Tag tag) override;
  void tune(const CollectiveTuning& tuning) override { ring_min_ = tuning.ring_all_reduce_min; }
  bool reads(std::size_t CollectiveTuning::*member) const override {
    return member == &CollectiveTuning::ring_all_reduce_min;
  }

 private:
  Comm comm(const OpContext& op) const;
  int size() const { return static_cast<int>(members_.size()); }

  std::shared_ptr<Transport> transport_;
  std::vector<int> members_;
  int rank_;
  std::shared_ptr<ArrivalBoard> board_;
  std::size_t ring_min_ = CollectiveTuning{}.ring_all_reduce_min;
};

}  // namespace weft::dist
