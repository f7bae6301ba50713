#include "weft/parallel/pipeline.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>
#include <string>

#include "weft/base/error.h"
#include "weft/recorder/flight_recorder.h"

namespace weft::parallel {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double seconds_of(Clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

// The tag of a transfer into `stage` (its input activations, or its output's gradient) of
// `microbatch`: each link carries one direction, so (stage, micro-batch) identifies it.
int tag_of(int stage, int microbatch, int microbatches) {
  return stage * microbatches + microbatch;
}

// Stages per rank: one for GPipe and 1F1B, two for the interleaved and V schedules, unless
// layers_per_stage says how many stages the layers make.
int stages_per_rank(ScheduleKind kind, int n_layers, int pp, int layers_per_stage) {
  const bool single = kind == ScheduleKind::kGPipe || kind == ScheduleKind::k1F1B;
  if (layers_per_stage <= 0) return single ? 1 : 2;
  const int stages = n_layers / layers_per_stage;
  if (stages * layers_per_stage != n_layers || stages % pp != 0 || (single && stages != pp)) {
    throw InvalidArgument("pipeline_parallel_layers_per_stage " + std::to_string(layers_per_stage) +
                          " does not cut n_layers " + std::to_string(n_layers) +
                          " into the stages " + std::string(schedule_name(kind)) + " runs on " +
                          std::to_string(pp) +
                          " ranks: " + (single ? "exactly " : "a multiple of ") +
                          std::to_string(pp) + " stages of equal size");
  }
  return stages / pp;
}

}  // namespace

Schedule make_pipeline_schedule(const PipelineOptions& options, int n_layers, int pp) {
  if (!options.schedule_csv.empty()) {
    Schedule schedule = read_schedule_csv(options.schedule_csv);
    if (schedule.microbatches != options.microbatches) {
      throw InvalidArgument("pipeline_parallel_schedule_csv runs " +
                            std::to_string(schedule.microbatches) +
                            " micro-batches; the batch "
                            "and pipeline_parallel_microbatch_size make " +
                            std::to_string(options.microbatches));
    }
    if (schedule.ranks != pp) {
      throw InvalidArgument("pipeline_parallel_schedule_csv is a schedule for " +
                            std::to_string(schedule.ranks) +
                            " ranks; pipeline_parallel_degree is " + std::to_string(pp));
    }
    return schedule;
  }
  const ScheduleKind kind = parse_schedule_kind(options.schedule);
  return make_schedule(kind, pp, stages_per_rank(kind, n_layers, pp, options.layers_per_stage),
                       options.microbatches);
}

std::vector<nn::LayerRange> split_layers(int n_layers, int stages, int layers_per_stage) {
  if (stages < 1 || n_layers < stages) {
    throw InvalidArgument("pipeline: " + std::to_string(n_layers) + " layers cannot make " +
                          std::to_string(stages) + " stages of at least one layer each");
  }
  if (layers_per_stage > 0 && layers_per_stage * stages != n_layers) {
    throw InvalidArgument("pipeline_parallel_layers_per_stage " + std::to_string(layers_per_stage) +
                          " x " + std::to_string(stages) +
                          " stages must be n_layers = " + std::to_string(n_layers));
  }
  std::vector<nn::LayerRange> ranges;
  int first = 0;
  for (int s = 0; s < stages; ++s) {
    const int n = n_layers / stages + (s < n_layers % stages ? 1 : 0);
    ranges.push_back({first, first + n});
    first += n;
  }
  return ranges;
}

// The header: a line per tensor, "name d0 d1 ...".
void gather_state_dicts(nn::StateDict& dict, dist::ProcessGroup& group) {
  constexpr std::int64_t kMaxHeader = std::int64_t{64} << 20;
  constexpr std::int64_t kMaxElements = std::int64_t{1} << 36;  // 256 GiB of floats
  if (group.rank() != 0) {
    std::string header;
    for (const auto& [name, t] : dict) {
      header += name;
      for (std::int64_t d : t.shape()) {
        header += ' ';
        header += std::to_string(d);
      }
      header += '\n';
    }
    std::vector<std::int64_t> length{static_cast<std::int64_t>(header.size())};
    group.send(length, 0);
    group.send(dist::Buffer(header.data(), header.size(), DType::kUInt8), 0);
    for (auto& [name, t] : dict) {
      Tensor whole = t.contiguous();
      group.send(dist::Buffer(whole.data<float>(), static_cast<std::size_t>(whole.numel()),
                              DType::kFloat32),
                 0);
    }
    dict.clear();
    return;
  }
  for (int r = 1; r < group.size(); ++r) {
    std::vector<std::int64_t> length(1);
    group.recv(length, r);
    if (length[0] < 0 || length[0] > kMaxHeader) {
      throw InvalidArgument("pipeline checkpoint: rank " + std::to_string(r) +
                            " announced a header of " + std::to_string(length[0]) + " bytes");
    }
    std::string header(static_cast<std::size_t>(length[0]), '\0');
    group.recv(dist::Buffer(header.data(), header.size(), DType::kUInt8), r);
    std::istringstream lines(header);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream fields(line);
      std::string name;
      fields >> name;
      Shape shape;
      std::int64_t numel = 1;
      for (std::int64_t d; fields >> d;) {
        if (d < 0 || d > kMaxElements || numel * d > kMaxElements) {
          throw InvalidArgument("pipeline checkpoint: rank " + std::to_string(r) +
                                " sent a bad shape for " + name);
        }
        numel *= d;
        shape.push_back(d);
      }
      Tensor t = Tensor::zeros(shape);
      group.recv(
          dist::Buffer(t.data<float>(), static_cast<std::size_t>(t.numel()), DType::kFloat32), r);
      dict.emplace_back(name, std::move(t));
    }
  }
}

