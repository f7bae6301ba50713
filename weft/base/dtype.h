// Element types shared by the collectives (weft/dist) and the tensors (weft/tensor): DType
// names them, Half and BFloat16 are the 16-bit floating-point storage types.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace weft {

enum class DType : std::uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kUInt8,
  kInt32,
  kInt64,
};

// IEEE 754 binary16, stored as its bits; converts to and from float (round to nearest even).
struct Half {
  std::uint16_t bits = 0;
  Half() = default;
  explicit Half(float f);
  explicit operator float() const;
};

// The bits of the bfloat16 nearest f (ties to even); a NaN stays a (quiet) NaN.
inline std::uint16_t bfloat16_bits(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// f rounded to bfloat16 and widened back (float(BFloat16(f))), inline so that loops over
// arrays vectorise.
inline float round_to_bfloat16(float f) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bfloat16_bits(f)) << 16);
}

// bfloat16 (the top 16 bits of a float32), stored as its bits; round to nearest even.
struct BFloat16 {
  std::uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) : bits(bfloat16_bits(f)) {}
  explicit operator float() const {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
  }
};

std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "float32", "bfloat16", ...
// The DType dtype_name() names so; another name throws InvalidArgument listing them.
DType parse_dtype(std::string_view name);
bool is_floating(DType dtype);

// The DType of a C++ element type: dtype_of<float>() == DType::kFloat32.
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kFloat32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kFloat64;
}
template <>
constexpr DType dtype_of<Half>() {
  return DType::kFloat16;
}
template <>
constexpr DType dtype_of<BFloat16>() {
  return DType::kBFloat16;
}
template <>
constexpr DType dtype_of<std::int8_t>() {
  return DType::kInt8;
}
template <>
constexpr DType dtype_of<std::uint8_t>() {
  return DType::kUInt8;
}
template <>
constexpr DType dtype_of<std::int32_t>() {
  return DType::kInt32;
}
template <>
constexpr DType dtype_of<std::int64_t>() {
  return DType::kInt64;
}

template <class T>
concept Element = requires {
  dtype_of<T>();
};

}  // namespace weft
