#include "weft/tensor/mappings.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstddef>
#include <cstring>
#include <new>

namespace weft::mappings {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

std::size_t resident_peak() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return static_cast<std::size_t>(r.ru_maxrss) * 1024;
}

void expect_within_peak() {
  const Usage u = usage();
  EXPECT_LE(u.in_use + u.kept, u.peak);
}

// A block given back is taken again by the next request of its size, zero-filled.
TEST(MappingsTest, SameSizeIsReusedZeroFilled) {
  auto* first = static_cast<unsigned char*>(take(3 * kMiB));
  std::memset(first, 0xab, 3 * kMiB);
  give(first, 3 * kMiB);
  const std::size_t kept = usage().kept;
  EXPECT_GE(kept, 3 * kMiB);
  auto* second = static_cast<unsigned char*>(take(3 * kMiB));
  EXPECT_EQ(usage().kept, kept - 3 * kMiB);
  for (std::size_t i = 0; i < 3 * kMiB; i += 4099) ASSERT_EQ(second[i], 0) << i;
  give(second, 3 * kMiB);
  expect_within_peak();
}

// Kept blocks stay resident only under the peaks: a block of a new size that would take the
// resident set past its peak unmaps the kept ones first, and the peak does not move.
TEST(MappingsTest, KeptBlocksGoBeforeTheResidentSetPassesItsPeak) {
  const std::size_t bytes = 256 * kMiB;
  auto* big = static_cast<unsigned char*>(take(bytes));
  std::memset(big, 1, bytes);  // resident, and the peak with it
  give(big, bytes);
  EXPECT_GE(usage().kept, bytes);
  const std::size_t peak = resident_peak();
  auto* other = static_cast<unsigned char*>(take(bytes + 64));
  EXPECT_LT(usage().kept, bytes);
  std::memset(other, 1, bytes + 64);
  EXPECT_LE(resident_peak(), peak + 2 * kMiB);  // a huge page's rounding at most
  give(other, bytes + 64);
  expect_within_peak();
}

// A mapping the kernel refuses throws std::bad_alloc and leaves the counts as they were.
TEST(MappingsTest, ARefusedMappingChangesNothing) {
  const Usage before = usage();
  EXPECT_THROW(take(std::size_t{1} << 56), std::bad_alloc);
  const Usage after = usage();
  EXPECT_EQ(after.in_use, before.in_use);
  EXPECT_EQ(after.peak, before.peak);
}

}  // namespace
}  // namespace weft::mappings
