// The keys and values of the positions generated so far, per layer, so that producing one
// more token costs one position's work instead of the whole sequence's (weft-generate).
#pragma once

#include <cstdint>
#include <vector>

#include "weft/tensor/tensor.h"

namespace weft::nn {

struct LayerCache {
  Tensor k, v;  // [max_seq_len, kv_heads * head_dim], rows [0, length) filled
};

struct KVCache {
  std::vector<LayerCache> layers;
  std::int64_t length = 0;  // positions cached
  std::int64_t capacity = 0;
};

}  // namespace weft::nn
