// The tcp backend's transport: ranks are processes, on one host or several, connected
// pairwise over TCP. Each rank listens on an ephemeral port, publishes "host:port" in the
// job's store, and connects to every lower rank (higher ranks connect to it); both ends of
// every connection prove they hold the job token (weft/net/auth.h) before it is used.
//
// Sockets are non-blocking. There is no reader thread per connection: the thread that waits
// (for a message, or for room to send) runs the connections itself, one poll() over all of
// them, landing each incoming segment straight in the buffer of the receive it matches (a
// copy only for messages that arrive before their receive). One thread at a time does that;
// others wait for it. A background thread does it while no call is waiting, so peers' sends
// still drain and heartbeats still go out. Messages travel in segments of at most 512 KiB,
// so threads sending to the same peer take turns.
//
// Failures: a connection that closes (the peer exited or was killed) fails receives from
// that peer with PeerError naming it; so does a malformed frame (that connection is closed).
// Idle connections carry a heartbeat every 0.5 s; an operation whose deadline passes while
// its peer has sent nothing for 2 s fails with PeerError (its host or the link to it is
// down) rather than PeerTimeout. Frame format: docs/COLLECTIVES.md.
#pragma once

#include <poll.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "weft/base/unique_fd.h"
#include "weft/dist/tcp/tcp_frame.h"
#include "weft/dist/transport/transport.h"
#include "weft/net/socket.h"
#include "weft/store/store.h"

namespace weft::dist {

struct TcpTransportOptions {
  std::string listen_host = "127.0.0.1";  // where peers may connect; loopback by default
  std::string advertise_host;             // the address peers dial; empty: listen_host
  std::string token;                      // the job token both ends of a connection prove
  Seconds connect_timeout{300};           // for building the whole mesh
};

class TcpTransport final : public Transport {
 public:
  static constexpr std::uint64_t kMaxMessage = tcp::kMaxMessage;

  // Connects this rank with every other; blocks until the mesh is complete or
  // connect_timeout passes (weft::TimeoutError naming the higher ranks not connected, or
  // the lower rank it could not reach); PeerError when a peer does not hold the token.
  // Keeps `store` alive as long as the transport: when rank 0 hosts it, other ranks may
  // still be reading addresses from it after rank 0's own mesh is complete.
  TcpTransport(int rank, int world_size, std::shared_ptr<store::Store> store,
               TcpTransportOptions options);
  // Over connections already made and checked: `peers[p]` for every rank p but this one
  // (whose entry is an invalid Socket). For tests and the fuzz targets.
  TcpTransport(int rank, std::vector<net::Socket> peers);
  // Stops the background thread and closes every connection.
  ~TcpTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(peers_.size()); }
  void send(int peer, Tag tag, std::span<const std::byte> bytes, const Deadline& deadline) override;
  void recv(int peer, Tag tag, std::span<std::byte> out, const Deadline& deadline) override;
  int recv_any(Tag tag, std::span<std::byte> out, const Deadline& deadline) override;
  void send_recv(int to, Tag send_tag, std::span<const std::byte> bytes, int from, Tag recv_tag,
                 std::span<std::byte> out, const Deadline& deadline) override;
  void abort(const std::string& reason) override;
  bool ranks_share_cpus() const override { return ranks_share_cpus_; }

 private:
  struct Posted;
  struct Incoming;
  struct Landing;
  struct Peer;
  using Key = std::pair<int, Tag>;

  void connect_mesh(const std::shared_ptr<store::Store>& store, const TcpTransportOptions& o);
  void start();

  // Sending (tcp_send.cc).
  // `aborting`: an abort frame, which goes out even though this transport is aborted.
  void send_segment(int peer, const tcp::FrameHeader& header, std::span<const std::byte> payload,
                    Deadline deadline, bool aborting = false);
  void wait_writable(int peer, Deadline deadline, bool aborting);
  void send_heartbeats();  // requires mu_

  // Running the connections (tcp_progress.cc); all require mu_.
  // Runs the connections (or waits while another thread does) until done() or the
  // deadline (false). Requires mu_, held in `lock`.
  bool drive(std::unique_lock<std::mutex>& lock, const Deadline& deadline,
             const std::function<bool()>& done);
  void poll_once(std::unique_lock<std::mutex>& lock, const Deadline& deadline);
  int wait_ready(const Deadline& deadline);  // poll() on pollfds_, spinning first
  void read_available(int peer);
  void advance(int peer, std::size_t n);
  void header_done(int peer);
  void segment_done(int peer);
  void start_message(int peer, const tcp::FrameHeader& header);
  Posted* match_posted(int from, Tag tag);
  void land(Tag tag, std::span<const std::byte> bytes);  // a message to this rank itself
  void fail_peer(int peer, const std::string& reason);
  void abort_locally(const std::string& reason);
  void background_loop();
  void wake_poller();

  // Receiving (tcp_transport.cc).
  void receive(int from, Tag tag, std::span<std::byte> out, const Deadline& deadline,
               const std::function<void()>* send_first);
  void take(std::deque<Incoming>& queue, int from, std::span<std::byte> out);
  std::vector<std::byte> spare_buffer();  // requires mu_
  void detach(Posted& posted);
  // Whether `peer` has sent nothing, not even heartbeats, for long enough to be lost.
  bool silent(int peer) const;  // requires mu_
  // PeerError when `peer` is silent, else PeerTimeout. Requires mu_.
  [[noreturn]] void throw_timeout(int peer, const char* what);

  int rank_;
  std::vector<std::unique_ptr<Peer>> peers_;  // index: rank; null for this rank
  UniqueFd wake_fd_;                          // an eventfd: wakes the thread in poll()
  Clock::duration spin_{};                    // how long a waiting call polls before sleeping
  bool ranks_share_cpus_ = false;             // a job on one host, more ranks than CPUs

  std::vector<pollfd> pollfds_;             // the polling thread's set, reused
  std::vector<pollfd> pollfds_background_;  // the background thread's watch set

  std::mutex mu_;                 // guards everything below, and each Peer's receive state
  std::condition_variable cv_;    // a waiting call: its receive landed, or poll() is free
  std::condition_variable idle_;  // the background thread: no call is waiting any more
  std::map<Key, std::deque<Incoming>> incoming_;  // messages that came before their receive
  std::vector<Posted*> posted_;                   // receives waiting for their message
  std::vector<std::vector<std::byte>> spare_;     // buffers of taken messages, for reuse
  std::string abort_reason_;                      // non-empty once aborted
  bool polling_ = false;                          // a thread is running the connections
  int active_ = 0;                                // calls waiting in drive()
  Clock::time_point last_call_;                   // when the last of them returned
  int waiters_ = 0;                               // of them, those sleeping on cv_
  int next_any_ = 0;                              // recv_any looks from this rank on first
  bool closing_ = false;
  std::thread background_;
};

}  // namespace weft::dist
