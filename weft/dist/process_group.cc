// ProcessGroup's public calls: each forwards to its Impl (weft/dist/internal/process_group_impl.h),
// which holds the group's state and runs the operations.
#include "weft/dist/process_group.h"

#include "weft/dist/internal/process_group_impl.h"

namespace weft::dist {

ProcessGroup::ProcessGroup(std::shared_ptr<Backend> backend, std::vector<int> members,
                           GroupOptions options)
    : ProcessGroup(std::move(backend), std::move(members), std::move(options), 0,
                   /*world=*/true) {}

ProcessGroup::ProcessGroup(std::shared_ptr<Backend> backend, std::vector<int> members,
                           GroupOptions options, std::uint32_t id, bool world)
    : impl_(std::make_unique<Impl>(*this, std::move(backend), std::move(members),
                                   std::move(options), id, world)) {}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::wait_blocking(const std::shared_ptr<Work>& work) const {
  if (work != impl_->completed_) work->wait();
}

int ProcessGroup::rank() const { return impl_->rank_; }
int ProcessGroup::size() const { return impl_->size(); }
std::string_view ProcessGroup::backend_name() const { return impl_->backend_->name(); }
std::string_view ProcessGroup::engine_name() const { return impl_->engine_->name(); }
const CollectiveTuning& ProcessGroup::tuning() const { return impl_->tuning_; }
void ProcessGroup::tune(const CollectiveTuning& tuning) { impl_->tune(tuning); }
bool ProcessGroup::reads_tuning(std::size_t CollectiveTuning::*member) const {
  return impl_->engine_->reads(member);
}
const std::string& ProcessGroup::name() const { return impl_->options_.name; }
Seconds ProcessGroup::timeout() const { return impl_->timeout(); }
void ProcessGroup::set_timeout(Seconds timeout) { impl_->set_timeout(timeout); }
void ProcessGroup::abort(const std::string& reason) { impl_->fail(reason); }

int ProcessGroup::recv_any(Buffer buf, int tag, OpOptions o) {
  CallerWaits here(this);
  auto work = recv_any_async(buf, tag, o);
  work->wait();
  return work->source_rank();
}

std::shared_ptr<Work> ProcessGroup::broadcast_async(Buffer buf, int src, OpOptions o) {
  return impl_->broadcast_async(buf, src, o);
}

std::shared_ptr<Work> ProcessGroup::all_reduce_async(Buffer buf, ReduceOp op, OpOptions o) {
  return impl_->all_reduce_async(buf, op, o);
}

std::shared_ptr<Work> ProcessGroup::reduce_async(Buffer buf, int dst, ReduceOp op, OpOptions o) {
  return impl_->reduce_async(buf, dst, op, o);
}

std::shared_ptr<Work> ProcessGroup::all_gather_async(Buffer out, Buffer in, OpOptions o) {
  return impl_->all_gather_async(out, in, o);
}

std::shared_ptr<Work> ProcessGroup::all_gather_async(std::vector<Buffer> outs, Buffer in,
                                                     OpOptions o) {
  return impl_->all_gather_async(std::move(outs), in, o);
}

std::shared_ptr<Work> ProcessGroup::all_gather_v_async(Buffer out, Buffer in,
                                                       const std::vector<std::size_t>& counts,
                                                       OpOptions o) {
  return impl_->all_gather_v_async(out, in, counts, o);
}

std::shared_ptr<Work> ProcessGroup::gather_async(Buffer out, Buffer in, int dst, OpOptions o) {
  return impl_->gather_async(out, in, dst, o);
}

std::shared_ptr<Work> ProcessGroup::scatter_async(Buffer out, Buffer in, int src, OpOptions o) {
  return impl_->scatter_async(out, in, src, o);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_async(Buffer out, Buffer in, ReduceOp op,
                                                         OpOptions o) {
  return impl_->reduce_scatter_async(out, in, op, o);
}

std::shared_ptr<Work> ProcessGroup::all_to_all_async(Buffer out, Buffer in, OpOptions o) {
  return impl_->all_to_all_async(out, in, o);
}

std::shared_ptr<Work> ProcessGroup::all_to_all_v_async(Buffer out,
                                                       const std::vector<std::size_t>& out_counts,
                                                       Buffer in,
                                                       const std::vector<std::size_t>& in_counts,
                                                       OpOptions o) {
  return impl_->all_to_all_v_async(out, out_counts, in, in_counts, o);
}

std::shared_ptr<Work> ProcessGroup::barrier_async(OpOptions o) { return impl_->barrier_async(o); }

std::shared_ptr<Work> ProcessGroup::send_async(Buffer buf, int dst, int tag, OpOptions o) {
  return impl_->send_async(buf, dst, tag, o);
}

std::shared_ptr<Work> ProcessGroup::recv_async(Buffer buf, int src, int tag, OpOptions o) {
  return impl_->recv_async(buf, src, tag, o);
}

std::shared_ptr<Work> ProcessGroup::recv_any_async(Buffer buf, int tag, OpOptions o) {
  return impl_->recv_any_async(buf, tag, o);
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(const std::vector<int>& ranks) {
  return impl_->new_group(ranks);
}

std::shared_ptr<ProcessGroup> ProcessGroup::split(int color, int key) {
  return impl_->split(color, key);
}

}  // namespace weft::dist
