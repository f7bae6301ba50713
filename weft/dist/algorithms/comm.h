// Comm: what a collective algorithm sees of its group for one operation: the members'
// global ranks, this rank's place among them, the transport, the operation's tag and its
// deadline. Algorithms number their messages with `step` so that each (peer, step) pair is
// a distinct tag within the operation.
#pragma once

#include <cstddef>
#include <vector>

#include "weft/base/deadline.h"
#include "weft/dist/transport/transport.h"

namespace weft::dist {

// The steps one operation may number, 0 to kMaxSteps - 1: the low bits of its tag.
inline constexpr int kMaxSteps = 1 << 12;

struct Comm {
  Transport& transport;
  const std::vector<int>& members;  // global rank of each group rank
  int rank;                         // this rank, in the group
  Tag tag;                          // the operation's tag; steps are added to it
  const Deadline& deadline;         // the operation's; started by its first wait

  int size() const { return static_cast<int>(members.size()); }
  void send(int peer, int step, const void* data, std::size_t bytes) const {
    transport.send(members[static_cast<std::size_t>(peer)], tag + static_cast<Tag>(step),
                   {static_cast<const std::byte*>(data), bytes}, deadline);
  }
  void recv(int peer, int step, void* data, std::size_t bytes) const {
    transport.recv(members[static_cast<std::size_t>(peer)], tag + static_cast<Tag>(step),
                   {static_cast<std::byte*>(data), bytes}, deadline);
  }
  // Sends to `to` and receives from `from`, both under `step`: one ring or exchange round.
  void send_recv(int to, const void* out, std::size_t out_bytes, int from, void* in,
                 std::size_t in_bytes, int step) const {
    transport.send_recv(members[static_cast<std::size_t>(to)], tag + static_cast<Tag>(step),
                        {static_cast<const std::byte*>(out), out_bytes},
                        members[static_cast<std::size_t>(from)], tag + static_cast<Tag>(step),
                        {static_cast<std::byte*>(in), in_bytes}, deadline);
  }
};

}  // namespace weft::dist
