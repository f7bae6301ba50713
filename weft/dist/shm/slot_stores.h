// How a rank writes the slots its peers read. With ordinary stores the lines stay, dirty, in
// the writer's cache and each reader pulls them from there; with streaming (non-temporal)
// stores they go to memory and readers fetch them from memory. Which is quicker depends on
// where the host put the ranks' CPUs, and a VM's vCPUs move while a job runs: where the
// writer's cache is far (a 2-vCPU Zen 5 VM whose cache line took 567-674 ns to go to the other
// vCPU and back), a 1 MiB broadcast through the slots took 153-164 us with ordinary stores and
// 49-95 with streaming ones (docs/COLLECTIVES.md, "Slot stores"); where the ranks share a
// cache, ordinary stores leave the lines there for the reader. So each rank measures as it goes.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "weft/dist/op.h"

namespace weft::dist::shm {

class SlotStores {
 public:
  // Operations from this size (bytes through the slots) are timed and may stream; smaller ones
  // use ordinary stores.
  static constexpr std::size_t kMinBytes = std::size_t{64} << 10;
  // Every this-many-th operation of a class tries the store it does not use now.
  static constexpr std::uint32_t kExploreEvery = 32;

  // The first kProbeCalls of a class alternate, ordinary first.
  static constexpr std::uint32_t kProbeCalls = 4;

  // What choose() decided for one operation; record() takes its time.
  struct Choice {
    bool streaming = false;
    bool timed = false;  // operations under kMinBytes are not
    std::size_t class_index = 0;
    std::size_t bytes = 0;
  };
  // Whether the operation about to run (`op`, `bytes`) writes with streaming stores. Per class
  // (operation, and size in factors of 4 from kMinBytes): after the probe calls, a call uses
  // the store whose recent calls took less a byte, switching when the other is 10 % quicker;
  // every kExploreEvery-th call uses the other.
  // `in_place`: an in-place operation on SharedBuffers, whose classes are apart from the slots'.
  Choice choose(Op op, std::size_t bytes, bool in_place = false);
  // The time the operation `choice` was made for took; nothing if it was not timed.
  void record(const Choice& choice, std::chrono::nanoseconds took);

 private:
  static constexpr std::size_t kClassesPerOp = 6;  // 64 KiB, 256 KiB, ..., 16 MiB and more
  struct Samples {
    std::array<double, 3> ns_per_byte{};
    std::uint32_t count = 0;
    double recent() const;  // ns a byte lately (infinite without samples)
    void add(double ns);
  };
  struct Class {
    std::uint32_t calls = 0;
    bool streaming = false;           // the store used between explorations
    std::array<Samples, 2> by_store;  // [ordinary, streaming]
  };
  std::array<Class, 2 * kOpCount * kClassesPerOp> classes_{};  // the slots' first
};

}  // namespace weft::dist::shm
