// Parameters: a named tensor and its gradient. A model's parameters live in one
// ParameterList, in registration order, which is the order of its state_dict, of the
// optimizer's state and of checkpoints.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/nn/leaf_sums.h"
#include "weft/tensor/tensor.h"

namespace weft::nn {

// Tensors by name, in a model's parameter order (PyTorch's state_dict).
using StateDict = std::vector<std::pair<std::string, Tensor>>;

// How a parameter is split across the ranks of a tensor-parallel group: this rank holds part
// `part` of `parts` equal slices along dimension `dim` of the whole parameter (dim -1: the
// whole, on every rank).
struct Sharding {
  int dim = -1;
  int parts = 1, part = 0;
};

struct Parameter {
  std::string name;  // "layers.0.attention.wq.weight": TorchTitan's (and PyTorch's) names
  Tensor value;      // float32, contiguous: this rank's slice (the whole without sharding)
  Tensor grad;       // same shape; accumulated by backward, zeroed by zero_grad()
  Sharding sharding;
  Shape full_shape;  // the whole parameter's
  // Read only by matrix products (a Linear's own weight, not a tied embedding): under mixed
  // precision FSDP may gather it in bf16, which the products round it to anyway.
  bool product_operand = false;

  bool sharded() const { return sharding.dim >= 0 && sharding.parts > 1; }
  // Where this rank's slice starts along sharding.dim of the whole parameter.
  std::int64_t shard_offset() const {
    return sharded() ? sharding.part * value.size(sharding.dim) : 0;
  }
};

class ParameterList {
 public:
  // Registers a zero-filled parameter of the whole `shape`, of which this rank holds the slice
  // `sharding` says (whose size must divide: InvalidArgument otherwise); the returned
  // reference stays valid.
  Parameter& add(std::string name, const Shape& shape, Sharding sharding = {});
  // Registers parameters of `rows[i].second` rows each and `cols` columns stacked in one
  // storage (value and grad), each a view of its rows; returns the stack, which is not itself
  // registered. One matrix product then serves them all (the fused q|k|v and w1|w3
  // projections) while names, checkpoints and the optimizer still see the parts. With a
  // sharding along dimension 0, `rows` are this rank's rows of each part.
  Parameter stack(const std::vector<std::pair<std::string, std::int64_t>>& rows, std::int64_t cols,
                  std::string name, Sharding sharding = {});
  Parameter& at(const std::string& name);  // InvalidArgument if there is none
  const Parameter& at(const std::string& name) const;
  // Elements of the whole parameters (numel() counts this rank's slices).
  std::int64_t full_numel() const;
  const std::vector<std::unique_ptr<Parameter>>& all() const { return params_; }
  std::int64_t numel() const;
  // PyTorch's state_dict: (name, value) in registration order; the tensors are the
  // parameters themselves (views), not copies.
  StateDict state_dict() const;
  // Copies every named value into the parameter of that name; a missing or extra name, or
  // a shape that differs, throws InvalidArgument naming it (nothing is copied then).
  void load_state_dict(const StateDict& state);
  // Zeroes every gradient and clears the layout-invariant sums.
  void zero_grad();
  // The model's sums over tokens in the layout-invariant mode (leaf_sums.h).
  LeafTrees& leaf_trees() { return leaf_trees_; }

 private:
  std::vector<std::unique_ptr<Parameter>> params_;
  LeafTrees leaf_trees_;
};

}  // namespace weft::nn
