// The shm engine's choice of slot stores, fed made-up timings, and the vector and streaming
// copies against memcpy on every SIMD target.
#include "weft/dist/shm/slot_stores.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "tests/support/simd_targets.h"
#include "weft/dist/shm/vector_copy.h"

namespace weft::dist::shm {
namespace {

constexpr std::size_t kBytes = std::size_t{1} << 20;

// Runs `calls` operations of kBytes whose time is `ns_per_byte(streaming)`; returns how many
// of them streamed.
template <class Cost>
int run(SlotStores& stores, int calls, const Cost& ns_per_byte) {
  int streamed = 0;
  for (int i = 0; i < calls; ++i) {
    const SlotStores::Choice choice = stores.choose(Op::broadcast, kBytes);
    EXPECT_TRUE(choice.timed);
    streamed += choice.streaming ? 1 : 0;
    stores.record(choice, std::chrono::nanoseconds(
                              static_cast<long>(ns_per_byte(choice.streaming) * kBytes)));
  }
  return streamed;
}

TEST(SlotStoresTest, SmallOperationsUseOrdinaryStoresUntimed) {
  SlotStores stores;
  for (int i = 0; i < 40; ++i) {
    const SlotStores::Choice choice = stores.choose(Op::all_reduce, SlotStores::kMinBytes - 1);
    EXPECT_FALSE(choice.streaming);
    EXPECT_FALSE(choice.timed);
  }
}

TEST(SlotStoresTest, TriesBothThenKeepsTheQuickerExploringTheOther) {
  SlotStores stores;
  for (std::uint32_t call = 0; call < SlotStores::kProbeCalls; ++call) {
    const SlotStores::Choice choice = stores.choose(Op::broadcast, kBytes);
    EXPECT_EQ(choice.streaming, call % 2 == 1);  // alternating
    // The first streaming call is slow (as if something else ran): the quicker of the two
    // streaming calls counts.
    stores.record(choice, std::chrono::nanoseconds((call == 1 ? 8 : call == 3 ? 1 : 4) * kBytes));
  }
  // Streaming is 4x quicker: it is kept, with one ordinary call in every kExploreEvery.
  const int calls = 4 * static_cast<int>(SlotStores::kExploreEvery) - 4;
  const int streamed = run(stores, calls, [](bool s) { return s ? 1.0 : 4.0; });
  EXPECT_EQ(streamed, calls - 3);
}

TEST(SlotStoresTest, FollowsTheMachineWhenItChanges) {
  SlotStores stores;
  const int calls = 8 * static_cast<int>(SlotStores::kExploreEvery);
  run(stores, calls, [](bool s) { return s ? 1.0 : 4.0; });
  // The vCPUs move: ordinary stores become the quicker. Within a few explorations the choice
  // follows; afterwards only explorations stream.
  run(stores, calls, [](bool s) { return s ? 1.4 : 1.0; });
  EXPECT_EQ(run(stores, calls, [](bool s) { return s ? 1.4 : 1.0; }), 8);
}

TEST(SlotStoresTest, OneSlowCallDoesNotSwitch) {
  SlotStores stores;
  const int calls = 2 * static_cast<int>(SlotStores::kExploreEvery);
  run(stores, calls, [](bool s) { return s ? 1.0 : 2.0; });
  int call = 0;  // one preempted streaming call, 10x its time
  const int streamed =
      run(stores, calls, [&](bool s) { return s ? (++call == 3 ? 10.0 : 1.0) : 2.0; });
  EXPECT_EQ(streamed, calls - 2);
}

TEST(SlotStoresTest, ClassesAreKeptApartByOperationSizeAndAlgorithm) {
  SlotStores stores;
  run(stores, 40, [](bool s) { return s ? 1.0 : 4.0; });              // broadcasts of 1 MiB stream
  EXPECT_FALSE(stores.choose(Op::broadcast, 64 * kBytes).streaming);  // a new class: ordinary
  EXPECT_FALSE(stores.choose(Op::all_gather, kBytes).streaming);
  EXPECT_FALSE(stores.choose(Op::broadcast, kBytes, /*in_place=*/true).streaming);
}

TEST(SlotStoresTest, AThrownOperationIsNotRecorded) {
  SlotStores stores;
  for (std::uint32_t call = 0; call < SlotStores::kProbeCalls; ++call) {
    const SlotStores::Choice choice = stores.choose(Op::broadcast, kBytes);
    EXPECT_EQ(choice.streaming, call % 2 == 1);
    if (choice.streaming) stores.record(choice, std::chrono::nanoseconds(kBytes));  // others throw
  }
  // The ordinary store has no time: the streaming one is kept (bar explorations).
  for (int i = 4; i < 30; ++i) {
    const SlotStores::Choice choice = stores.choose(Op::broadcast, kBytes);
    EXPECT_TRUE(choice.streaming) << "call " << i;
    stores.record(choice, std::chrono::nanoseconds(kBytes));
  }
}

class CopyTest : public weft::testing::OnEveryTarget {};
WEFT_ON_EVERY_TARGET(CopyTest);

TEST_P(CopyTest, VectorAndStreamingCopiesCopyLikeMemcpyAtEveryAlignmentAndLength) {
  std::vector<std::byte> src(4096 + 256), dst(4096 + 256), expect(4096 + 256);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 7 + 3);
  for (const auto copy : {&vector_copy, &stream_copy}) {
    for (std::size_t offset : {0, 1, 7, 31, 63, 64}) {
      for (std::size_t bytes : {0, 1, 63, 64, 65, 127, 128, 1000, 4096}) {
        std::memset(dst.data(), 0, dst.size());
        std::memset(expect.data(), 0, expect.size());
        std::memcpy(expect.data() + offset, src.data() + 3, bytes);
        copy(dst.data() + offset, src.data() + 3, bytes);
        ASSERT_EQ(dst, expect) << (copy == &vector_copy ? "vector" : "stream") << " offset "
                               << offset << " bytes " << bytes;
      }
    }
  }
}

}  // namespace
}  // namespace weft::dist::shm
