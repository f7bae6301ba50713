// Test inputs: n floats drawn from the standard normal distribution, the same for a seed.
#pragma once

#include <cstddef>
#include <random>
#include <vector>

namespace weft::testing {

inline std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

}  // namespace weft::testing
