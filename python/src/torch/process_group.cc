#include "python/src/torch/process_group.h"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

#include "python/src/interrupt.h"
#include "python/src/torch/staging.h"
#include "python/src/torch/store.h"
#include "python/src/torch/work.h"
#include "weft/base/error.h"
#include "weft/dist/init.h"

namespace weft::torch_backend {
namespace {

using c10d::OpType;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// A c10d option's timeout as weft's: unset means the group's.
dist::OpOptions op_options(std::chrono::milliseconds timeout) {
  if (timeout == c10d::kUnsetTimeout) return {};
  return {.timeout = Seconds(timeout)};
}

int rank_arg(std::int64_t rank, const char* call) {
  if (rank < 0 || rank > std::numeric_limits<int>::max()) {
    throw InvalidArgument("weft (torch.distributed backend): " + std::string(call) + ": rank " +
                          std::to_string(rank) + " is out of range");
  }
  return static_cast<int>(rank);
}

// all_to_all's split sizes (rows of dim 0) as element counts; empty splits: equal blocks.
std::vector<std::size_t> element_counts(const std::vector<std::int64_t>& splits,
                                        const at::Tensor& t, int size) {
  const std::int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const std::int64_t row = rows == 0 ? 0 : t.numel() / rows;
  std::vector<std::size_t> counts;
  if (splits.empty()) {
    if (rows % size != 0) {
      throw InvalidArgument(
          "weft (torch.distributed backend): all_to_all_single: " + std::to_string(rows) +
          " rows do not split evenly over " + std::to_string(size) + " ranks; pass split sizes");
    }
    counts.assign(size, static_cast<std::size_t>(rows / size * row));
    return counts;
  }
  if (static_cast<int>(splits.size()) != size ||
      std::accumulate(splits.begin(), splits.end(), std::int64_t{0}) != rows ||
      std::any_of(splits.begin(), splits.end(), [](std::int64_t s) { return s < 0; })) {
    throw InvalidArgument(
        "weft (torch.distributed backend): all_to_all_single: split sizes must "
        "be " +
        std::to_string(size) + " non-negative row counts summing to " + std::to_string(rows));
  }
  for (auto s : splits) counts.push_back(static_cast<std::size_t>(s * row));
  return counts;
}

std::vector<std::size_t> numels(const std::vector<at::Tensor>& ts) {
  std::vector<std::size_t> counts;
  for (const auto& t : ts) counts.push_back(static_cast<std::size_t>(t.numel()));
  return counts;
}

// A c10d list of `size` tensors (all_gather's outputs, scatter's inputs...).
const std::vector<at::Tensor>& one_per_rank(const std::vector<std::vector<at::Tensor>>& lists,
                                            int size, const char* what) {
  if (lists.size() != 1 || static_cast<int>(lists[0].size()) != size) {
    throw InvalidArgument("weft (torch.distributed backend): " + std::string(what) +
                          " takes one list of " + std::to_string(size) + " tensors (one per rank)");
  }
  return lists[0];
}

// gather's outputs and scatter's inputs: a list on the root only.
void check_root_only(const std::vector<std::vector<at::Tensor>>& lists, int root, const char* call,
                     const char* what) {
  if (!lists.empty() && !lists[0].empty()) {
    throw InvalidArgument("weft (torch.distributed backend): " + std::string(call) +
                          ": only the root (rank " + std::to_string(root) + ") passes " + what +
                          " tensors");
  }
}

// Set around torch.distributed's blocking calls by python/weft/torch.py (set_caller_waits).
thread_local bool t_caller_waits = false;

// signal.signal() puts Python's own SIGINT handler back in front of the Ctrl-C watcher's.
// python/weft/torch.py re-arms when the handler changed; a handler set again to the same one
// goes unseen there, so arm again here too, at most every 100 ms (a sigaction costs
// microseconds on a VM, as much as a small collective).
void keep_interrupts_armed() {
  thread_local std::chrono::steady_clock::time_point next_check;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_check) return;
  next_check = now + std::chrono::milliseconds(100);
  python::arm_interrupts();
}

// Issues an operation through `issue_op` (which returns the weft Work of an _async call). When
// the Python caller waits for it at once, it runs on this thread if the group is idle
// (dist::ProcessGroup::CallerWaits), saving the hand-off to the group's thread and back, and
// Ctrl-C aborts it (python/src/interrupt.h; python/weft/torch.py gives the hint only where
// SIGINT means KeyboardInterrupt, on the main thread). c10d's bindings have released the GIL.
template <class Issue>
std::shared_ptr<dist::Work> issue(dist::ProcessGroup& group, Issue issue_op) {
  if (!t_caller_waits) return issue_op();
  keep_interrupts_armed();
  const dist::ProcessGroup::CallerWaits here(&group);
  const python::BlockingCall interruptible(&group);
  return issue_op();
}

}  // namespace

