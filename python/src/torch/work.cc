#include "python/src/torch/work.h"

#include <ATen/core/jit_type.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>

#include "weft/base/spin.h"
#include "weft/dist/errors.h"

namespace weft::torch_backend {
namespace {

// As weft's own futures: a small operation completes within microseconds, and polling that
// long is cheaper than sleeping on the condition variable and being woken.
constexpr int kWaitSpinRounds = 64;

// How often a blocked wait() lets Python run its signal handlers (Ctrl-C).
constexpr std::chrono::milliseconds kSignalCheck{100};

// Completed handles awaiting release_completed(); leaked at exit on purpose (freeing tensors
// needs an interpreter that may be gone by then).
std::mutex graves_mutex;
auto* graves = new std::vector<c10::intrusive_ptr<TorchWork>>;

}  // namespace

void Inflight::add() {
  const std::lock_guard lock(mu_);
  ++count_;
}

void Inflight::remove() {
  {
    const std::lock_guard lock(mu_);
    --count_;
  }
  none_left_.notify_all();
}

bool Inflight::wait_none(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return none_left_.wait_for(lock, timeout, [this] { return count_ == 0; });
}

TorchWork::TorchWork(int rank, c10d::OpType type, std::shared_ptr<dist::Work> work, Staging staging,
                     std::vector<at::Tensor> outputs, std::shared_ptr<Inflight> inflight,
                     std::weak_ptr<dist::ProcessGroup> group)
    : c10d::Work(rank, type),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))),
      work_(std::move(work)),
      staging_(std::move(staging)),
      outputs_(std::move(outputs)),
      inflight_(std::move(inflight)),
      group_(std::move(group)) {}

c10::intrusive_ptr<TorchWork> TorchWork::start(int rank, c10d::OpType type,
                                               std::shared_ptr<dist::Work> work, Staging staging,
                                               std::vector<at::Tensor> outputs,
                                               std::shared_ptr<Inflight> inflight,
                                               std::weak_ptr<dist::ProcessGroup> group) {
  release_completed();
  const std::shared_ptr<dist::Work> running = work;
  const std::shared_ptr<Inflight> tracker = inflight;
  tracker->add();
  c10::intrusive_ptr<TorchWork> self;  // out here: destroyed only after the wait below
  try {
    self =
        c10::make_intrusive<TorchWork>(rank, type, std::move(work), std::move(staging),
                                       std::move(outputs), std::move(inflight), std::move(group));
    // The callback holds the handle until the operation completes, so that the results reach
    // the caller's tensors even if Python dropped the handle (dist.isend, say); then hands it
    // to release_completed(), however complete() leaves.
    self->work_->add_done_callback([self]() mutable {
      struct Bury {
        c10::intrusive_ptr<TorchWork>& work;
        ~Bury() {
          const std::lock_guard lock(graves_mutex);
          graves->push_back(std::move(work));
        }
      } bury{self};
      self->complete();
    });
    return self;
  } catch (...) {  // out of memory: the operation runs on, on tensors `staging` holds
    try {
      running->wait();
    } catch (...) {  // NOLINT(bugprone-empty-catch): its error is not the one to report
    }
    tracker->remove();
    throw;
  }
}

void TorchWork::release_completed() {
  std::vector<c10::intrusive_ptr<TorchWork>> released;
  {
    const std::lock_guard lock(graves_mutex);
    released.swap(*graves);
  }
}

void TorchWork::complete() {
  std::exception_ptr error = work_->exception();
  if (!error) {
    try {
      staging_.finish();
    } catch (...) {
      error = std::current_exception();
    }
  }
  // The future first: a caller that wait()ed may read it at once. Whatever its continuations
  // do, the Work completes.
  try {
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  finish(error);  // c10d::Work: wakes wait(), records the profiler's end
  inflight_->remove();
}

void TorchWork::check_signals() {
  const pybind11::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() == 0) return;          // runs Python's handlers (the main thread only)
  const pybind11::error_already_set interrupted;  // takes the handler's exception
  if (const auto group = group_.lock()) {
    group->abort("rank " + std::to_string(group->rank()) +
                 " was interrupted (Ctrl-C) while waiting for its operation");
  }
  throw interrupted;
}

bool TorchWork::wait(std::chrono::milliseconds timeout) {
  for (int round = 0; round < kWaitSpinRounds && !isCompleted(); ++round) spin_pause(round);
  std::unique_lock lock(mutex_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto slice = std::chrono::duration_cast<std::chrono::nanoseconds>(kSignalCheck);
    if (timeout != kNoTimeout) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= left.zero()) break;
      slice = std::min<std::chrono::nanoseconds>(slice, left);
    }
    if (cv_.wait_for(lock, slice, [this] { return completed_; })) break;
    lock.unlock();
    check_signals();
    lock.lock();
  }
  if (!completed_) {
    throw dist::TimeoutError("Work.wait: the weft operation did not finish within " +
                             std::to_string(timeout.count()) +
                             " ms; it goes on until its own timeout, and its tensors stay in "
                             "use until then");
  }
  if (exception_) {
    const std::exception_ptr error = exception_;
    lock.unlock();    // Python's handlers must not run under the Work's lock
    check_signals();  // Ctrl-C aborted an operation that ran on the caller's thread
    std::rethrow_exception(error);
  }
  return true;
}

}  // namespace weft::torch_backend
