// The thread backend's transport: ranks are threads of one process and a message is a copy
// into the receiver's Mailbox. ThreadHub owns the mailboxes of all ranks and the arrival
// board; each rank uses the ThreadTransport endpoint for its own rank.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "weft/dist/engine/generic_engine.h"
#include "weft/dist/transport/mailbox.h"
#include "weft/dist/transport/transport.h"

namespace weft::dist {

class ThreadHub final : public ArrivalBoard {
 public:
  explicit ThreadHub(int world_size);
  int size() const { return static_cast<int>(boxes_.size()); }
  Mailbox& mailbox(int rank) { return *boxes_.at(static_cast<std::size_t>(rank)); }

  // Every rank's receives fail with PeerError(reason) from now on.
  void abort(const std::string& reason);
  void note_arrival(Tag op, int rank, int group_size) override;
  std::vector<int> not_arrived(Tag op, const std::vector<int>& ranks) override;

 private:
  std::vector<std::unique_ptr<Mailbox>> boxes_;
  std::mutex arrivals_mu_;
  std::map<Tag, std::vector<int>> arrivals_;  // ranks inside each unfinished collective
};

class ThreadTransport final : public Transport {
 public:
  ThreadTransport(std::shared_ptr<ThreadHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }
  void send(int peer, Tag tag, std::span<const std::byte> bytes, const Deadline&) override {
    hub_->mailbox(peer).deliver_copy(rank_, tag, bytes);
  }
  bool sends_at_once(int, std::size_t) const override { return true; }
  void recv(int peer, Tag tag, std::span<std::byte> out, const Deadline& deadline) override {
    hub_->mailbox(rank_).recv(peer, tag, out, deadline);
  }
  int recv_any(Tag tag, std::span<std::byte> out, const Deadline& deadline) override {
    return hub_->mailbox(rank_).recv_any(tag, out, deadline);
  }
  void abort(const std::string& reason) override { hub_->abort(reason); }

 private:
  std::shared_ptr<ThreadHub> hub_;
  int rank_;
};

}  // namespace weft::dist