bool set_caller_waits(bool on) { return std::exchange(t_caller_waits, on); }

TorchProcessGroup::TorchProcessGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                     int size, std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size) {
  python::arm_interrupts();  // before the rendezvous: failing after it would strand the peers
  dist::InitOptions options;
  options.store = std::make_shared<C10dStore>(store);
  options.rank = rank;
  options.world_size = size;
  options.timeout = Seconds(timeout);
  group_ = dist::init_process_group(options);
  timeout_ = timeout;
}

TorchProcessGroup::~TorchProcessGroup() {
  // Python destroys the group holding the GIL; the operations it waits for may need the GIL
  // to complete (their callbacks, tensors freed), and Python's other threads may go on.
  std::optional<pybind11::gil_scoped_release> release;
  if (PyGILState_Check() == 1) release.emplace();
  // As gloo: operations still running (an async one never waited for) finish first, within
  // the group's timeout; weft aborts what is left (its peers then fail with PeerError).
  inflight_->wait_none(timeout_);
  group_.reset();
  TorchWork::release_completed();
}

c10::intrusive_ptr<c10d::Work> TorchProcessGroup::started(c10d::OpType type,
                                                          std::shared_ptr<dist::Work> work,
                                                          Staging staging,
                                                          std::vector<at::Tensor> outputs) {
  return TorchWork::start(rank_, type, std::move(work), std::move(staging), std::move(outputs),
                          inflight_, group_);
}

WorkPtr TorchProcessGroup::broadcast(std::vector<at::Tensor>& tensors,
                                     const c10d::BroadcastOptions& opts) {
  Staging s("broadcast", pool_);
  const auto buf = s.output(s.single(tensors, "broadcast"));
  auto work = issue(*group_, [&] {
    return group_->broadcast_async(buf, rank_arg(opts.rootRank, "broadcast"),
                                   op_options(opts.timeout));
  });
  return started(OpType::BROADCAST, std::move(work), std::move(s), tensors);
}

WorkPtr TorchProcessGroup::allreduce(std::vector<at::Tensor>& tensors,
                                     const c10d::AllreduceOptions& opts) {
  Staging s("all_reduce", pool_);
  const auto& t = s.single(tensors, "all_reduce");
  const auto op = reduce_op_of(opts.reduceOp, "all_reduce");
  s.check_reduce(t, op);
  auto work = issue(
      *group_, [&] { return group_->all_reduce_async(s.output(t), op, op_options(opts.timeout)); });
  return started(OpType::ALLREDUCE, std::move(work), std::move(s), tensors);
}

WorkPtr TorchProcessGroup::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                               const c10d::AllreduceCoalescedOptions& opts) {
  Staging s("all_reduce_coalesced", pool_);
  if (tensors.empty()) {
    throw InvalidArgument(
        "weft (torch.distributed backend): all_reduce_coalesced: no tensors to reduce");
  }
  const auto op = reduce_op_of(opts.reduceOp, "all_reduce_coalesced");
  s.check_reduce(tensors[0], op);
  auto work = issue(*group_, [&] {
    return group_->all_reduce_async(s.inouts(tensors, tensors[0]), op, op_options(opts.timeout));
  });
  return started(OpType::ALLREDUCE_COALESCED, std::move(work), std::move(s), tensors);
}

