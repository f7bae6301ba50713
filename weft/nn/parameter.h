// Parameters: a named tensor and its gradient. A model's parameters live in one
// ParameterList, in registration order, which is the order of its state_dict, of the
// optimizer's state and of checkpoints.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/tensor/tensor.h"

namespace weft::nn {

// Tensors by name, in a model's parameter order (PyTorch's state_dict).
using StateDict = std::vector<std::pair<std::string, Tensor>>;

struct Parameter {
  std::string name;  // "layers.0.attention.wq.weight": TorchTitan's (and PyTorch's) names
  Tensor value;      // float32, contiguous
  Tensor grad;       // same shape; accumulated by backward, zeroed by zero_grad()
};

class ParameterList {
 public:
  // Registers a zero-filled parameter; the returned reference stays valid.
  Parameter& add(std::string name, const Shape& shape);
  // Registers parameters of `rows[i].second` rows each and `cols` columns stacked in one
  // storage (value and grad), each a view of its rows; returns the stack, which is not itself
  // registered. One matrix product then serves them all (the fused q|k|v and w1|w3
  // projections) while names, checkpoints and the optimizer still see the parts.
  Parameter stack(const std::vector<std::pair<std::string, std::int64_t>>& rows, std::int64_t cols,
                  std::string name);
  Parameter& at(const std::string& name);  // InvalidArgument if there is none
  const std::vector<std::unique_ptr<Parameter>>& all() const { return params_; }
  std::int64_t numel() const;
  // PyTorch's state_dict: (name, value) in registration order; the tensors are the
  // parameters themselves (views), not copies.
  StateDict state_dict() const;
  // Copies every named value into the parameter of that name; a missing or extra name, or
  // a shape that differs, throws InvalidArgument naming it (nothing is copied then).
  void load_state_dict(const StateDict& state);
  void zero_grad();

 private:
  std::vector<std::unique_ptr<Parameter>> params_;
};

}  // namespace weft::nn
