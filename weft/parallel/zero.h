// ZeRO stage 1 (Rajbhandari et al., 2020): the optimizer state is split across the
// data-parallel group. The parameters, flattened in list order, are cut into one equal slice
// per rank (the last padded); rank r keeps AdamW's moments for slice r only, updates that
// slice of the parameters from the (already summed) gradients, and the updated slices are
// all-gathered into every rank's parameters. The moments take 1/N of the memory they take
// with DDP; the results are AdamW's, element for element.
//
//   DistributedDataParallel ddp(model, group);          // sums the gradients
//   ZeroOptimizer optimizer(model.parameters(), group, options);
//   ... ddp.finish_sync(); clip_grad_norm(...); optimizer.step(lr);
#pragma once

#include <cstdint>
#include <vector>

#include "weft/dist/process_group.h"
#include "weft/nn/optim.h"
#include "weft/nn/parameter.h"

namespace weft::parallel {

class ZeroOptimizer {
 public:
  ZeroOptimizer(nn::ParameterList& params, dist::ProcessGroup& group, nn::AdamWOptions options);

  // Updates this rank's slice and all-gathers the parameters (collective over the group).
  void step(double lr);
  std::int64_t steps() const { return steps_; }
  // Elements of the flattened parameters this rank's slice covers (the moments' size).
  std::int64_t shard_size() const { return shard_; }
  std::int64_t total_size() const { return total_; }

 private:
  // A piece of this rank's slice that lies in one parameter.
  struct Segment {
    nn::Parameter* param;
    std::int64_t param_offset, shard_offset, count;
  };

  nn::ParameterList& params_;
  dist::ProcessGroup& group_;
  nn::AdamWOptions options_;
  std::int64_t total_ = 0, shard_ = 0, steps_ = 0;
  std::vector<Segment> segments_;
  std::vector<float> m_, v_;        // this rank's slice of the moments
  std::vector<float> mine_, all_;   // the slice to send, and every slice gathered
};

}  // namespace weft::parallel