WorkPtr TorchProcessGroup::reduce(std::vector<at::Tensor>& tensors,
                                  const c10d::ReduceOptions& opts) {
  Staging s("reduce", pool_);
  const auto& t = s.single(tensors, "reduce");
  const auto op = reduce_op_of(opts.reduceOp, "reduce");
  s.check_reduce(t, op);
  auto work = issue(*group_, [&] {
    return group_->reduce_async(s.output(t), rank_arg(opts.rootRank, "reduce"), op,
                                op_options(opts.timeout));
  });
  return started(OpType::REDUCE, std::move(work), std::move(s), tensors);
}

WorkPtr TorchProcessGroup::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                     std::vector<at::Tensor>& inputs,
                                     const c10d::AllgatherOptions& opts) {
  Staging s("all_gather", pool_);
  const auto& in = s.single(inputs, "input");
  const auto& outs = one_per_rank(outputs, size_, "all_gather");
  // Into the list's tensors themselves: weft's list form copies each rank's block straight
  // there (staging them in one buffer cost a copy of the whole output, measured in
  // docs/PERFORMANCE_LOG.md).
  auto out = s.outputs_each(outs, in);
  auto work = issue(*group_, [&] {
    return group_->all_gather_async(std::move(out), s.input(in), op_options(opts.timeout));
  });
  return started(OpType::ALLGATHER, std::move(work), std::move(s), outs);
}

WorkPtr TorchProcessGroup::_allgather_base(at::Tensor& output, at::Tensor& input,
                                           const c10d::AllgatherOptions& opts) {
  Staging s("all_gather_into_tensor", pool_);
  const auto out = s.output(output);
  auto work = issue(*group_, [&] {
    return group_->all_gather_async(out, s.input(input), op_options(opts.timeout));
  });
  return started(OpType::_ALLGATHER_BASE, std::move(work), std::move(s), {output});
}

WorkPtr TorchProcessGroup::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                  std::vector<at::Tensor>& inputs,
                                  const c10d::GatherOptions& opts) {
  Staging s("gather", pool_);
  const auto& in = s.single(inputs, "input");
  const int root = rank_arg(opts.rootRank, "gather");
  const auto in_buf = s.input(in);
  dist::Buffer out(nullptr, 0, in_buf.dtype);
  std::vector<at::Tensor> results;
  if (rank_ == root) {
    results = one_per_rank(outputs, size_, "gather (on the root)");
    out = s.outputs(results, in, /*same_size=*/true);
  } else {
    check_root_only(outputs, root, "gather", "output");
  }
  auto work = issue(
      *group_, [&] { return group_->gather_async(out, in_buf, root, op_options(opts.timeout)); });
  return started(OpType::GATHER, std::move(work), std::move(s), results);
}

WorkPtr TorchProcessGroup::scatter(std::vector<at::Tensor>& outputs,
                                   std::vector<std::vector<at::Tensor>>& inputs,
                                   const c10d::ScatterOptions& opts) {
  Staging s("scatter", pool_);
  const auto& out = s.single(outputs, "output");
  const int root = rank_arg(opts.rootRank, "scatter");
  const auto out_buf = s.output(out);
  dist::Buffer in(nullptr, 0, out_buf.dtype);
  if (rank_ == root) {
    in = s.inputs(one_per_rank(inputs, size_, "scatter (on the root)"), out, /*same_size=*/true);
  } else {
    check_root_only(inputs, root, "scatter", "input");
  }
  auto work = issue(
      *group_, [&] { return group_->scatter_async(out_buf, in, root, op_options(opts.timeout)); });
  return started(OpType::SCATTER, std::move(work), std::move(s), outputs);
}

