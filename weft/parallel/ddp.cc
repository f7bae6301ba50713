#include "weft/parallel/ddp.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "weft/base/error.h"

namespace weft::parallel {

// A run of parameters whose gradients are reduced together through one flat buffer; it is
// launched by after_backward of the unit of the last of them to become final.
struct DistributedDataParallel::Bucket {
  std::vector<nn::Parameter*> params;
  int ready_unit;  // the model unit whose after_backward completes the bucket
  std::vector<float> flat;
  std::shared_ptr<dist::Work> work;
};

DistributedDataParallel::DistributedDataParallel(nn::Llama& model, dist::ProcessGroup& group,
                                                 std::size_t bucket_bytes)
    : model_(model), group_(group) {
  // Parameters in the order backward finishes them (output end first), cut into buckets.
  std::vector<nn::Parameter*> order;
  for (const auto& p : model_.parameters().all()) order.push_back(p.get());
  std::stable_sort(order.begin(), order.end(), [&](nn::Parameter* a, nn::Parameter* b) {
    return model_.unit_of(a->name) > model_.unit_of(b->name);
  });
  std::size_t bytes = 0;
  for (nn::Parameter* p : order) {
    const std::size_t size = p->grad.nbytes();
    if (buckets_.empty() || (bytes > 0 && bytes + size > bucket_bytes)) {
      buckets_.push_back(std::make_unique<Bucket>());
      bytes = 0;
    }
    buckets_.back()->params.push_back(p);
    bytes += size;
  }
  for (auto& b : buckets_) {
    b->ready_unit = model_.unit_of(b->params.back()->name);
    std::size_t elements = 0;
    for (nn::Parameter* p : b->params) elements += static_cast<std::size_t>(p->grad.numel());
    b->flat.resize(elements);
  }
  hooks_ = model_.add_unit_hooks({.after_backward = [this](int unit) { on_grads_ready(unit); }});
  if (debug_checks_enabled()) check_parameters_identical();
}

DistributedDataParallel::~DistributedDataParallel() {
  model_.remove_unit_hooks(hooks_);
  for (auto& b : buckets_) {
    if (!b->work) continue;
    try {
      b->work->wait();  // the buffers must outlive the operation
    } catch (const std::exception&) {
      // The group reported it already; a destructor cannot.
    }
  }
}

void DistributedDataParallel::prepare_sync() { syncing_ = true; }

void DistributedDataParallel::on_grads_ready(int unit) {
  if (!syncing_ || held_) return;
  for (auto& b : buckets_) {
    if (b->ready_unit != unit) continue;
    // Its buffer is in use until finish_sync: a second launch would race with the first.
    if (b->work) {
      throw Error("DDP: unit " + std::to_string(unit) +
                  "'s gradients were reduced twice in one step: more than one backward ran "
                  "after prepare_sync (pipeline stages must hold the reductions until their last)");
    }
    launch(*b);
  }
}

void DistributedDataParallel::reduce_held() {
  if (!syncing_) return;
  for (auto& b : buckets_) {
    if (!b->work) launch(*b);
  }
}

void DistributedDataParallel::launch(Bucket& b) {
  std::size_t at = 0;
  for (nn::Parameter* p : b.params) {
    std::memcpy(b.flat.data() + at, p->grad.data<float>(), p->grad.nbytes());
    at += static_cast<std::size_t>(p->grad.numel());
  }
  b.work = group_.all_reduce_async(b.flat, dist::ReduceOp::kSum);
}

void DistributedDataParallel::finish_sync() {
  if (!syncing_) return;
  syncing_ = false;
  for (auto& b : buckets_) {
    if (!b->work)
      throw Error("DDP: a bucket was never reduced: backward did not reach every layer");
    b->work->wait();
    b->work.reset();
    std::size_t at = 0;
    for (nn::Parameter* p : b->params) {
      std::memcpy(p->grad.data<float>(), b->flat.data() + at, p->grad.nbytes());
      at += static_cast<std::size_t>(p->grad.numel());
    }
  }
}

}  // namespace weft::parallel
