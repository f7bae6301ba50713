// Pipeline parallelism's runtime: the model's layers cut into stages on the ranks of a `pp`
// group, micro-batches streamed through them in the order a schedule (pipeline_schedule.h)
// gives each rank, activations sent forward and their gradients backward between ranks.
// Design, costs and the schedules' bubbles: docs/PARALLELISM.md.
//
//   Schedule s = make_schedule(ScheduleKind::k1F1B, pp.size(), 1, /*microbatches=*/4);
//   PipelineRuntime pipe(model, pp, s, split_layers(n_layers, s.num_stages()));
//   model.init_weights(seed);                       // each rank its stages' parameters
//   double loss = pipe.forward_backward(tokens, targets, batch, seq, 1.0);  // last stage's
//
// Every rank of `pp` runs the same schedule; each executes its own list of actions in order.
// Transfers are asynchronous: a receive is posted where the lowered schedule places it
// (add_send_recv) and waited for by the action that reads it, a send completes in the
// background; each (sender, receiver, direction) has a group of its own, so a transfer never
// waits behind an unrelated one. Shapes are known in advance (micro-batch rows x dim), so
// nothing but the tensors travels. Every wait carries the group's deadline.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "weft/dist/process_group.h"
#include "weft/nn/llama.h"
#include "weft/parallel/parallelize.h"
#include "weft/parallel/pipeline_schedule.h"

namespace weft::parallel {

// The schedule `options` names for `pp` ranks over n_layers blocks (its CSV when given): one
// stage per rank for GPipe and 1F1B, two for the interleaved and V schedules, unless
// layers_per_stage says how many stages the layers make. InvalidArgument when they do not fit
// (a CSV for another number of ranks or micro-batches too).
Schedule make_pipeline_schedule(const PipelineOptions& options, int n_layers, int pp);

// Cuts n_layers blocks into `stages` consecutive ranges: `layers_per_stage` each when positive
// (stages x layers_per_stage must be n_layers), else as evenly as possible with the earlier
// stages taking the extra layers. InvalidArgument when a stage would be empty or the counts
// do not fit.
std::vector<nn::LayerRange> split_layers(int n_layers, int stages, int layers_per_stage = 0);

// Checkpoints of a pipeline: appends every other rank's tensors of `dict` to rank 0's, in rank
// order (names and shapes travel first, as text, so each rank may hold different tensors), and
// empties `dict` on the others. Collective over `group`; every length read is checked.
void gather_state_dicts(nn::StateDict& dict, dist::ProcessGroup& group);

class PipelineRuntime {
 public:
  // Makes `model` hold this rank's stages of `schedule` (which must pass validate() and have
  // pp.size() ranks) with `stage_layers[s]` the layers of global stage s; creates the
  // point-to-point groups (collective over `pp`: every rank constructs with the same
  // arguments). B runs a stage's whole backward; zero bubble's I runs it with the linear
  // layers' weight gradients put off (nn::DeferredWeightGrads) until the micro-batch's W.
  // InvalidArgument naming what does not fit. `model` and `pp` outlive the runtime.
  PipelineRuntime(nn::Llama& model, dist::ProcessGroup& pp, Schedule schedule,
                  std::vector<nn::LayerRange> stage_layers);
  ~PipelineRuntime();
  PipelineRuntime(const PipelineRuntime&) = delete;
  PipelineRuntime& operator=(const PipelineRuntime&) = delete;

  // Forward and backward of every micro-batch of tokens and targets [batch, seq] (batch split
  // into schedule().microbatches equal parts, which it must divide): every parameter's grad
  // += d(loss_scale x mean loss) / d(parameter). Returns the mean loss on the rank holding the
  // last stage, 0 on the others. Every rank of pp calls it with the same shapes.
  double forward_backward(const std::int32_t* tokens, const std::int32_t* targets,
                          std::int64_t batch, std::int64_t seq, double loss_scale);
  // Forward only (each stage runs its micro-batches in order); the mean loss as above.
  double evaluate(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t batch,
                  std::int64_t seq);

  // Data parallelism's reductions. `before_backward` runs before every B or I with whether the
  // stage's gradients may be reduced as this backward finishes them: only in the stage's last
  // B (never in an I: zero bubble's weight gradients come in W). `weights_final` runs after a
  // step whose schedule splits backwards, once every W has run.
  void on_backward(std::function<void(bool may_reduce)> before_backward,
                   std::function<void()> weights_final) {
    before_backward_ = std::move(before_backward);
    weights_final_ = std::move(weights_final);
  }

