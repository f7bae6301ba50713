// The job's rendezvous store as the launcher sees it: a server that node 0 starts before
// its workers and keeps running until the launcher returns. The implementation (the
// TCPStore server) is injected by weftrun, so that this layer does not depend on it.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace weft::launch {

// A running rendezvous server. Destroying it stops the server.
class RendezvousHost {
 public:
  virtual ~RendezvousHost() = default;
  // The TCP port it listens on: the real one when it was started on port 0.
  virtual int port() const = 0;
};

// Starts a rendezvous server listening on bind_host:port (port 0: any free port) for a job
// whose clients present `token`. Returns it listening (never null); throws weft::Error
// (weft::SystemError when the address cannot be bound) when it cannot start.
using RendezvousFactory = std::function<std::unique_ptr<RendezvousHost>(
    const std::string& bind_host, int port, const std::string& token)>;

}  // namespace weft::launch