WorkPtr TorchProcessGroup::reduce_scatter(std::vector<at::Tensor>& outputs,
                                          std::vector<std::vector<at::Tensor>>& inputs,
                                          const c10d::ReduceScatterOptions& opts) {
  Staging s("reduce_scatter", pool_);
  const auto& out = s.single(outputs, "output");
  const auto op = reduce_op_of(opts.reduceOp, "reduce_scatter");
  s.check_reduce(out, op);
  const auto in = s.inputs(one_per_rank(inputs, size_, "reduce_scatter"), out, /*same_size=*/true);
  auto work = issue(*group_, [&] {
    return group_->reduce_scatter_async(s.output(out), in, op, op_options(opts.timeout));
  });
  return started(OpType::REDUCE_SCATTER, std::move(work), std::move(s), outputs);
}

WorkPtr TorchProcessGroup::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                const c10d::ReduceScatterOptions& opts) {
  Staging s("reduce_scatter_tensor", pool_);
  const auto op = reduce_op_of(opts.reduceOp, "reduce_scatter_tensor");
  s.check_reduce(output, op);
  const auto out = s.output(output);
  auto work = issue(*group_, [&] {
    return group_->reduce_scatter_async(out, s.input(input), op, op_options(opts.timeout));
  });
  return started(OpType::_REDUCE_SCATTER_BASE, std::move(work), std::move(s), {output});
}

WorkPtr TorchProcessGroup::alltoall_base(at::Tensor& output, at::Tensor& input,
                                         std::vector<std::int64_t>& output_splits,
                                         std::vector<std::int64_t>& input_splits,
                                         const c10d::AllToAllOptions& opts) {
  Staging s("all_to_all_single", pool_);
  const auto out = s.output(output);
  const auto in = s.input(input);
  auto work = issue(*group_, [&] {
    return group_->all_to_all_v_async(out, element_counts(output_splits, output, size_), in,
                                      element_counts(input_splits, input, size_),
                                      op_options(opts.timeout));
  });
  return started(OpType::ALLTOALL_BASE, std::move(work), std::move(s), {output});
}

WorkPtr TorchProcessGroup::alltoall(std::vector<at::Tensor>& outputs,
                                    std::vector<at::Tensor>& inputs,
                                    const c10d::AllToAllOptions& opts) {
  Staging s("all_to_all", pool_);
  if (static_cast<int>(outputs.size()) != size_ || static_cast<int>(inputs.size()) != size_) {
    throw InvalidArgument("weft (torch.distributed backend): all_to_all takes " +
                          std::to_string(size_) + " input and " + std::to_string(size_) +
                          " output tensors (one per rank)");
  }
  const auto in = s.inputs(inputs, inputs[0], /*same_size=*/false);
  const auto out = s.outputs(outputs, inputs[0], /*same_size=*/false);
  auto work = issue(*group_, [&] {
    return group_->all_to_all_v_async(out, numels(outputs), in, numels(inputs),
                                      op_options(opts.timeout));
  });
  return started(OpType::ALLTOALL, std::move(work), std::move(s), outputs);
}

WorkPtr TorchProcessGroup::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  Staging s("send", pool_);
  auto work = issue(
      *group_, [&] { return group_->send_async(s.input(s.single(tensors, "send")), dst, tag); });
  return started(OpType::SEND, std::move(work), std::move(s), tensors);
}

WorkPtr TorchProcessGroup::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  Staging s("recv", pool_);
  auto work = issue(
      *group_, [&] { return group_->recv_async(s.output(s.single(tensors, "recv")), src, tag); });
  return started(OpType::RECV, std::move(work), std::move(s), tensors);
}

WorkPtr TorchProcessGroup::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  Staging s("recv", pool_);
  auto work = issue(
      *group_, [&] { return group_->recv_any_async(s.output(s.single(tensors, "recv")), tag); });
  return started(OpType::RECVANYSOURCE, std::move(work), std::move(s), tensors);
}

WorkPtr TorchProcessGroup::barrier(const c10d::BarrierOptions& opts) {
  auto work = issue(*group_, [&] { return group_->barrier_async(op_options(opts.timeout)); });
  return started(OpType::BARRIER, std::move(work), Staging("barrier", pool_), {});
}

}  // namespace weft::torch_backend
