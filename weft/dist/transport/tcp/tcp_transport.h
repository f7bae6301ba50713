// The tcp backend's transport: ranks are processes, on one host or several, connected
// pairwise over TCP. Each rank listens on an ephemeral port, publishes "host:port" in the
// job's store, and connects to every lower rank (higher ranks connect to it), presenting the
// job token; a connection with a wrong token or a bad hello is refused.
//
// One reader thread per connection moves incoming messages into the rank's Mailbox, so
// sends never wait for the receiver to post a receive (the eager contract of Transport).
// A connection that closes (the peer exited or crashed) fails receives from that peer with
// PeerError naming it. Frame format: docs/COLLECTIVES.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "weft/dist/transport/mailbox.h"
#include "weft/dist/transport/transport.h"
#include "weft/net/socket.h"
#include "weft/store/store.h"

namespace weft::dist {

struct TcpTransportOptions {
  std::string listen_host = "127.0.0.1";  // where peers may connect; loopback by default
  std::string advertise_host;             // the address peers dial; empty: listen_host
  std::string token;                      // the job token every connection must present
  Seconds connect_timeout{300};           // for building the whole mesh
};

class TcpTransport final : public Transport {
 public:
  // The largest message one frame carries (its length field is checked against it).
  static constexpr std::uint64_t kMaxMessage = std::uint64_t{4} << 30;  // 4 GiB

  // Connects this rank with every other; blocks until the mesh is complete or
  // connect_timeout passes (weft::TimeoutError naming the higher ranks not connected, or
  // the lower rank it could not reach).
  // Keeps `store` alive as long as the transport: when rank 0 hosts it, other ranks may
  // still be reading addresses from it after rank 0's own mesh is complete.
  TcpTransport(int rank, int world_size, std::shared_ptr<store::Store> store,
               TcpTransportOptions options);
  // Closes every connection and joins the readers.
  ~TcpTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return world_size_; }
  void send(int peer, Tag tag, std::span<const std::byte> bytes, Deadline deadline) override;
  void recv(int peer, Tag tag, std::span<std::byte> out, Deadline deadline) override;
  int recv_any(Tag tag, std::span<std::byte> out, Deadline deadline) override;
  void abort(const std::string& reason) override;

 private:
  struct Peer {
    net::Socket socket;
    std::timed_mutex send_mu;
    std::thread reader;
    // A send that failed part-way leaves the stream out of step: nothing more may be sent.
    std::atomic<bool> poisoned{false};
  };

  void connect_mesh(Deadline deadline);
  void accept_higher(net::Listener& listener, Deadline deadline);
  bool accept_one(net::Listener& listener, Deadline deadline);
  void connect_lower(Deadline deadline);
  void read_loop(int peer);
  static void poison(Peer& p);
  void send_frame(int peer, std::uint32_t kind, Tag tag, std::span<const std::byte> bytes,
                  Deadline deadline);

  int rank_;
  int world_size_;
  TcpTransportOptions options_;
  std::shared_ptr<store::Store> store_;
  Mailbox mailbox_;
  std::vector<std::unique_ptr<Peer>> peers_;  // index: rank; null for this rank
  std::atomic<bool> closing_{false};
};

}  // namespace weft::dist
