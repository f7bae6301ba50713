// dist::Work: the handle an _async collective returns.
#pragma once

#include <exception>
#include <functional>
#include <memory>

#include "weft/base/deadline.h"
#include "weft/exec/future.h"

namespace weft::dist {

// Completes when its operation has finished on this rank (its buffers may then be read and
// reused). A group's collectives complete in the order they were issued, as do its sends to
// one peer and its receives from one peer; point-to-point traffic with different peers, and
// collectives, progress independently (a receive waiting for its message holds up nothing
// else). Thread-safe.
class Work {
 public:
  explicit Work(Future<void> done) : done_(std::move(done)) {}

  // Blocks until the operation finished; rethrows its error (TimeoutError, PeerError, ...).
  // Never blocks longer than the operation's own timeout plus the operations queued before.
  void wait() const { done_.get(); }
  // As wait(), but throws dist::TimeoutError if not finished within `timeout`; the operation
  // itself goes on until its own deadline, and until it completes its buffers are still in
  // use: do not free or reuse them after this throws.
  void wait(Seconds timeout) const;
  // Waits up to `timeout`; true once the operation has finished (wait() then returns or
  // throws at once).
  bool wait_for(Seconds timeout) const { return done_.wait_for(timeout); }
  bool is_completed() const { return done_.done(); }
  // The operation's error once completed, nullptr if it succeeded or is still running.
  std::exception_ptr exception() const;
  // For recv_any_async: the rank the message came from, once completed; -1 before that, on
  // failure, and for every other operation.
  int source_rank() const { return done_.done() && source_ && !exception() ? *source_ : -1; }
  // Runs `callback` once the operation has finished, on the thread that finishes it (or at
  // once on this thread if it already has); for handles that complete their own waiters, such
  // as the torch.distributed backend's. Exceptions it throws are printed and ignored. On the
  // group's own thread, before its next operation: it must not block, wait for the group's
  // operations, or drop the group's last reference.
  void add_done_callback(std::function<void()> callback) const {
    done_.add_done_callback(std::move(callback));
  }

 private:
  friend class ProcessGroup;
  Future<void> done_;
  std::shared_ptr<const int> source_;  // written by the operation before it completes
};

}  // namespace weft::dist
