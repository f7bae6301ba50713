// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011): the value of element i of
// a stream is a pure function of (seed, stream name, i), so a parameter gets the same values
// whichever rank initializes whichever shard of it, in any order and in parallel.
#pragma once

#include <cstdint>
#include <string_view>

namespace weft {

struct PhiloxKey {
  std::uint32_t k0, k1;
};

// The key of stream `name` under `seed` (the name hashed with FNV-1a 64).
PhiloxKey philox_key(std::uint64_t seed, std::string_view name);
// Four 32-bit random words for counter `index` (two further counter words are zero).
void philox4x32(PhiloxKey key, std::uint64_t index, std::uint32_t out[4]);

// out[j] = normal(mean, std) of element first + j of the stream (Box-Muller on the first
// two words of each element's counter). T is float or double.
template <class T>
void fill_normal(T* out, std::int64_t count, PhiloxKey key, std::int64_t first, double mean,
                 double std);
// A uniform double in [0, 1) for counter `index` (53 random bits).
double philox_uniform(PhiloxKey key, std::uint64_t index);

}  // namespace weft
