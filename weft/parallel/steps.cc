#include "weft/parallel/steps.h"

#include <cmath>

#include "weft/parallel/timed.h"

namespace weft::parallel {

Steps::Steps(std::unique_ptr<Strategies> strategies)
    : s_(std::move(strategies)),
      state_(make_training_state(*s_)),
      report_(make_training_report(*s_)) {}

double Steps::forward_backward(const std::int32_t* tokens, const std::int32_t* targets,
                               std::int64_t batch, std::int64_t seq, double loss_scale) {
  if (s_->cp == nullptr) return run(tokens, targets, batch, seq, loss_scale);
  const int n = s_->cp->size();
  const Chunks c = chunks_of(tokens, targets, batch, seq);
  return run(c.tokens.data(), c.targets.data(), batch, c.seq, loss_scale / n) / n;
}

double Steps::evaluate(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t batch,
                       std::int64_t seq) {
  if (s_->cp == nullptr) return forward_only(tokens, targets, batch, seq);
  const Chunks c = chunks_of(tokens, targets, batch, seq);
  return forward_only(c.tokens.data(), c.targets.data(), batch, c.seq) / s_->cp->size();
}

void Steps::finish_sync() {
  add_seconds(s_->seconds, [&] { s_->dp->finish_sync(); });
}

// Each element of the whole model's gradient is counted once: a tensor-parallel slice by
// its rank, a parameter every tensor-parallel peer holds by the first, and replicas
// (which hold the same) by the first; pipeline stages hold different parameters. One
// all-reduce over the world sums the rest. Context-parallel ranks are replicas under DDP,
// shards under FSDP.
double Steps::clip_grad_norm(double max_norm) {
  const int tp_rank = s_->tp != nullptr ? s_->tp->rank() : 0;
  const double local = s_->dp->grad_sum_squares(
      [tp_rank](const nn::Parameter& p) { return p.sharded() || tp_rank == 0; });
  return clip_to(std::sqrt(s_->sum_over_world(first_copy() ? local : 0.0)), max_norm);
}

bool Steps::first_copy() const {
  const bool cp_replica = s_->cp != nullptr && s_->options.dims.dp_shard == 1 && s_->cp->rank() > 0;
  return s_->replica == 0 && !cp_replica;
}

double Steps::clip_to(double norm, double max_norm) {
  const double factor = max_norm / (norm + 1e-6);
  if (max_norm > 0 && factor < 1.0) s_->dp->scale_grads(static_cast<float>(factor));
  return norm;
}

double Steps::sum_over_data(double value) {
  const bool counted = (s_->tp == nullptr || s_->tp->rank() == 0) &&
                       (s_->pipeline == nullptr || s_->pipeline->holds_last_stage());
  return s_->sum_over_world(counted ? value : 0.0);
}

double Steps::run(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t batch,
                  std::int64_t seq, double loss_scale) {
  if (s_->pipeline) return s_->pipeline->forward_backward(tokens, targets, batch, seq, loss_scale);
  const double loss = s_->model.forward(tokens, targets, batch, seq);
  s_->model.backward(loss_scale);
  return loss;
}

double Steps::forward_only(const std::int32_t* tokens, const std::int32_t* targets,
                           std::int64_t batch, std::int64_t seq) {
  if (s_->pipeline) return s_->pipeline->evaluate(tokens, targets, batch, seq);
  return s_->model.forward(tokens, targets, batch, seq);
}

Steps::Chunks Steps::chunks_of(const std::int32_t* tokens, const std::int32_t* targets,
                               std::int64_t batch, std::int64_t seq) const {
  const int r = s_->cp->rank(), n = s_->cp->size();
  const int groups = s_->pipeline ? s_->pipeline->schedule().microbatches : 1;
  return {context_parallel_rows(tokens, batch, seq, r, n, groups),
          context_parallel_rows(targets, batch, seq, r, n, groups), seq / n};
}

}  // namespace weft::parallel
