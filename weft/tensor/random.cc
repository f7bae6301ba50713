#include "weft/tensor/random.h"

#include <cmath>
#include <numbers>

namespace weft {
namespace {

constexpr std::uint32_t kMul0 = 0xD2511F53, kMul1 = 0xCD9E8D57;
constexpr std::uint32_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;

void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

// Two 32-bit words to a double in (0, 1]: never 0, so log() is finite.
double unit_open(std::uint32_t a, std::uint32_t b) {
  const std::uint64_t bits = (static_cast<std::uint64_t>(a) << 21) ^ (b >> 11);  // 53 bits
  return (static_cast<double>(bits & ((std::uint64_t{1} << 53) - 1)) + 1.0) / 9007199254740992.0;
}

}  // namespace

PhiloxKey philox_key(std::uint64_t seed, std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  h ^= seed * 0x9E3779B97F4A7C15ull;
  return {static_cast<std::uint32_t>(h), static_cast<std::uint32_t>(h >> 32)};
}

void philox4x32(PhiloxKey key, std::uint64_t index, std::uint32_t out[4]) {
  std::uint32_t c0 = static_cast<std::uint32_t>(index),
                c1 = static_cast<std::uint32_t>(index >> 32);
  std::uint32_t c2 = 0, c3 = 0, k0 = key.k0, k1 = key.k1;
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c0, hi0, lo0);
    mulhilo(kMul1, c2, hi1, lo1);
    const std::uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

template <class T>
void fill_normal(T* out, std::int64_t count, PhiloxKey key, std::int64_t first, double mean,
                 double std) {
  for (std::int64_t j = 0; j < count; ++j) {
    std::uint32_t w[4];
    philox4x32(key, static_cast<std::uint64_t>(first + j), w);
    const double u1 = unit_open(w[0], w[1]), u2 = unit_open(w[2], w[3]);
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    out[j] = static_cast<T>(mean + std * z);
  }
}

double philox_uniform(PhiloxKey key, std::uint64_t index) {
  std::uint32_t w[4];
  philox4x32(key, index, w);
  return unit_open(w[0], w[1]) - 1.0 / 9007199254740992.0;  // [0, 1)
}

template void fill_normal<float>(float*, std::int64_t, PhiloxKey, std::int64_t, double, double);
template void fill_normal<double>(double*, std::int64_t, PhiloxKey, std::int64_t, double, double);

}  // namespace weft
