// float32 <-> bfloat16 conversions over arrays: the bf16 copies that mixed-precision training
// gives the matrix products (weights and float32 inputs, as each product runs).
// Rounding is to nearest even and a NaN stays a NaN, exactly as BFloat16(float) does
// (weft/base/dtype.h), on every vector target. Both run on the calling thread alone (callers
// split large arrays between threads themselves).
#pragma once

#include <cstdint>

#include "weft/base/dtype.h"

namespace weft::kernels {

void to_bfloat16(const float* x, BFloat16* y, std::int64_t n);
void to_float(const BFloat16* x, float* y, std::int64_t n);

// The same, split between kernels::threads() (parallel.h): for whole arrays, called outside
// other parallel loops.
void to_bfloat16_threaded(const float* x, BFloat16* y, std::int64_t n);
void to_float_threaded(const BFloat16* x, float* y, std::int64_t n);

}  // namespace weft::kernels
