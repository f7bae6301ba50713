// Which vector target weft's kernels run on. Every vector loop in weft (kernels, the
// optimizer, the collectives' reductions) is written once against Google Highway and compiled
// for each target of this build (on x86-64: AVX-512 "AVX3", "AVX2" with FMA, "SSE4" and the
// portable "EMU128"; on Arm: NEON and SVE); Highway picks the best one the CPU has on the
// first call. These functions name the targets and narrow that choice: for a benchmark of
// the AVX2 path on an AVX-512 machine (WEFT_SIMD_TARGET=AVX2), and for the tests, which run
// each kernel on every target the machine has.
//
// Thread-safety: the choice is process-wide. Change it only while no kernel runs (at
// start-up, or between tests); reading it is safe at any time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace weft::simd {

// The targets this build has and this CPU runs, best first, by Highway's names ("AVX3",
// "AVX2", "SSE4", "EMU128", "NEON", ...). Unaffected by use_target().
std::vector<std::string> supported_targets();

// The target the kernels dispatch to now.
std::string current_target();

// From now on the kernels run on `name` (one of supported_targets(), case-insensitive), the
// better targets being disabled; "" or "best" restores the best. Throws InvalidArgument,
// listing the supported targets, for any other name.
void use_target(std::string_view name);

// use_target(getenv("WEFT_SIMD_TARGET")) when that is set and not empty; the tools call it
// at start-up.
void use_target_from_env();

// use_target(name) for a scope, then back to the best target.
class ScopedTarget {
 public:
  explicit ScopedTarget(std::string_view name) { use_target(name); }
  ~ScopedTarget() { use_target(""); }
  ScopedTarget(const ScopedTarget&) = delete;
  ScopedTarget& operator=(const ScopedTarget&) = delete;
};

}  // namespace weft::simd

// In a source's HWY_ONCE part (after HWY_EXPORT(name##F32) and HWY_EXPORT(name##F64)): calls
// the best target's name##F32 when T is float, name##F64 when it is double, with the
// arguments after `name`, so that a kernel's template entry point dispatches in one line.
#define WEFT_DISPATCH_BY_TYPE(T, name, ...)                \
  ([&] {                                                   \
    if constexpr (sizeof(T) == sizeof(float))              \
      return HWY_DYNAMIC_DISPATCH(name##F32)(__VA_ARGS__); \
    else                                                   \
      return HWY_DYNAMIC_DISPATCH(name##F64)(__VA_ARGS__); \
  }())
