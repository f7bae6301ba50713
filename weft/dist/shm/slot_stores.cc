#include "weft/dist/shm/slot_stores.h"

#include <algorithm>
#include <limits>

namespace weft::dist::shm {

// The median of the last three; the quicker of fewer (a class's first calls pay for faults
// and cold caches, and one slow sample must not decide).
double SlotStores::Samples::recent() const {
  if (count == 0) return std::numeric_limits<double>::infinity();  // never preferred
  if (count < 3) return *std::min_element(ns_per_byte.begin(), ns_per_byte.begin() + count);
  std::array<double, 3> sorted = ns_per_byte;
  std::sort(sorted.begin(), sorted.end());
  return sorted[1];
}

void SlotStores::Samples::add(double ns) { ns_per_byte[count++ % 3] = ns; }

SlotStores::Choice SlotStores::choose(Op op, std::size_t bytes, bool in_place) {
  if (bytes < kMinBytes) return {};
  std::size_t size_class = 0;
  for (std::size_t b = bytes / kMinBytes; b >= 4 && size_class + 1 < kClassesPerOp; b /= 4)
    ++size_class;
  const std::size_t kind = static_cast<std::size_t>(op) + (in_place ? kOpCount : 0);
  const std::size_t index = kind * kClassesPerOp + size_class;
  Class& c = classes_[index];
  const std::uint32_t call = c.calls++;
  if (call >= kProbeCalls) {
    const double ordinary = c.by_store[0].recent(), streamed = c.by_store[1].recent();
    if (c.streaming && ordinary < 0.9 * streamed) c.streaming = false;
    if (!c.streaming && streamed < 0.9 * ordinary) c.streaming = true;
  }
  const bool streaming =
      call < kProbeCalls ? call % 2 == 1 : c.streaming != (call % kExploreEvery == 0);
  return {streaming, /*timed=*/true, index, bytes};
}

void SlotStores::record(const Choice& choice, std::chrono::nanoseconds took) {
  if (!choice.timed) return;
  classes_[choice.class_index].by_store[choice.streaming ? 1 : 0].add(
      static_cast<double>(took.count()) / static_cast<double>(choice.bytes));
}

}  // namespace weft::dist::shm