namespace {

// What the runtime can run: a valid compute-only schedule for `ranks` ranks, with a layer
// range per stage.
void check_runnable(const Schedule& schedule, int ranks, std::size_t layer_ranges) {
  validate(schedule);
  if (schedule.has_communication()) {
    throw InvalidArgument("pipeline: give the compute-only schedule; the transfers are added");
  }
  if (schedule.ranks != ranks) {
    throw InvalidArgument("pipeline: the schedule is for " + std::to_string(schedule.ranks) +
                          " ranks, the pipeline group has " + std::to_string(ranks));
  }
  if (layer_ranges != static_cast<std::size_t>(schedule.num_stages())) {
    throw InvalidArgument("pipeline: " + std::to_string(layer_ranges) + " layer ranges for " +
                          std::to_string(schedule.num_stages()) + " stages");
  }
}

}  // namespace

PipelineRuntime::PipelineRuntime(nn::Llama& model, dist::ProcessGroup& pp, Schedule schedule,
                                 std::vector<nn::LayerRange> stage_layers)
    : model_(model),
      pp_(pp),
      schedule_(std::move(schedule)),
      stage_layers_(std::move(stage_layers)) {
  check_runnable(schedule_, pp.size(), stage_layers_.size());
  lowered_ = add_send_recv(schedule_);
  for (const auto& list : schedule_.actions) {
    splits_backward_ |= std::any_of(list.begin(), list.end(), [](const Action& a) {
      return a.kind == ActionKind::kBackwardWeight;
    });
  }
  std::vector<nn::LayerRange> mine;
  local_index_.assign(static_cast<std::size_t>(schedule_.num_stages()), -1);
  for (int s = 0; s < schedule_.num_stages(); ++s) {
    if (schedule_.stage_to_rank[static_cast<std::size_t>(s)] != pp.rank()) continue;
    local_index_[static_cast<std::size_t>(s)] = static_cast<int>(mine.size());
    mine.push_back(stage_layers_[static_cast<std::size_t>(s)]);
  }
  model_.apply_pipeline(mine);
  last_backward_.assign(mine.size(), -1);
  for (const Action& a : schedule_.actions[static_cast<std::size_t>(pp.rank())]) {
    if (a.kind == ActionKind::kFullBackward || a.kind == ActionKind::kBackwardInput)
      last_backward_[static_cast<std::size_t>(local_index_[static_cast<std::size_t>(a.stage)])] =
          a.microbatch;
  }
  slots_.resize(mine.size() * static_cast<std::size_t>(schedule_.microbatches));
  spare_.resize(mine.size());
  create_links();
}

