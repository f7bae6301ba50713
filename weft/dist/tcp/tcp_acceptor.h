// The listening side of the tcp mesh's handshakes. Each accepted connection's hello and token
// proof (accept_peer) runs on a thread of its own, so a connection that says nothing, or says
// the wrong thing slowly, never holds up a rank of the job: that rank's handshake takes
// milliseconds whatever else is pending. At most kMaxPending handshakes run at once, and at
// most kMaxPendingPerHost from one address; a connection past either bound takes the place of
// the oldest pending one there, which is closed. A flood keeps a rank out only by opening more
// than the bound within the milliseconds that rank's own handshake takes.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "weft/base/deadline.h"
#include "weft/net/socket.h"

namespace weft::dist::tcp {

class HandshakeAcceptor {
 public:
  static constexpr int kMaxPending = 64;
  static constexpr int kMaxPendingPerHost = 16;

  // Handshakes for `rank` of a job of `world_size` ranks holding `token`.
  HandshakeAcceptor(int rank, int world_size, std::string token);
  // Closes the connections still in their handshake and joins every thread.
  ~HandshakeAcceptor();
  HandshakeAcceptor(const HandshakeAcceptor&) = delete;
  HandshakeAcceptor& operator=(const HandshakeAcceptor&) = delete;

  // Starts the handshake of an accepted connection, to finish within `deadline`.
  void start(net::Socket socket, Deadline deadline);

  // The connections whose handshakes proved a peer of this job since the last call, each with
  // that peer's rank; those that did not are closed.
  std::vector<std::pair<int, net::Socket>> take_peers();

 private:
  struct Handshake {
    net::Socket socket;
    std::string host;
    int peer = -1;         // the dialer's rank once proved
    bool done = false;     // the thread has finished with the socket
    bool evicted = false;  // closed to make room: whatever it proved is dropped
    std::thread thread;
  };

  void make_room(const std::string& host);  // under mu_

  const int rank_;
  const int world_size_;
  const std::string token_;
  std::mutex mu_;
  std::list<std::unique_ptr<Handshake>> handshakes_;  // in the order they started
};

}  // namespace weft::dist::tcp
