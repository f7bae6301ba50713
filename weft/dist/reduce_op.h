// dist::ReduceOp and the element-wise reduction the collectives apply.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "weft/base/dtype.h"

namespace weft::dist {

enum class ReduceOp : std::uint8_t {
  kSum,
  kProduct,
  kMin,
  kMax,
  kAvg,   // sum, then divided by the group size (integer division for integer types)
  kBAnd,  // bitwise: integer types only
  kBOr,
  kBXor,
};

std::string_view reduce_op_name(ReduceOp op);
bool is_bitwise(ReduceOp op);

// acc[i] = acc[i] (op) in[i] for i < count. kAvg reduces as kSum (divide with
// finish_average). Float16 and bfloat16 are not reduced here: the collectives widen them to
// float32 first so that partial sums are kept in float32.
void reduce_into(void* acc, const void* in, std::size_t count, DType dtype, ReduceOp op);
// out[i] = a[i] (op) b[i]; out may be a or b (element for element), not overlap otherwise.
void reduce_pair(void* out, const void* a, const void* b, std::size_t count, DType dtype,
                 ReduceOp op);

// acc[i] /= n, for kAvg after the sum (16-bit floats in float32, rounded once).
void finish_average(void* acc, std::size_t count, DType dtype, std::size_t n);

}  // namespace weft::dist
