// TorchWork: a weft operation as the c10d::Work torch.distributed hands back (`async_op=True`,
// and what DDP's reducer waits on through getFuture()).
//
// It completes when the weft operation has completed and its staged results are back in the
// caller's tensors (weft/python/src/torch/staging.h); then wait() returns or rethrows the weft
// error (weft::dist::PeerError, TimeoutError, ...), and the future holds the output tensors.
#pragma once

#include <ATen/core/ivalue.h>

#include <memory>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "python/src/torch/staging.h"
#include "weft/dist/work.h"

namespace weft::torch_backend {

class TorchWork : public c10d::Work {
 public:
  // Takes over `staging` (the tensors stay alive until completion); `outputs` are what
  // result() and the future return.
  static c10::intrusive_ptr<TorchWork> start(int rank, c10d::OpType type,
                                             std::shared_ptr<dist::Work> work, Staging staging,
                                             std::vector<at::Tensor> outputs);

  TorchWork(int rank, c10d::OpType type, std::shared_ptr<dist::Work> work, Staging staging,
            std::vector<at::Tensor> outputs);

  // Blocks until completion (kNoTimeout) or at most `timeout`, then throws weft's
  // TimeoutError; the operation goes on to its own deadline and its tensors stay in use.
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

  std::shared_ptr<dist::Work> work_;
  Staging staging_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace weft::torch_backend