// One group per (sender, receiver, direction) that the schedule uses, created in the same
// order on every rank (new_group is collective over pp).
void PipelineRuntime::create_links() {
  const auto rank_of = [&](int stage) {
    return schedule_.stage_to_rank[static_cast<std::size_t>(stage)];
  };
  std::set<std::tuple<int, int, int>> needed;
  for (const auto& list : lowered_.actions) {
    for (const Action& a : list) {
      if (a.kind == ActionKind::kSendF)
        needed.insert({rank_of(a.stage), rank_of(a.stage + 1), kActivations});
      if (a.kind == ActionKind::kSendB)
        needed.insert({rank_of(a.stage), rank_of(a.stage - 1), kGradients});
    }
  }
  for (const auto& [from, to, direction] : needed) {
    auto group = pp_.new_group({from, to});
    if (group) links_[{from, to, direction}] = std::move(group);
  }
}

bool PipelineRuntime::holds_last_stage() const { return local_index_.back() >= 0; }

PipelineRuntime::Slot& PipelineRuntime::slot(int stage, int microbatch) {
  const int local = local_index_[static_cast<std::size_t>(stage)];
  return slots_[static_cast<std::size_t>(local * schedule_.microbatches + microbatch)];
}

dist::ProcessGroup& PipelineRuntime::link(int from, int to, Direction direction) {
  return *links_.at({from, to, direction});
}

float* PipelineRuntime::buffer(Tensor& t) {
  return nn::ensure(t, {model_.local_rows(micro_batch_ * seq_), model_.config().dim});
}

void PipelineRuntime::wait(const std::shared_ptr<dist::Work>& work) {
  if (!work) return;
  const auto start = Clock::now();
  work->wait();
  const double waited = since(start);
  wait_seconds_ += waited;
  waited_in_action_ += waited;
}

PipelineRuntime::~PipelineRuntime() {
  // Transfers still in flight (a step that failed) use the slots' buffers: they must end
  // first. Their errors were reported to the step already; a destructor cannot.
  const auto settle = [](const std::shared_ptr<dist::Work>& work) {
    try {
      if (work) work->wait();
    } catch (const std::exception&) {
    }
  };
  for (const auto& work : sends_) settle(work);
  for (const Slot& s : slots_) {
    settle(s.x_arrival);
    settle(s.grad_arrival);
  }
}

void PipelineRuntime::split(std::int64_t batch, std::int64_t seq) {
  const int m = schedule_.microbatches;
  if (batch % m != 0) {
    throw InvalidArgument("pipeline: a batch of " + std::to_string(batch) +
                          " sequences does not split into " + std::to_string(m) +
                          " equal micro-batches");
  }
  micro_batch_ = batch / m;
  seq_ = seq;
}

double PipelineRuntime::forward_backward(const std::int32_t* tokens, const std::int32_t* targets,
                                         std::int64_t batch, std::int64_t seq, double loss_scale) {
  const int m = schedule_.microbatches;
  split(batch, seq);
  tokens_ = tokens;
  targets_ = targets;
  loss_scale_ = loss_scale / m;
  const nn::LeafTrees& trees = model_.parameters().leaf_trees();
  first_sequence_ = trees.active() ? trees.first_sequence() : -1;
  sequences_ = trees.sequences();
  loss_sum_ = 0;
  double busy = 0;
  for (double s : seconds_) busy -= s;
  const double start = seconds_of(Clock::now());
  last_step_actions_.clear();
  for (const Action& a : lowered_.actions[static_cast<std::size_t>(pp_.rank())]) run(a);
  if (weights_final_ && splits_backward_) weights_final_();
  finish_sends();
  for (double s : seconds_) busy += s;
  step_times_.push_back({start, seconds_of(Clock::now()), busy});
  return loss_sum_ / m;
}

ActionCosts PipelineRuntime::measured_costs() const {
  const auto mean = [&](ActionKind kind) {
    const auto k = static_cast<std::size_t>(kind);
    return counts_[k] > 0 ? seconds_[k] / static_cast<double>(counts_[k]) : 0.0;
  };
  ActionCosts costs{.forward = mean(ActionKind::kForward),
                    .backward_input = mean(ActionKind::kBackwardInput),
                    .backward_weight = mean(ActionKind::kBackwardWeight)};
  if (counts_[static_cast<std::size_t>(ActionKind::kFullBackward)] > 0)
    costs.full_backward = mean(ActionKind::kFullBackward);
  return costs;
}

