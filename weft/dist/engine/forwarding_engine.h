// ForwardingEngine: an engine that hands every operation to another (leveldb's EnvWrapper).
// An engine with fast paths for some operations derives from it, passing the engine that runs
// the rest (the generic engine over the same group, say), and overrides only its fast paths.
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/dist/engine/collective_engine.h"

namespace weft::dist {

class ForwardingEngine : public CollectiveEngine {
 public:
  explicit ForwardingEngine(std::unique_ptr<CollectiveEngine> base) : base_(std::move(base)) {}

  std::string_view name() const override { return base_->name(); }
  // False, whatever the base says: the subclass's own reducing operations then get widened
  // buffers too (ProcessGroup widens them around every call). Override to say otherwise.
  bool reduces_16bit_floats() const override { return false; }
  void broadcast(Buffer buf, int root, const OpContext& op) override {
    base_->broadcast(buf, root, op);
  }
  void all_reduce(Buffer buf, ReduceOp reduce, const OpContext& op) override {
    base_->all_reduce(buf, reduce, op);
  }
  void reduce(Buffer buf, int root, ReduceOp reduce, const OpContext& op) override {
    base_->reduce(buf, root, reduce, op);
  }
  void all_gather(Buffer out, Buffer in, const OpContext& op) override {
    base_->all_gather(out, in, op);
  }
  void all_gather_list(const std::vector<Buffer>& outs, Buffer in, const OpContext& op) override {
    base_->all_gather_list(outs, in, op);
  }
  void all_gather_v(Buffer out, Buffer in, const std::vector<std::size_t>& counts,
                    const OpContext& op) override {
    base_->all_gather_v(out, in, counts, op);
  }
  void gather(Buffer out, Buffer in, int root, const OpContext& op) override {
    base_->gather(out, in, root, op);
  }
  void scatter(Buffer out, Buffer in, int root, const OpContext& op) override {
    base_->scatter(out, in, root, op);
  }
  void reduce_scatter(Buffer out, Buffer in, ReduceOp reduce, const OpContext& op) override {
    base_->reduce_scatter(out, in, reduce, op);
  }
  void all_to_all(Buffer out, Buffer in, const OpContext& op) override {
    base_->all_to_all(out, in, op);
  }
  void all_to_all_v(Buffer out, const std::vector<std::size_t>& out_counts, Buffer in,
                    const std::vector<std::size_t>& in_counts, const OpContext& op) override {
    base_->all_to_all_v(out, out_counts, in, in_counts, op);
  }
  void barrier(const OpContext& op) override { base_->barrier(op); }
  void note_arrival(Tag tag) override { base_->note_arrival(tag); }
  std::optional<std::vector<int>> not_arrived(Tag tag) override { return base_->not_arrived(tag); }
  void tune(const CollectiveTuning& tuning) override { base_->tune(tuning); }
  bool reads(std::size_t CollectiveTuning::*member) const override { return base_->reads(member); }

 protected:
  CollectiveEngine& base() const { return *base_; }

 private:
  std::unique_ptr<CollectiveEngine> base_;
};

}  // namespace weft::dist
