#include "weft/nn/feature_blocks.h"

#include <string>

#include "weft/base/error.h"
#include "weft/kernels/matmul.h"
#include "weft/kernels/parallel.h"

namespace weft::nn {

FeatureBlocks::FeatureBlocks(int dim, int parts, int part, std::int64_t in, std::int64_t out)
    : dim_(dim), parts_(parts), part_(part), in_(in), out_(out), segments_{dim == 1 ? in : out} {}

std::vector<FeatureBlocks::Block> FeatureBlocks::blocks_of(int blocks) const {
  if (blocks % parts_ != 0) {
    throw InvalidArgument("layout-invariant training cuts each weight into " +
                          std::to_string(blocks) + " feature blocks, which " +
                          std::to_string(parts_) +
                          " tensor-parallel ranks cannot share: use a tensor_parallel_degree "
                          "that divides it");
  }
  const int local = blocks / parts_;
  std::vector<Block> out;
  for (int j = 0; j < local; ++j) {
    std::int64_t offset = 0;
    for (const std::int64_t width : segments_) {
      if (width % local != 0) {
        throw InvalidArgument("layout-invariant training: a weight's " +
                              std::to_string(width * parts_) + " features do not split into " +
                              std::to_string(blocks) + " equal feature blocks");
      }
      const std::int64_t w = width / local;
      out.push_back({offset + j * w, w, part_ * local + j});
      offset += width;
    }
  }
  return out;
}

template <class Product>
void FeatureBlocks::sum_over_blocks(const std::vector<Block>& blocks, LeafSums<float>& sums,
                                    float* out, bool accumulate, Product&& product) {
  const std::int64_t n = sums.size();
  for (std::size_t i = 0; i < blocks.size();) {
    float* term = sums.open(/*zeroed=*/false);
    const std::int64_t index = blocks[i].index;
    for (bool add = false; i < blocks.size() && blocks[i].index == index; ++i, add = true)
      product(term, blocks[i], add);
    sums.add(index);
  }
  // This rank's blocks are aligned: their tree ends in one node.
  if (sums.blocks().size() != 1) throw Error("feature blocks: a rank's blocks are not aligned");
  const float* sum = sums.values(0);
  kernels::parallel_for(n, 1 << 14, [&](std::int64_t first, std::int64_t end) {
    if (accumulate) {
      for (std::int64_t i = first; i < end; ++i) out[i] += sum[i];
    } else {
      for (std::int64_t i = first; i < end; ++i) out[i] = sum[i];
    }
  });
  sums.clear();
}

template <class T>
void FeatureBlocks::forward(const T* x, const T* w, float* y, std::int64_t rows, bool accumulate,
                            LeafTrees& trees) const {
  const std::vector<Block> all = blocks_of(trees.feature_blocks());
  if (dim_ == 0) {
    for (const Block& b : all) {
      kernels::product_xwt(x, in_, w + b.offset * in_, in_, y + b.offset, out_, rows, b.width, in_,
                           accumulate);
    }
    return;
  }
  sum_over_blocks(all, trees.feature_sums(rows * out_), y, accumulate,
                  [&](float* term, const Block& b, bool add) {
                    kernels::product_xwt(x + b.offset, in_, w + b.offset, in_, term, out_, rows,
                                         out_, b.width, add);
                  });
}

template <class T>
void FeatureBlocks::input_grad(const T* dy, const T* w, float* dx, std::int64_t rows,
                               bool accumulate, LeafTrees& trees) const {
  const std::vector<Block> all = blocks_of(trees.feature_blocks());
  if (dim_ == 1) {
    for (const Block& b : all) {
      kernels::product_xw(dy, out_, w + b.offset, in_, dx + b.offset, in_, rows, b.width, out_,
                          accumulate);
    }
    return;
  }
  sum_over_blocks(all, trees.feature_sums(rows * in_), dx, accumulate,
                  [&](float* term, const Block& b, bool add) {
                    kernels::product_xw(dy + b.offset, out_, w + b.offset * in_, in_, term, in_,
                                        rows, in_, b.width, add);
                  });
}

template <class T>
void FeatureBlocks::weight_grad(const T* dy, const T* x, float* dw, std::int64_t rows,
                                int blocks) const {
  for (const Block& b : blocks_of(blocks)) {
    if (dim_ == 0) {
      kernels::product_ytx(dy + b.offset, out_, x, in_, dw + b.offset * in_, in_, rows, b.width,
                           in_, false);
    } else {
      kernels::product_ytx(dy, out_, x + b.offset, in_, dw + b.offset, in_, rows, out_, b.width,
                           false);
    }
  }
}

#define WEFT_FEATURE_BLOCKS(T)                                                               \
  template void FeatureBlocks::forward<T>(const T*, const T*, float*, std::int64_t, bool,    \
                                          LeafTrees&) const;                                 \
  template void FeatureBlocks::input_grad<T>(const T*, const T*, float*, std::int64_t, bool, \
                                             LeafTrees&) const;                              \
  template void FeatureBlocks::weight_grad<T>(const T*, const T*, float*, std::int64_t, int) const;
WEFT_FEATURE_BLOCKS(float)
WEFT_FEATURE_BLOCKS(BFloat16)
#undef WEFT_FEATURE_BLOCKS

}  // namespace weft::nn
