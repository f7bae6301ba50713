// Mailbox: the messages delivered to one rank and not yet received, matched by (source,
// tag) in arrival order. Shared by the transports: the thread backend keeps one per rank,
// the tcp backend one per process, fed by its connection readers. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/dist/transport/transport.h"

namespace weft::dist {

class Mailbox {
 public:
  static constexpr std::size_t kSpares = 2;
  static constexpr std::size_t kSpareMinBytes = std::size_t{256} << 10;

  // `recycles`: received messages' buffers are kept (the kSpares largest, from kSpareMinBytes
  // up) for deliver_copy to write into, so that a transport that copies every message (the
  // thread backend) allocates nothing per large message. glibc maps a buffer from 32 MiB up
  // afresh every time, paid in page faults: a 64 MiB broadcast on the thread backend took
  // 241 ms that way on 2 ranks of a Zen 5, 12 ms with the spares (docs/PERFORMANCE.md). Off
  // for transports whose messages arrive in buffers of their own.
  explicit Mailbox(bool recycles = false) : recycles_(recycles) {}

  void deliver(int from, Tag tag, std::vector<std::byte> message);
  // Delivers a copy of `bytes` (into a kept buffer large enough, if any).
  void deliver_copy(int from, Tag tag, std::span<const std::byte> bytes);
  // The capacity of the buffers kept for deliver_copy.
  std::size_t spare_bytes();
  // As Transport::recv / recv_any (PeerTimeout, PeerError).
  void recv(int from, Tag tag, std::span<std::byte> out, const Deadline& deadline);
  int recv_any(Tag tag, std::span<std::byte> out, const Deadline& deadline);
  // Without waiting: true (or the sender) when a message was there and is now in `out`;
  // PeerError as recv when none is and none will come.
  bool try_recv(int from, Tag tag, std::span<std::byte> out);
  std::optional<int> try_recv_any(Tag tag, std::span<std::byte> out);
  // Later receives from `from` that find no message fail with PeerError(reason); messages
  // it sent before failing can still be received.
  void fail_peer(int from, const std::string& reason);
  // Whether a message from `from` under `tag` is waiting.
  bool has(int from, Tag tag);
  // PeerError if the mailbox was aborted, or if `from` failed and `have_message` is false:
  // what a receive that finds a message (or none) throws.
  void throw_if_failed(int from, bool have_message);
  // Every pending and later receive fails with PeerError(reason). The first reason stays.
  void abort(const std::string& reason);
  // Why the mailbox was aborted; empty if it was not.
  std::string abort_reason();

 private:
  using Queue = std::deque<std::vector<std::byte>>;
  using Messages = std::map<std::pair<int, Tag>, Queue>;
  void take(Queue& queue, int from, std::span<std::byte> out);       // requires mu_
  void keep_spare(std::vector<std::byte> buffer);                    // requires mu_
  Messages::iterator find_any(Tag tag);                              // requires mu_
  int take_any(Messages::iterator found, std::span<std::byte> out);  // requires mu_
  void throw_if_failed_locked(int from) const;                       // requires mu_

  std::mutex mu_;
  std::condition_variable cv_;
  Messages messages_;                        // guarded by mu_
  std::map<int, std::string> failed_peers_;  // guarded by mu_
  std::string abort_reason_;                 // guarded by mu_; non-empty once aborted
  int next_any_ = 0;  // recv_any looks from this rank on first; guarded by mu_
  const bool recycles_;
  std::vector<std::vector<std::byte>> spares_;  // guarded by mu_
};

}  // namespace weft::dist
