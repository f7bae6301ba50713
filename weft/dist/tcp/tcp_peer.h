// TcpTransport's private state: what each connection and each waiting receive holds. Only
// the tcp transport's sources include this.
#pragma once

#include <atomic>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "weft/dist/tcp/tcp_transport.h"

namespace weft::dist {

// A receive waiting for its message: the polling thread lands the message in `out`.
struct TcpTransport::Posted {
  int from;
  Tag tag;
  std::span<std::byte> out;
  bool matched = false;  // a message is landing in `out`
  bool done = false;     // it has landed
  std::string error;     // non-empty: the receive fails with PeerError(error)
};

// A message that arrived (or is arriving) before its receive was posted: `size` bytes, in
// `data` once complete.
struct TcpTransport::Incoming {
  std::vector<std::byte> data;
  std::size_t size = 0;
  bool complete = false;
};

// A message part-way through arriving on a connection: where its segments go.
struct TcpTransport::Landing {
  std::uint64_t total = 0;
  std::uint64_t received = 0;
  Posted* posted = nullptr;      // the receive it lands in, or
  Incoming* incoming = nullptr;  // the queued message it fills (grown segment by segment,
                                 // so a header alone never makes this rank allocate), or
                                 // neither: its receive gave up, and the bytes are dropped
};

struct TcpTransport::Peer {
  explicit Peer(net::Socket s) : socket(std::move(s)) {}

  net::Socket socket;

  // Guarded by mu_. The receive side is touched only by the thread running the connections.
  bool live = true;     // false once failed: the socket is shut down
  std::string failure;  // why, for every later call
  tcp::FrameHeader header;
  std::size_t header_got = 0;
  bool in_payload = false;
  std::span<std::byte> payload;  // where the current segment's payload goes
  std::size_t payload_got = 0;
  std::vector<std::byte> scratch;   // dropped segments and abort reasons land here
  std::map<Tag, Landing> landings;  // messages part-way through arriving, by tag
  Clock::time_point last_heard = Clock::now();
  std::uint64_t writable_seen = 0;  // how many times poll() found room to send
  int want_write = 0;               // senders waiting for room

  // The send side: one sender at a time writes a whole segment (`sending`, guarded by mu_;
  // not a mutex of its own, so that the heartbeat writer, which holds mu_, can see it).
  bool sending = false;
  std::atomic<Clock::rep> last_sent{Clock::now().time_since_epoch().count()};
};

}  // namespace weft::dist