void PipelineRuntime::run(const Action& action) {
  if (!is_compute(action.kind)) {
    post(action);
    return;
  }
  const auto start = Clock::now();
  if (first_sequence_ >= 0) {  // layout-invariant sums: the micro-batch's sequences
    model_.parameters().leaf_trees().start(first_sequence_ + action.microbatch * micro_batch_, seq_,
                                           sequences_);
  }
  switch (action.kind) {
    case ActionKind::kForward:
      forward(action);
      break;
    case ActionKind::kBackwardWeight:
      backward_weight(action);
      break;
    default:
      backward(action);
  }
  // Waits for transfers are counted apart (wait()), so this is the action's compute; the
  // timeline shows the action from the end of its waits.
  const auto k = static_cast<std::size_t>(action.kind);
  const double took = since(start), computed = took - waited_in_action_;
  const double began = seconds_of(start) + waited_in_action_;
  last_step_actions_.push_back({began, began + computed});
  seconds_[k] += computed;
  ++counts_[k];
  waited_in_action_ = 0;
}

// A stage's input comes from the stage before it: received, or handed over in this rank's
// slots when that stage is here too. Its output goes the same way to the next.
void PipelineRuntime::forward(const Action& a) {
  Slot& s = slot(a.stage, a.microbatch);
  wait(s.x_arrival);
  s.x_arrival.reset();
  const std::int64_t offset = a.microbatch * micro_batch_ * seq_;
  const nn::LayerRange layers = stage_layers_[static_cast<std::size_t>(a.stage)];
  loss_sum_ += model_.forward_stage(layers, tokens_ + offset, targets_ + offset, buffer(s.x),
                                    micro_batch_, seq_);
  // Keep what backward needs in the slot; the model gets spare buffers for the next forward.
  auto& spare = spare_[static_cast<std::size_t>(local_index_[static_cast<std::size_t>(a.stage)])];
  s.saved = nn::Activations{};
  if (!spare.empty()) {
    s.saved = std::move(spare.back());
    spare.pop_back();
  }
  model_.swap_activations(layers, s.saved);
  s.forward_bytes = s.saved.bytes();
  held(s.forward_bytes);
  const int next = a.stage + 1;
  if (next < schedule_.num_stages() && local_index_[static_cast<std::size_t>(next)] >= 0)
    slot(next, a.microbatch).x = std::move(s.x);
}

// B, or zero bubble's I: the input gradient, with the weight gradients recorded in the slot
// for its W; the activations they read stay in the slot until then.
void PipelineRuntime::backward(const Action& a) {
  Slot& s = slot(a.stage, a.microbatch);
  wait(s.grad_arrival);
  s.grad_arrival.reset();
  const nn::LayerRange layers = stage_layers_[static_cast<std::size_t>(a.stage)];
  const auto local = static_cast<std::size_t>(local_index_[static_cast<std::size_t>(a.stage)]);
  const bool split = a.kind == ActionKind::kBackwardInput;
  if (before_backward_) before_backward_(!split && a.microbatch == last_backward_[local]);
  const std::int64_t saved = s.saved.bytes();
  model_.swap_activations(layers, s.saved);
  model_.backward_stage(layers, buffer(s.grad), loss_scale_, split ? &s.deferred : nullptr);
  model_.swap_activations(layers, s.saved);
  if (split) {  // with checkpointing the recomputed activations stay for the W too
    held(s.deferred.bytes() + s.saved.bytes() - saved);
  } else {
    release(s, local);
  }
  const int previous = a.stage - 1;
  if (previous >= 0 && local_index_[static_cast<std::size_t>(previous)] >= 0)
    slot(previous, a.microbatch).grad = std::move(s.grad);
}

void PipelineRuntime::backward_weight(const Action& a) {
  Slot& s = slot(a.stage, a.microbatch);
  const std::int64_t deferred = s.deferred.bytes();
  s.deferred.run();
  held(-deferred);
  release(s, static_cast<std::size_t>(local_index_[static_cast<std::size_t>(a.stage)]));
}

void PipelineRuntime::held(std::int64_t bytes) {
  saved_bytes_ += bytes;
  peak_saved_bytes_ = std::max(peak_saved_bytes_, saved_bytes_);
}

