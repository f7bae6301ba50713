// The job's rendezvous store as the launcher sees it: a server that node 0 starts before
// its workers and keeps running until the launcher returns, and where the launcher records
// the deaths of its workers for the others (weft/store/death_log.h). The implementation (the
// TCPStore) is injected by weftrun, so that this layer does not depend on it.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace weft::launch {

// Records in the job's store that the worker of `job_rank` died during attempt `attempt`
// (WEFT_RESTART_COUNT), before its replacement starts. Throws weft::Error when the store
// cannot be reached within its timeout.
class DeathRecorder {
 public:
  virtual ~DeathRecorder() = default;
  virtual void record_death(int attempt, int job_rank) = 0;
};

// A running rendezvous server. Destroying it stops the server.
class RendezvousHost : public DeathRecorder {
 public:
  // The TCP port it listens on: the real one when it was started on port 0.
  virtual int port() const = 0;
};

// Starts a rendezvous server listening on bind_host:port (port 0: any free port) for a job
// whose clients present `token`. Returns it listening (never null); throws weft::Error
// (weft::SystemError when the address cannot be bound) when it cannot start.
using RendezvousFactory = std::function<std::unique_ptr<RendezvousHost>(
    const std::string& bind_host, int port, const std::string& token)>;

// Connects to node 0's server at host:port with `token`, from another node. Throws
// weft::Error when it cannot within a few seconds.
using DeathRecorderFactory = std::function<std::unique_ptr<DeathRecorder>(
    const std::string& host, int port, const std::string& token)>;

struct Rendezvous {
  RendezvousFactory start;       // node 0
  DeathRecorderFactory connect;  // the other nodes, at their first death
};

}  // namespace weft::launch