  const Schedule& schedule() const { return schedule_; }  // compute-only
  const std::vector<nn::LayerRange>& stage_layers() const { return stage_layers_; }
  bool holds_last_stage() const;
  // Whether the schedule splits backwards into I and W (zero bubble).
  bool splits_backward() const { return splits_backward_; }
  // The most activation bytes this rank kept at once for micro-batches awaiting their backward.
  std::int64_t peak_activation_bytes() const { return peak_saved_bytes_; }
  // Over every forward_backward so far: wall seconds spent waiting for transfers (another
  // stage's work this rank depends on).
  double wait_seconds() const { return wait_seconds_; }
  // Per forward_backward: when this rank started and ended its schedule (seconds on the
  // steady clock, which processes on one host share) and the seconds it computed. Idle is
  // what the step's makespan over every rank leaves of a rank's compute: a rank that ends
  // early is idle until the last one ends, as simulate() counts it.
  struct StepTimes {
    double start, end, busy;
  };
  const std::vector<StepTimes>& step_times() const { return step_times_; }
  // The latest forward_backward's compute actions, in the order of schedule().actions[rank]:
  // when each started computing (after its waits for transfers) and ended, on that clock.
  struct ActionTimes {
    double start, end;
  };
  const std::vector<ActionTimes>& last_step_actions() const { return last_step_actions_; }
  // This rank's mean seconds per F, I, W and full B so far (0 for a kind not run yet): with
  // every pipeline rank's, what simulate() needs to give the idle share the schedule should
  // have with the stages' measured work.
  ActionCosts measured_costs() const;

 private:
  struct Slot {   // one (stage held here, micro-batch)
    Tensor x;     // the stage's input activations, then its output
    Tensor grad;  // the gradient of its output, then of its input
    nn::Activations saved;
    nn::DeferredWeightGrads deferred;  // between zero bubble's I and W
    std::int64_t forward_bytes = 0;    // of `saved` as its F kept them
    std::shared_ptr<dist::Work> x_arrival, grad_arrival;
  };
  enum Direction { kActivations, kGradients };

  void create_links();
  void split(std::int64_t batch, std::int64_t seq);  // sets micro_batch_ and seq_
  Slot& slot(int stage, int microbatch);
  dist::ProcessGroup& link(int from, int to, Direction direction);
  void run(const Action& action);
  void forward(const Action& action);
  void backward(const Action& action);
  void backward_weight(const Action& action);
  void held(std::int64_t bytes);
  void release(Slot& slot, std::size_t local_stage);
  void post(const Action& action);
  void wait(const std::shared_ptr<dist::Work>& work);
  void finish_sends();
  float* buffer(Tensor& t);

  nn::Llama& model_;
  dist::ProcessGroup& pp_;
  Schedule schedule_;  // compute-only
  Schedule lowered_;   // with the transfers
  std::vector<nn::LayerRange> stage_layers_;
  std::vector<int> local_index_;    // [global stage] -> index among this rank's stages, or -1
  std::vector<int> last_backward_;  // [local stage] -> the micro-batch of its last backward
  bool splits_backward_ = false;    // the schedule has I and W actions
  std::function<void(bool)> before_backward_;
  std::function<void()> weights_final_;
  std::map<std::tuple<int, int, int>, std::shared_ptr<dist::ProcessGroup>> links_;
  std::vector<Slot> slots_;                          // [local stage][micro-batch]
  std::vector<std::vector<nn::Activations>> spare_;  // [local stage]: buffers for reuse
  std::vector<std::shared_ptr<dist::Work>> sends_;
  // The step in progress.
  const std::int32_t *tokens_ = nullptr, *targets_ = nullptr;
  std::int64_t micro_batch_ = 0, seq_ = 0;
  // Layout-invariant training: the first sequence of this forward_backward (-1: off) and the
  // global batch's; each action's micro-batch starts its leaves there plus its sequences
  // before it.
  std::int64_t first_sequence_ = -1, sequences_ = 1;
  double loss_scale_ = 1, loss_sum_ = 0;
  std::int64_t saved_bytes_ = 0, peak_saved_bytes_ = 0;
  double wait_seconds_ = 0, waited_in_action_ = 0;
  std::vector<StepTimes> step_times_;
  std::vector<ActionTimes> last_step_actions_;
  // [ActionKind]: compute seconds and count of every F, B, I and W run.
  std::array<double, 4> seconds_{};
  std::array<std::int64_t, 4> counts_{};
};

}  // namespace weft::parallel