// The micro-batch's activations are spent: their buffers serve a later forward, unless an I
// recomputed whole blocks into them (activation checkpointing under zero bubble), which a
// forward does not keep: those are freed.
void PipelineRuntime::release(Slot& s, std::size_t local) {
  const std::int64_t bytes = s.saved.bytes();
  held(-bytes);
  if (bytes == s.forward_bytes) spare_[local].push_back(std::move(s.saved));
  s.saved = nn::Activations{};
}

// SEND_F s: stage s's output to stage s + 1; RECV_F s: stage s's input from s - 1; SEND_B s:
// stage s's input gradient to s - 1; RECV_B s: stage s's output gradient from s + 1.
void PipelineRuntime::post(const Action& a) {
  const int me = pp_.rank(), mb = a.microbatch, m = schedule_.microbatches;
  const recorder::FlightRecorder::Site site("pipeline " + to_string(a));
  const auto rank_of = [&](int stage) {
    return schedule_.stage_to_rank[static_cast<std::size_t>(stage)];
  };
  Slot& s = slot(a.stage, mb);
  const auto floats = [](Tensor& t) {
    return dist::Buffer(t.data<float>(), static_cast<std::size_t>(t.numel()), DType::kFloat32);
  };
  switch (a.kind) {
    case ActionKind::kSendF:
      sends_.push_back(link(me, rank_of(a.stage + 1), kActivations)
                           .send_async(floats(s.x), 1, tag_of(a.stage + 1, mb, m)));
      break;
    case ActionKind::kRecvF:
      buffer(s.x);
      s.x_arrival = link(rank_of(a.stage - 1), me, kActivations)
                        .recv_async(floats(s.x), 0, tag_of(a.stage, mb, m));
      break;
    case ActionKind::kSendB:
      sends_.push_back(link(me, rank_of(a.stage - 1), kGradients)
                           .send_async(floats(s.grad), 1, tag_of(a.stage - 1, mb, m)));
      break;
    case ActionKind::kRecvB:
      buffer(s.grad);
      s.grad_arrival = link(rank_of(a.stage + 1), me, kGradients)
                           .recv_async(floats(s.grad), 0, tag_of(a.stage, mb, m));
      break;
    default:
      throw InvalidArgument("pipeline: cannot run " + to_string(a));
  }
}

// The slots' buffers are rewritten by the next step: its sends must be done by then.
void PipelineRuntime::finish_sends() {
  for (const auto& work : sends_) wait(work);
  sends_.clear();
}

double PipelineRuntime::evaluate(const std::int32_t* tokens, const std::int32_t* targets,
                                 std::int64_t batch, std::int64_t seq) {
  const int m = schedule_.microbatches, me = pp_.rank();
  split(batch, seq);
  double loss = 0;
  const int stages = schedule_.num_stages();
  for (int stage = 0; stage < stages; ++stage) {
    if (local_index_[static_cast<std::size_t>(stage)] < 0) continue;
    const nn::LayerRange layers = stage_layers_[static_cast<std::size_t>(stage)];
    for (int mb = 0; mb < m; ++mb) {
      Slot& s = slot(stage, mb);
      float* x = buffer(s.x);
      const dist::Buffer floats(x, static_cast<std::size_t>(s.x.numel()), DType::kFloat32);
      const int previous = stage - 1, next = stage + 1;
      if (previous >= 0 && local_index_[static_cast<std::size_t>(previous)] < 0) {
        const int from = schedule_.stage_to_rank[static_cast<std::size_t>(previous)];
        link(from, me, kActivations).recv(floats, 0, tag_of(stage, mb, m));
      }
      const std::int64_t offset = mb * micro_batch_ * seq;
      loss += model_.forward_stage(layers, tokens + offset, targets + offset, x, micro_batch_, seq);
      if (next == stages) continue;
      if (local_index_[static_cast<std::size_t>(next)] >= 0) {
        slot(next, mb).x = std::move(s.x);
      } else {
        const int to = schedule_.stage_to_rank[static_cast<std::size_t>(next)];
        sends_.push_back(link(me, to, kActivations).send_async(floats, 1, tag_of(next, mb, m)));
      }
    }
  }
  for (const auto& work : sends_) work->wait();  // not the training steps' waits
  sends_.clear();
  return loss / m;
}

}  // namespace weft::parallel
