#include "weft/dist/mpi/mpi_transport.h"

#include <chrono>
#include <cstring>
#include <limits>
#include <thread>

#include "weft/dist/mpi/mpi_check.h"

namespace weft::dist {
namespace {

constexpr int kDataTag = 1;
constexpr int kAbortTag = 2;
constexpr int kMaxInt = std::numeric_limits<int>::max();

}  // namespace

MpiTransport::MpiTransport(MPI_Comm world) {
  check_mpi(MPI_Comm_dup(world, &comm_), "MPI_Comm_dup");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiTransport::~MpiTransport() {
  reap_sends();  // nobody else uses the transport any more
  // Sends still pending would keep the communicator busy; after an abort nobody will take
  // them, so they are left to the process's end.
  if (!aborted_.load() && sends_.empty()) MPI_Comm_free(&comm_);
}

void MpiTransport::send(int peer, Tag tag, std::span<const std::byte> bytes, const Deadline&) {
  if (aborted_.load()) throw PeerError(mailbox_.abort_reason());
  if (bytes.size() > static_cast<std::size_t>(kMaxInt) - sizeof(Tag)) {
    throw InvalidArgument("mpi transport: a message of " + std::to_string(bytes.size()) +
                          " bytes exceeds MPI's int count; split it");
  }
  PendingSend pending;
  pending.frame.resize(sizeof(Tag) + bytes.size());
  std::memcpy(pending.frame.data(), &tag, sizeof(Tag));
  if (!bytes.empty()) std::memcpy(pending.frame.data() + sizeof(Tag), bytes.data(), bytes.size());
  std::lock_guard lock(send_mu_);
  sends_.push_back(std::move(pending));
  PendingSend& queued = sends_.back();
  check_mpi(MPI_Isend(queued.frame.data(), static_cast<int>(queued.frame.size()), MPI_BYTE, peer,
                      kDataTag, comm_, &queued.request),
            "MPI_Isend");
  reap_sends();
}

void MpiTransport::reap_sends() {  // under send_mu_
  for (auto it = sends_.begin(); it != sends_.end();) {
    int done = 0;
    MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
    it = done ? sends_.erase(it) : std::next(it);
  }
}

void MpiTransport::pump() {
  for (;;) {
    int arrived = 0;
    MPI_Message message;
    MPI_Status status;
    check_mpi(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &arrived, &message, &status),
              "MPI_Improbe");
    if (!arrived) return;
    int length = 0;
    MPI_Get_count(&status, MPI_BYTE, &length);
    std::vector<std::byte> frame(static_cast<std::size_t>(length));
    check_mpi(MPI_Mrecv(frame.data(), length, MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
    const int from = status.MPI_SOURCE;
    if (status.MPI_TAG == kAbortTag) {
      mailbox_.abort(std::string(reinterpret_cast<const char*>(frame.data()), frame.size()));
      aborted_.store(true);
      continue;
    }
    if (frame.size() < sizeof(Tag)) {
      throw PeerError("mpi transport: rank " + std::to_string(from) + " sent a frame of " +
                      std::to_string(frame.size()) + " bytes, shorter than its tag");
    }
    Tag tag;
    std::memcpy(&tag, frame.data(), sizeof(Tag));
    frame.erase(frame.begin(), frame.begin() + sizeof(Tag));
    mailbox_.deliver(from, tag, std::move(frame));
  }
}

void MpiTransport::progress() {
  {
    std::unique_lock lock(pump_mu_, std::try_to_lock);
    if (lock.owns_lock()) pump();
  }
  {
    std::lock_guard lock(send_mu_);
    reap_sends();
  }
  if (aborted_.load()) throw PeerError(mailbox_.abort_reason());
}

namespace {

// Spin while a reply is likely within microseconds, then give the core away: yield for a
// while (other ranks may share it), then sleep in slices short enough for a timely reply.
class Backoff {
 public:
  void pause() {
    ++polls_;
    if (polls_ < 200) return;
    if (polls_ < 2000) return std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }

 private:
  int polls_ = 0;
};

}  // namespace

void MpiTransport::recv(int peer, Tag tag, std::span<std::byte> out, const Deadline& deadline) {
  Backoff backoff;
  for (;;) {
    progress();
    if (mailbox_.try_recv(peer, tag, out)) return;
    if (deadline.expired()) {
      throw PeerTimeout(peer, "no message from rank " + std::to_string(peer) + " in time");
    }
    backoff.pause();
  }
}

int MpiTransport::recv_any(Tag tag, std::span<std::byte> out, const Deadline& deadline) {
  Backoff backoff;
  for (;;) {
    progress();
    if (const auto from = mailbox_.try_recv_any(tag, out)) return *from;
    if (deadline.expired()) throw PeerTimeout(-1, "no message from any rank in time");
    backoff.pause();
  }
}

void MpiTransport::abort(const std::string& reason) {
  if (aborted_.exchange(true)) return;
  mailbox_.abort(reason);
  // Best effort: peers notice the note in their next poll; it is never waited for.
  std::lock_guard lock(send_mu_);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    sends_.push_back(
        {std::vector<std::byte>(reinterpret_cast<const std::byte*>(reason.data()),
                                reinterpret_cast<const std::byte*>(reason.data()) + reason.size()),
         MPI_REQUEST_NULL});
    MPI_Isend(sends_.back().frame.data(), static_cast<int>(sends_.back().frame.size()), MPI_BYTE,
              peer, kAbortTag, comm_, &sends_.back().request);
  }
}

}  // namespace weft::dist
