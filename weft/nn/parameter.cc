#include "weft/nn/parameter.h"

#include <cstring>
#include <set>

#include "weft/base/error.h"
#include "weft/kernels/parallel.h"

namespace weft::nn {

namespace {

Shape local_shape(const std::string& name, Shape shape, const Sharding& s) {
  if (s.dim < 0 || s.parts == 1) return shape;
  const auto d = static_cast<std::size_t>(s.dim);
  if (d >= shape.size() || shape[d] % s.parts != 0 || s.part < 0 || s.part >= s.parts) {
    throw InvalidArgument("parameter " + name + " " + shape_string(shape) + ": dimension " +
                          std::to_string(s.dim) + " cannot be cut into " + std::to_string(s.parts) +
                          " equal parts");
  }
  shape[d] /= s.parts;
  return shape;
}

}  // namespace

Parameter& ParameterList::add(std::string name, const Shape& shape, Sharding sharding) {
  const Shape local = local_shape(name, shape, sharding);
  params_.push_back(std::make_unique<Parameter>(
      Parameter{std::move(name), Tensor::zeros(local), Tensor::zeros(local), sharding, shape}));
  return *params_.back();
}

Parameter ParameterList::stack(const std::vector<std::pair<std::string, std::int64_t>>& rows,
                               std::int64_t cols, std::string name, Sharding sharding) {
  std::int64_t total = 0;
  for (const auto& [part, n] : rows) total += n;
  Parameter whole{std::move(name), Tensor::zeros({total, cols}), Tensor::zeros({total, cols})};
  whole.full_shape = whole.value.shape();
  const std::int64_t parts = sharding.dim == 0 ? sharding.parts : 1;
  std::int64_t at = 0;
  for (const auto& [part, n] : rows) {
    params_.push_back(std::make_unique<Parameter>(Parameter{part, whole.value.narrow(0, at, n),
                                                            whole.grad.narrow(0, at, n), sharding,
                                                            Shape{n * parts, cols}}));
    at += n;
  }
  return whole;
}

Parameter& ParameterList::at(const std::string& name) {
  for (auto& p : params_) {
    if (p->name == name) return *p;
  }
  throw InvalidArgument("no parameter named '" + name + "'");
}

const Parameter& ParameterList::at(const std::string& name) const {
  return const_cast<ParameterList*>(this)->at(name);
}

std::int64_t ParameterList::full_numel() const {
  std::int64_t n = 0;
  for (const auto& p : params_) n += shape_numel(p->full_shape);
  return n;
}

std::int64_t ParameterList::numel() const {
  std::int64_t n = 0;
  for (const auto& p : params_) n += p->value.numel();
  return n;
}

StateDict ParameterList::state_dict() const {
  StateDict state;
  for (const auto& p : params_) state.emplace_back(p->name, p->value);
  return state;
}

void ParameterList::load_state_dict(const StateDict& state) {
  if (state.size() != params_.size()) {
    throw InvalidArgument("load_state_dict: " + std::to_string(state.size()) + " tensors for " +
                          std::to_string(params_.size()) + " parameters");
  }
  std::vector<Parameter*> targets;
  std::set<std::string> seen;
  for (const auto& [name, value] : state) {
    if (!seen.insert(name).second)
      throw InvalidArgument("load_state_dict: " + name + " appears twice");
    Parameter& p = at(name);
    if (p.value.shape() != value.shape()) {
      throw InvalidArgument("load_state_dict: " + name + " is " + shape_string(value.shape()) +
                            ", the parameter is " + shape_string(p.value.shape()));
    }
    targets.push_back(&p);
  }
  for (std::size_t i = 0; i < targets.size(); ++i) targets[i]->value.copy_from(state[i].second);
}

void ParameterList::zero_grad() {
  leaf_trees_.clear();
  for (auto& p : params_) {
    float* g = p->grad.data<float>();
    kernels::parallel_for(p->grad.numel(), 1 << 16, [g](std::int64_t first, std::int64_t end) {
      std::memset(g + first, 0, static_cast<std::size_t>(end - first) * sizeof(float));
    });
  }
}

}  // namespace weft::nn
