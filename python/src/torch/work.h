// TorchWork: a weft operation as the c10d::Work torch.distributed hands back (`async_op=True`,
// and what DDP's reducer waits on through getFuture()).
//
// It completes when the weft operation has completed and its staged results are back in the
// caller's tensors (python/src/torch/staging.h); then its future holds the output tensors (or
// the error), and wait() returns or rethrows the weft error (weft::dist::PeerError,
// TimeoutError, ...). Completion runs on the weft thread that finished the operation, and so
// do the future's continuations (DDP's, comm hooks'): one that takes the GIL holds up the
// group's later operations until it has it.
#pragma once

#include <ATen/core/ivalue.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "python/src/torch/staging.h"
#include "weft/dist/process_group.h"
#include "weft/dist/work.h"

namespace weft::torch_backend {

// The operations of one group that have not completed, so that destroying the group can wait
// for them, as gloo's does, rather than abort them under its peers. Thread-safe.
class Inflight {
 public:
  void add();
  void remove();
  // Waits until none is left or `timeout` passed; false if some are left.
  bool wait_none(std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable none_left_;
  int count_ = 0;
};

class TorchWork : public c10d::Work {
 public:
  // Takes over `staging` (the tensors stay alive until completion); `outputs` are what
  // result() and the future return; counted in `inflight` until completion.
  // `group` is what Ctrl-C during wait() aborts.
  static c10::intrusive_ptr<TorchWork> start(int rank, c10d::OpType type,
                                             std::shared_ptr<dist::Work> work, Staging staging,
                                             std::vector<at::Tensor> outputs,
                                             std::shared_ptr<Inflight> inflight,
                                             std::weak_ptr<dist::ProcessGroup> group);

  TorchWork(int rank, c10d::OpType type, std::shared_ptr<dist::Work> work, Staging staging,
            std::vector<at::Tensor> outputs, std::shared_ptr<Inflight> inflight,
            std::weak_ptr<dist::ProcessGroup> group);

  // Blocks until completion (kNoTimeout) or at most `timeout`, then throws weft's
  // TimeoutError; the operation goes on to its own deadline and its tensors stay in use.
  // Ctrl-C (a Python signal handler that raises) ends the wait within 100 ms: the group
  // is aborted, so its peers fail at once, and the handler's exception (KeyboardInterrupt)
  // propagates; so it does when the operation failed because Ctrl-C aborted it while it ran
  // on the caller's thread (set_caller_waits).
  bool wait(std::chrono::milliseconds timeout) override;
  int sourceRank() const override { return work_->source_rank(); }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Drops the handles of completed operations that nothing else held (say an isend's whose
  // Work Python dropped). Their last reference is never dropped on the weft thread that
  // completes them: a tensor Python has let go of needs the GIL to be freed, and a weft
  // thread waiting for the GIL would stall the group's queue, or deadlock a Python thread
  // that holds the GIL while it waits for the group (destroying it). Call with the GIL
  // released; every operation's start() does.
  static void release_completed();

 private:
  void complete();
  // Runs Python's signal handlers; if one raised, aborts the group and throws its exception.
  void check_signals();

  // First: made before anything is taken over, so that the constructor cannot throw after.
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<dist::Work> work_;
  Staging staging_;
  std::vector<at::Tensor> outputs_;
  std::shared_ptr<Inflight> inflight_;
  std::weak_ptr<dist::ProcessGroup> group_;
};

}  // namespace weft::torch_backend
