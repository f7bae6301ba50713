// Layout-invariant tensor parallelism inside a Linear (LeafTrees::set_feature_blocks): the
// products cut along the weight's sharded dimension into a fixed number of blocks of the whole
// weight, each block one product whose shape does not depend on the tensor-parallel degree,
// and the products that sum over that dimension summed over the blocks in the canonical tree
// over block numbers (nn/leaf_sums.h). A rank holding blocks / parts of them computes their
// subtree; the tensor-parallel group finishes the tree (TensorParallelContext). One process
// runs every block and the whole tree, so any degree dividing the block count gives its bits.
//
//   sharded dim 0 (column-parallel: wq|wk|wv, w1|w3, output): y's columns and dW's rows per
//     block; dx = dy W sums over the blocks (each block's segments of a stacked weight, then
//     the tree)
//   sharded dim 1 (row-parallel: wo, w2): dx's columns and dW's columns per block; y = x W^T
//     sums over the blocks
#pragma once

#include <cstdint>
#include <vector>

#include "weft/nn/leaf_sums.h"

namespace weft::nn {

class FeatureBlocks {
 public:
  // This rank's slice of a weight [out, in] split along `dim` (Sharding::dim; -1: never
  // split, then nothing here is used) into `parts`, rank `part`'s.
  FeatureBlocks(int dim, int parts, int part, std::int64_t in, std::int64_t out);
  bool splits() const { return dim_ >= 0; }
  // The widths along dim of a stacked weight's parts this rank holds (q|k|v, w1|w3), each cut
  // into blocks on its own; one part, the whole width, by default.
  void set_segments(std::vector<std::int64_t> widths) { segments_ = std::move(widths); }

  // The Linear's products on trees.feature_blocks() blocks of the whole dimension (a power of
  // two that `parts` divides, as each segment's width divides by blocks / parts:
  // InvalidArgument otherwise). Under dim 1 forward writes (or adds) this rank's subtree of
  // the sum, under dim 0 input_grad does (its terms in trees.feature_sums): the whole sum in
  // one process.
  // y[rows, out] (+)= x W^T.
  template <class T>
  void forward(const T* x, const T* w, float* y, std::int64_t rows, bool accumulate,
               LeafTrees& trees) const;
  // dx[rows, in] (+)= dy W.
  template <class T>
  void input_grad(const T* dy, const T* w, float* dx, std::int64_t rows, bool accumulate,
                  LeafTrees& trees) const;
  // dw[out, in] = dy^T x (overwritten).
  template <class T>
  void weight_grad(const T* dy, const T* x, float* dw, std::int64_t rows, int blocks) const;

 private:
  struct Block {
    std::int64_t offset, width;  // along dim, in this rank's slice
    std::int64_t index;          // the block's number among the whole weight's
  };
  // This rank's blocks: by block number, each number's segments in order.
  std::vector<Block> blocks_of(int blocks) const;
  // out (+)= the canonical sum over block numbers of n values each, product(buffer, block,
  // add) writing (or adding, for a stacked weight's later segments) each block's term.
  template <class Product>
  static void sum_over_blocks(const std::vector<Block>& blocks, LeafSums<float>& sums, float* out,
                              bool accumulate, Product&& product);

  int dim_, parts_, part_;
  std::int64_t in_, out_;
  std::vector<std::int64_t> segments_;
};

}  // namespace weft::nn
