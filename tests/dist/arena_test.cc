// The shared arena behind dist::SharedBuffer: page-rounded zero-filled blocks, freed ranges
// coalesced and their pages returned (zeros again when reused), exhaustion an error, a forked
// child with an arena of its own, and a peer's arena mapped through its descriptor.
#include "weft/dist/shm/arena.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "weft/base/error.h"
#include "weft/dist/shared_buffer.h"

namespace weft::dist::shm {
namespace {

std::span<const std::byte> whole(const Arena& arena) { return {arena.base(), arena.capacity()}; }

TEST(ArenaTest, BlocksAreZeroPageAlignedAndInside) {
  Arena& arena = Arena::instance();
  const SharedBuffer a(100), b(5000);
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % page, 0u);
  EXPECT_GE(static_cast<std::size_t>(std::abs(b.data() - a.data())), page);
  EXPECT_TRUE(
      std::all_of(b.data(), b.data() + b.size(), [](std::byte x) { return x == std::byte{0}; }));
  EXPECT_GE(offset_in(whole(arena), b.data(), b.size()), 0);
  EXPECT_EQ(offset_in(whole(arena), b.data() + 1, arena.capacity()), -1);
  int outside = 0;
  EXPECT_EQ(offset_in(whole(arena), &outside, sizeof outside), -1);
}

TEST(ArenaTest, FreedBlocksAreReusedAsZeros) {
  std::byte* first = nullptr;
  {
    const SharedBuffer a(1 << 20);
    std::memset(a.data(), 0xab, a.size());
    first = a.data();
  }
  // The range freed is the first that fits again: reused, its old bytes gone.
  const SharedBuffer b(1 << 20);
  EXPECT_EQ(b.data(), first);
  EXPECT_TRUE(
      std::all_of(b.data(), b.data() + b.size(), [](std::byte x) { return x == std::byte{0}; }));
}

TEST(ArenaTest, NeighboursFreedCoalesce) {
  Arena& arena = Arena::instance();
  std::byte* x = arena.allocate(3 << 20);
  std::byte* y = arena.allocate(1 << 20);
  std::byte* z = arena.allocate(1 << 20);
  arena.free(x, 3 << 20);
  arena.free(z, 1 << 20);
  arena.free(y, 1 << 20);  // joins both neighbours: one range of 5 MiB from x
  std::byte* whole = arena.allocate(5 << 20);
  EXPECT_EQ(whole, x);
  arena.free(whole, 5 << 20);
}

TEST(ArenaTest, ExhaustionIsAnErrorSayingWhat) {
  try {
    const SharedBuffer too_big(Arena::instance().capacity() + 1);
    FAIL() << "allocated more than the arena holds";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shared arena has no"), std::string::npos) << e.what();
  }
}

TEST(ArenaTest, MovedBufferFreesOnce) {
  SharedBuffer a(4096);
  std::byte* p = a.data();
  SharedBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.data(), p);
  b = SharedBuffer(8192);
  const SharedBuffer c(4096);
  EXPECT_EQ(c.data(), p);  // the first block, freed by the assignment, is free again
}

// The child writes through a mapping of the parent's arena taken with its descriptor, and gets
// an arena of its own (the parent's is not mapped there).
TEST(ArenaTest, AForkedChildMapsTheParentsArenaAndHasItsOwn) {
  const SharedBuffer shared(4096);
  Arena& parent = Arena::instance();
  const std::int64_t at = offset_in(whole(parent), shared.data(), shared.size());
  const int parent_pid = ::getpid();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const PeerArena peer = PeerArena::map(parent_pid, parent.fd(), parent.capacity());
    if (peer.base() == nullptr) ::_exit(2);
    std::memcpy(peer.base() + at, "written by the child", 21);
    Arena& own = Arena::instance();
    std::byte* block = own.allocate(4096);
    block[0] = std::byte{1};  // mapped here
    own.free(block, 4096);
    ::_exit(&own != &parent ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "a ptrace policy forbids pidfd_getfd here";
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_STREQ(reinterpret_cast<const char*>(shared.data()), "written by the child");
}

TEST(ArenaTest, AnUnmappableArenaIsEmpty) {
  EXPECT_EQ(PeerArena::map(::getpid(), -1, 4096).base(), nullptr);
  EXPECT_EQ(PeerArena::map(::getpid(), Arena::instance().fd(), 4096).base(), nullptr);  // size
}

}  // namespace
}  // namespace weft::dist::shm
