// TorchProcessGroup: a weft process group as a torch.distributed (c10d) process group, what
// `dist.init_process_group("weft")` and `dist.new_group(..., backend="weft")` make once
// `import weft.torch` registered the backend (python/weft/torch.py).
//
// Each torch group is a weft world of its own, built through the store torch passes (keys
// under the group's prefix), on weft's default backend: shm when its ranks share a host, auto
// (shm within hosts, tcp or mpi across) otherwise, or $WEFT_BACKEND. Every operation is weft's
// asynchronous one; the handle is a TorchWork. Each call takes one tensor per process (the
// multi-device lists of old are refused), CPU tensors of a dtype weft carries; non-contiguous
// tensors and tensor lists are staged through contiguous copies (python/src/torch/staging.h).
// Operations c10d offers and weft does not (allgather_coalesced, monitored barriers) raise
// c10d's RuntimeError naming them.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "python/src/torch/staging.h"
#include "python/src/torch/work.h"
#include "weft/dist/process_group.h"

namespace weft::torch_backend {

// python/weft/torch.py's hint, on this thread, around torch.distributed's blocking calls
// (async_op=False, send, recv): the operation the call issues is waited for at once, so it may
// run right on this thread. Returns the previous value (calls nest).
bool set_caller_waits(bool on);

class TorchProcessGroup : public c10d::ProcessGroup {
 public:
  // Joins the group's other ranks through `store` (collective over them; blocks until all
  // joined or `timeout` passed). `timeout` is every operation's default deadline too.
  TorchProcessGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    std::chrono::milliseconds timeout);
  // Waits (with the GIL released) for the operations still running, at most the group's
  // timeout, then leaves the group; weft aborts any left, and their peers fail.
  ~TorchProcessGroup() override;

  const std::string getBackendName() const override { return "weft"; }
  // The weft backend and engine the group runs on ("shm", "tcp", ...).
  std::string weft_backend() const { return std::string(group_->backend_name()); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<std::int64_t>& output_splits,
                                               std::vector<std::int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

 private:
  // The handle of an operation issued on group_, counted in inflight_ until it completes.
  c10::intrusive_ptr<c10d::Work> started(c10d::OpType type, std::shared_ptr<dist::Work> work,
                                         Staging staging, std::vector<at::Tensor> outputs);

  std::shared_ptr<dist::ProcessGroup> group_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<BufferPool> pool_ = std::make_shared<BufferPool>();
  std::shared_ptr<Inflight> inflight_ = std::make_shared<Inflight>();
};

}  // namespace weft::torch_backend
