#include <algorithm>

#include "weft/base/error.h"
#include "weft/parallel/strategies.h"

namespace weft::parallel {
namespace {

class HeldState : public TrainingState {
 public:
  explicit HeldState(Strategies& s) : s_(s) {}

  // The data-parallel roots (data coordinates 0) hold whole slices; tensor parallelism then
  // gathers the slices to each stage's first rank, and the pipeline the stages to world rank 0.
  std::pair<nn::StateDict, nn::AdamWState> full() override {
    auto state = s_.replica == 0 ? s_.dp->state() : std::pair<nn::StateDict, nn::AdamWState>{};
    if (s_.data_rank != 0 || (s_.cp != nullptr && s_.cp->rank() != 0)) return {};
    auto& [params, optimizer] = state;
    if (s_.tp != nullptr) {
      const nn::ParameterList& like = s_.model.parameters();
      state = {gather_full(params, like, *s_.tp),
               {gather_full(optimizer.exp_avg, like, *s_.tp),
                gather_full(optimizer.exp_avg_sq, like, *s_.tp), optimizer.steps}};
      if (s_.tp->rank() != 0) return {};
    }
    if (s_.pp != nullptr) {
      for (nn::StateDict* dict : {&params, &optimizer.exp_avg, &optimizer.exp_avg_sq})
        gather_state_dicts(*dict, *s_.pp);
    }
    return state;
  }

  // A held run's box in the whole tensor: the tensor-parallel slice, then its rows.
  std::vector<StatePiece> layout() override {
    std::vector<StatePiece> layout;
    for (const DataParallel::Held& h : s_.dp->held()) {
      const nn::Parameter& p = *h.param;
      StatePiece piece{h.kind + p.name, p.full_shape,
                       std::vector<std::int64_t>(p.full_shape.size()), p.value.shape()};
      if (p.sharded()) piece.offsets[static_cast<std::size_t>(p.sharding.dim)] = p.shard_offset();
      if (!piece.sizes.empty()) {
        piece.offsets[0] += h.first_row;
        piece.sizes[0] = h.rows;
      }
      layout.push_back(std::move(piece));
    }
    return layout;
  }
  void copy(std::vector<Tensor>& into) override {
    const std::vector<DataParallel::Held> held = s_.dp->held();
    if (into.empty()) {
      for (const StatePiece& piece : layout()) into.push_back(Tensor::zeros(piece.sizes));
    }
    if (into.size() != held.size()) {
      throw InvalidArgument("TrainingState::copy: " + std::to_string(into.size()) +
                            " tensors for " + std::to_string(held.size()) + " pieces");
    }
    for (std::size_t i = 0; i < held.size(); ++i)
      std::copy_n(held[i].data, into[i].numel(), into[i].data<float>());
  }
  void load(const std::vector<Tensor>& values, std::int64_t optimizer_steps) override {
    const std::vector<StatePiece> pieces = layout();
    if (values.size() != pieces.size()) {
      throw InvalidArgument("TrainingState::load: " + std::to_string(values.size()) +
                            " tensors for " + std::to_string(pieces.size()) + " pieces");
    }
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (values[i].shape() != pieces[i].sizes || values[i].dtype() != DType::kFloat32) {
        throw InvalidArgument("TrainingState::load: " + pieces[i].name + " is " +
                              shape_string(values[i].shape()) + ", this rank holds " +
                              shape_string(pieces[i].sizes));
      }
    }
    const std::vector<DataParallel::Held> held = s_.dp->held();
    for (std::size_t i = 0; i < held.size(); ++i) {
      const Tensor c = values[i].contiguous();
      std::copy_n(c.data<float>(), c.numel(), held[i].data);
    }
    s_.dp->held_loaded(optimizer_steps);
  }
  std::int64_t optimizer_steps() const override { return s_.dp->optimizer_steps(); }

  const std::vector<std::pair<std::string, Shape>>& whole_parameters() const override {
    return s_.model.whole_parameters();
  }
  void check_replicas_identical() override { s_.dp->check_replicas_identical(); }

 private:
  Strategies& s_;
};

}  // namespace

std::unique_ptr<TrainingState> make_training_state(Strategies& s) {
  return std::make_unique<HeldState>(s);
}

}  // namespace weft::parallel
