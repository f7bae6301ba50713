// The mpi backend's transport: point-to-point messages over MPI, for ProcessGroup's
// send/recv and for the generic engine a group may use to agree on its communicator. Every
// message carries weft's 64-bit tag in front of its payload (MPI tags are 31 bits), on one
// MPI tag of a communicator of its own, so MPI's order per sender is kept; receivers move
// whatever has arrived into a Mailbox and match (source, tag) there. Sends copy and return
// at once (eager, as the Transport contract asks); nothing spins in the background: a rank
// makes progress while it waits for a message or a collective, polling with a backoff.
//
// A rank that fails tells the others with an abort note, which every peer waiting for a
// message notices within its next poll (PeerError with the reason). Peers inside a blocking
// MPI collective cannot: under mpirun the failed rank's exit ends the job, and otherwise the
// collective's watchdog does (mpi_watchdog.h).
#pragma once

#include <mpi.h>

#include <atomic>
#include <list>
#include <mutex>
#include <string>
#include <vector>

#include "weft/dist/transport/mailbox.h"
#include "weft/dist/transport/transport.h"

namespace weft::dist {

class MpiTransport final : public Transport {
 public:
  // Duplicates `world` (MPI must be initialised with MPI_THREAD_MULTIPLE).
  explicit MpiTransport(MPI_Comm world);
  ~MpiTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void send(int peer, Tag tag, std::span<const std::byte> bytes, const Deadline& deadline) override;
  void recv(int peer, Tag tag, std::span<std::byte> out, const Deadline& deadline) override;
  int recv_any(Tag tag, std::span<std::byte> out, const Deadline& deadline) override;
  void abort(const std::string& reason) override;

  bool aborted() const { return aborted_.load(); }

 private:
  struct PendingSend {
    std::vector<std::byte> frame;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  // Moves every message that has arrived into the mailbox and reaps finished sends; throws
  // PeerError once this rank or a peer has aborted.
  void progress();
  void pump();  // under pump_mu_
  void reap_sends();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  Mailbox mailbox_;
  std::mutex pump_mu_;  // one thread moves messages at a time: keeps each sender's order
  std::mutex send_mu_;  // guards sends_
  std::list<PendingSend> sends_;
  std::atomic<bool> aborted_{false};
};

}  // namespace weft::dist
