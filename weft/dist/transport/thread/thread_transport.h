// The thread backend's transport: ranks are threads of one process and a message is a copy
// into the receiver's mailbox. ThreadHub owns the mailboxes of all ranks; each rank uses the
// ThreadTransport endpoint for its own rank.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "weft/dist/transport/transport.h"

namespace weft::dist {

class ThreadHub {
 public:
  explicit ThreadHub(int world_size);
  int size() const { return static_cast<int>(boxes_.size()); }

  void send(int from, int to, Tag tag, std::span<const std::byte> bytes);
  void recv(int to, int from, Tag tag, std::span<std::byte> out, Deadline deadline);
  int recv_any(int to, Tag tag, std::span<std::byte> out, Deadline deadline);
  void abort(const std::string& reason);
  void note_arrival(Tag op, int rank, int group_size);
  std::vector<int> not_arrived(Tag op, const std::vector<int>& ranks);

 private:
  struct Mailbox {
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::pair<int, Tag>, std::deque<std::vector<std::byte>>> messages;  // (from, tag)
  };
  void check_aborted() const;  // requires the mailbox lock
  static void take(std::deque<std::vector<std::byte>>& queue, int from, std::span<std::byte> out);

  std::vector<std::unique_ptr<Mailbox>> boxes_;
  std::mutex arrivals_mu_;
  std::map<Tag, std::vector<int>> arrivals_;  // ranks inside each unfinished collective
  mutable std::mutex abort_mu_;
  std::string abort_reason_;  // non-empty once aborted; guarded by abort_mu_
  std::atomic<bool> aborted_{false};
};

class ThreadTransport final : public Transport {
 public:
  ThreadTransport(std::shared_ptr<ThreadHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }
  void send(int peer, Tag tag, std::span<const std::byte> bytes, Deadline) override {
    hub_->send(rank_, peer, tag, bytes);
  }
  void recv(int peer, Tag tag, std::span<std::byte> out, Deadline deadline) override {
    hub_->recv(rank_, peer, tag, out, deadline);
  }
  int recv_any(Tag tag, std::span<std::byte> out, Deadline deadline) override {
    return hub_->recv_any(rank_, tag, out, deadline);
  }
  void abort(const std::string& reason) override { hub_->abort(reason); }
  void note_arrival(Tag op, int group_size) override { hub_->note_arrival(op, rank_, group_size); }
  std::optional<std::vector<int>> not_arrived(Tag op, const std::vector<int>& ranks) override {
    return hub_->not_arrived(op, ranks);
  }

 private:
  std::shared_ptr<ThreadHub> hub_;
  int rank_;
};

}  // namespace weft::dist
