// The layout-invariant mode across ranks (nn/leaf_sums.h): the ranks' partial sums over
// leaves combined in the canonical tree, so that the result is bitwise what one process gets.
#pragma once

#include <cstdint>
#include <vector>

#include "weft/base/dtype.h"
#include "weft/dist/process_group.h"
#include "weft/nn/leaf_sums.h"

namespace weft::parallel {

// Every rank's blocks of leaves, [rank][i], padded to the most any rank holds with empty
// blocks (count 0; a rank's leaves may split into more aligned blocks than another's). A rank
// passes consistent = false when its sums disagree about its blocks, and every rank the same
// `agreed` (what sizes the exchange that follows, beside the blocks): otherwise every rank
// throws Error (no rank is left waiting in the collective that would follow). Collective.
std::vector<std::vector<nn::LeafBlock>> blocks_of_all(dist::ProcessGroup& group,
                                                      const std::vector<nn::LeafBlock>& mine,
                                                      bool consistent = true,
                                                      std::int64_t agreed = 0);

// blocks_of_all of the blocks `sums` hold: every one must hold the same (else every rank
// throws); none is no blocks. Collective.
std::vector<std::vector<nn::LeafBlock>> blocks_of_all(
    dist::ProcessGroup& group, const std::vector<const nn::LeafSums<float>*>& sums,
    std::int64_t agreed = 0);

// The canonical combination of every rank's blocks (`all`, [rank][entry] as blocks_of_all
// gives them, its padding's empty blocks skipped), block (r, e)'s sums of n values at
// values + (r x entries + e) x stride; computed in those buffers (with bf16, rounding each
// node: nn::combine_blocks), the one that holds it returned (null when there are none).
float* combine_gathered(const std::vector<std::vector<nn::LeafBlock>>& all, float* values,
                        std::int64_t stride, std::int64_t n, bool bf16 = false);

// The sums of a model's LeafTrees over the ranks of a group, with buffers kept from step to
// step.
class LeafReducer {
 public:
  // Every gradient sum of `trees` over the ranks of `group` (null: this process alone), added
  // to its target in the trees' order. Each rank holds its leaves' blocks (the same number on
  // every rank); rank j combines slice j of every gradient from all of them (one all-to-all),
  // then the slices are all-gathered: the bytes of a ring all-reduce per block a rank holds,
  // in bfloat16 when the sums are (LeafTrees::set_bf16_gradients: half the bytes, exactly).
  // Collective; the trees are cleared.
  void reduce(dist::ProcessGroup* group, nn::LeafTrees& trees);
  // The loss summed over the leaves of every rank in the canonical tree (the loss's blocks are
  // all-gathered; a rank that is not `counted`, a tensor-parallel peer holding the same, adds
  // none). Collective.
  static double sum_losses(dist::ProcessGroup* group, nn::LeafTrees& trees, bool counted = true);
  // Bytes of the exchange buffers kept.
  std::int64_t bytes() const;

 private:
  // The exchange's buffers, of the elements it moves (float, or BFloat16).
  template <class W>
  struct Wire {
    std::vector<W> send, received, combined, gathered;
    std::size_t bytes() const {
      return (send.capacity() + received.capacity() + combined.capacity() + gathered.capacity()) *
             sizeof(W);
    }
  };
  template <class W>
  void reduce_as(dist::ProcessGroup& group, nn::LeafTrees& trees, Wire<W>& wire);
  // The received blocks as floats: `received` itself, or widened into widened_.
  float* widen(std::vector<float>& received) { return received.data(); }
  float* widen(const std::vector<BFloat16>& received);

  Wire<float> float_wire_;
  Wire<BFloat16> bf16_wire_;
  std::vector<float> widened_;
};

}  // namespace weft::parallel
