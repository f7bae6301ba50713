#include "weft/base/simd.h"

#include <cctype>
#include <cstdint>
#include <cstdlib>

#include "hwy/targets.h"
#include "weft/base/error.h"

namespace weft::simd {
namespace {

// This build's targets that the CPU runs, best first: read once, on the first call (from
// supported_targets or use_target, before anything here disabled a target), so that later
// reads need not touch the dispatch.
const std::vector<std::int64_t>& supported_bits() {
  static const std::vector<std::int64_t> bits = [] {
    std::vector<std::int64_t> out;
    for (std::int64_t t = hwy::SupportedTargets() & HWY_TARGETS; t != 0; t &= t - 1)
      out.push_back(t & ~(t - 1));
    return out;
  }();
  return bits;
}

bool same_name(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::vector<std::string> supported_targets() {
  std::vector<std::string> names;
  for (std::int64_t bit : supported_bits()) names.emplace_back(hwy::TargetName(bit));
  return names;
}

std::string current_target() {
  const std::int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  return hwy::TargetName(targets & ~(targets - 1));
}

void use_target(std::string_view name) {
  std::int64_t better = 0;
  if (!name.empty() && !same_name(name, "best")) {
    const std::vector<std::int64_t>& bits = supported_bits();
    auto it = bits.begin();
    for (; it != bits.end() && !same_name(hwy::TargetName(*it), name); ++it) better |= *it;
    if (it == bits.end()) {
      throw InvalidArgument(
          "SIMD target '" + std::string(name) + "' is not one this build " +
          "and CPU run (WEFT_SIMD_TARGET); supported: " + join(supported_targets()));
    }
  }
  hwy::DisableTargets(better);  // the next dispatch of every kernel picks the new best
}

void use_target_from_env() {
  const char* name = std::getenv("WEFT_SIMD_TARGET");
  if (name != nullptr && *name != '\0') use_target(name);
}

}  // namespace weft::simd
