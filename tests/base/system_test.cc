#include "weft/base/system.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace weft {
namespace {

// The resident set follows what the process touches, and the peak records it (the kernel
// updates the peak lazily: it may trail the current figure by a few pages).
TEST(SystemTest, ResidentMemoryFollowsTouchedPagesAndStaysUnderThePeak) {
  const std::int64_t before = resident_memory_bytes();
  ASSERT_GT(before, 0);
  std::vector<char> block(std::size_t{64} << 20, 1);  // 64 MiB, every page touched
  const std::int64_t after = resident_memory_bytes();
  EXPECT_GE(after - before, std::int64_t{60} << 20);
  EXPECT_GE(peak_resident_memory_bytes(), before + (std::int64_t{60} << 20));
  EXPECT_EQ(block[block.size() / 2], 1);
}

}  // namespace
}  // namespace weft
