#include "weft/parallel/ddp.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "weft/base/error.h"
#include "weft/kernels/convert.h"
#include "weft/recorder/flight_recorder.h"

namespace weft::parallel {

// A run of parameters whose gradients are reduced together through one flat buffer; it is
// launched by after_backward of the unit of the last of them to become final.
struct DistributedDataParallel::Bucket {
  std::vector<nn::Parameter*> params;
  int ready_unit;                // the model unit whose after_backward completes the bucket
  std::vector<float> flat;       // the bucket, reduced in float32; or else
  std::vector<BFloat16> flat16;  // the bucket, reduced in bf16
  std::shared_ptr<dist::Work> work;
};

DistributedDataParallel::DistributedDataParallel(nn::Llama& model, dist::ProcessGroup& group,
                                                 std::size_t bucket_bytes, DType reduce_dtype)
    : model_(model), group_(group), reduce_dtype_(reduce_dtype) {
  if (reduce_dtype != DType::kFloat32 && reduce_dtype != DType::kBFloat16) {
    throw InvalidArgument("DDP reduces gradients in float32 or bfloat16, not " +
                          std::string(dtype_name(reduce_dtype)));
  }
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
    if (reduce_dtype_ == DType::kBFloat16) {
      b->flat16.resize(elements);
    } else {
      b->flat.resize(elements);
    }
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

// Each gradient copied, or rounded to bf16, into its place in the bucket.
void DistributedDataParallel::launch(Bucket& b) {
  std::size_t at = 0;
  for (nn::Parameter* p : b.params) {
    const auto n = static_cast<std::size_t>(p->grad.numel());
    if (reduce_dtype_ == DType::kBFloat16) {
      kernels::to_bfloat16_threaded(p->grad.data<float>(), b.flat16.data() + at,
                                    static_cast<std::int64_t>(n));
    } else {
      std::memcpy(b.flat.data() + at, p->grad.data<float>(), n * sizeof(float));
    }
    at += n;
  }
  const auto index = std::find_if(buckets_.begin(), buckets_.end(),
                                  [&](const auto& bucket) { return bucket.get() == &b; }) -
                     buckets_.begin();
  const recorder::FlightRecorder::Site site("DDP bucket " + std::to_string(index));
  b.work = reduce_dtype_ == DType::kBFloat16
               ? group_.all_reduce_async(b.flat16, dist::ReduceOp::kSum)
               : group_.all_reduce_async(b.flat, dist::ReduceOp::kSum);
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
      const auto n = static_cast<std::size_t>(p->grad.numel());
      if (reduce_dtype_ == DType::kBFloat16) {
        kernels::to_float_threaded(b->flat16.data() + at, p->grad.data<float>(),
                                   static_cast<std::int64_t>(n));
      } else {
        std::memcpy(p->grad.data<float>(), b->flat.data() + at, n * sizeof(float));
      }
      at += n;
    }
  }
}

}  // namespace weft::parallel
