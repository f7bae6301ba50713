#include "weft/base/dtype.h"

#include <bit>
#include <cmath>
#include <string>

#include "weft/base/check.h"
#include "weft/base/error.h"

namespace weft {

// float32 <-> binary16 by bit manipulation (no F16C dependency), round to nearest even,
// with subnormals, infinities and NaN handled.
Half::Half(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    bits = static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    return;
  }
  if (abs >= 0x477ff000u) {  // rounds to beyond the largest half: infinity
    bits = static_cast<std::uint16_t>(sign | 0x7c00u);
    return;
  }
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    // The subnormal unit is 2^-24; scaling by 2^24 is exact, and nearbyint rounds to
    // nearest even. A result of 0x400 is the smallest normal, which is also its encoding.
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f;
    bits = static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::nearbyint(scaled)));
    return;
  }
  // Normal: rebias the exponent (127 -> 15) and round the mantissa from 23 to 10 bits.
  std::uint32_t m = abs - 0x38000000u;  // exponent rebiased
  const std::uint32_t round_bit = 0x1000u;
  const std::uint32_t sticky = m & 0xfffu;
  m >>= 13;
  if (sticky > round_bit || (sticky == round_bit && (m & 1u))) ++m;
  bits = static_cast<std::uint16_t>(sign | m);
}

Half::operator float() const {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exp = (bits >> 10) & 0x1fu;
  const std::uint32_t man = bits & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float v = static_cast<float>(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
      return 8;
    case DType::kFloat16:
      return 2;
    case DType::kBFloat16:
      return 2;
    case DType::kInt8:
      return 1;
    case DType::kUInt8:
      return 1;
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
  }
  WEFT_CHECK(false);
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt8:
      return "int8";
    case DType::kUInt8:
      return "uint8";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
  }
  return "unknown";
}

DType parse_dtype(std::string_view name) {
  constexpr DType kAll[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                            DType::kInt8,    DType::kUInt8,   DType::kInt32,   DType::kInt64};
  std::string names;
  for (DType d : kAll) {
    if (dtype_name(d) == name) return d;
    names += (names.empty() ? "" : ", ") + std::string(dtype_name(d));
  }
  throw InvalidArgument("no dtype is named \"" + std::string(name) + "\"; the names: " + names);
}

bool is_floating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 ||
         dtype == DType::kBFloat16;
}

}  // namespace weft
