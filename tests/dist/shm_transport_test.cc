// The shm transport on its own, its ranks as threads of one process over one store: sends
// that stay eager past a full ring while nobody receives, receiving threads that drain the
// rings for each other, order under one tag, recv_any, and an abort that reaches a rank
// waiting in a receive.
#include "weft/dist/shm/shm_transport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "tests/dist/transport_checks.h"
#include "weft/store/hash_store.h"

namespace weft::dist {
namespace {

using testing::HasSubstr;
using namespace testing_transport;

std::vector<std::unique_ptr<ShmTransport>> ranks(int n, std::size_t ring_bytes = 1 << 20) {
  auto store = std::make_shared<store::HashStore>();
  std::vector<std::future<std::unique_ptr<ShmTransport>>> made;
  for (int r = 0; r < n; ++r) {
    made.push_back(std::async(std::launch::async, [=] {
      return std::make_unique<ShmTransport>(
          r, n, store,
          ShmTransportOptions{.ring_bytes = ring_bytes, .connect_timeout = Seconds(10)});
    }));
  }
  std::vector<std::unique_ptr<ShmTransport>> out;
  for (auto& r : made) out.push_back(r.get());
  return out;
}

TEST(ShmTransportTest, SendsPastAFullRingReturnWhileNobodyReceives) {
  auto t = ranks(2, 4096);
  // Ten times the ring, in messages the receiver takes only after every send has returned:
  // its drain thread empties the ring as the sender fills it.
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(t[0]->sends_at_once(1, 100) || i > 0);
    t[0]->send(1, 4, pattern(3000, i), soon());
  }
  EXPECT_FALSE(t[0]->sends_at_once(1, 5000));  // more than the ring holds
  for (int i = 0; i < 10; ++i) {
    std::vector<std::byte> got(3000);
    t[1]->recv(0, 4, got, soon());
    EXPECT_EQ(got, pattern(3000, i)) << i;
  }
}

TEST(ShmTransportTest, MessagesLargerThanTheRingCrossBothWays) {
  auto t = ranks(2, 4096);
  check_both_send_first(*t[0], *t[1], 100'000);
}

// send_recv posts its receive before it sends; messages larger than the ring and ones taken
// from the mailbox (below the size a receive is posted for) both arrive.
TEST(ShmTransportTest, SendRecvAroundARingDeliversEveryRound) {
  auto t = ranks(3, 64 << 10);
  for (std::size_t n : {std::size_t{100}, std::size_t{300'000}}) {
    check_send_recv_around_a_ring({t[0].get(), t[1].get(), t[2].get()}, n);
  }
}

// Each receiving thread drains whatever is in the rings, the other's messages included; the
// other must then be woken to take them, else it would sleep out its deadline.
TEST(ShmTransportTest, ThreadsReceivingUnderTheirOwnTagsEachGetTheirMessages) {
  auto t = ranks(2);
  constexpr int kRounds = 2000;
  const auto receive_all = [&](Tag tag) {
    for (int i = 0; i < kRounds; ++i) {
      std::vector<std::byte> got(16);
      t[1]->recv(0, tag, got, soon());
      ASSERT_EQ(got, pattern(16, i)) << "tag " << tag << " message " << i;
    }
  };
  auto a = std::async(std::launch::async, receive_all, Tag{1});
  auto b = std::async(std::launch::async, receive_all, Tag{2});
  for (int i = 0; i < kRounds; ++i) {
    // Now and then long enough for both receivers to go to sleep on the doorbell.
    if (i % 200 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
    t[0]->send(1, 2, pattern(16, i), soon());  // the other thread's first
    t[0]->send(1, 1, pattern(16, i), soon());
  }
  a.get();
  b.get();
}

// Large messages go straight into a receive that waits for them, or through the mailbox when
// they arrive first (the sender outran the receiver and the ring filled): either way, in order.
TEST(ShmTransportTest, LargeMessagesUnderOneTagArriveInOrderByEitherPath) {
  auto t = ranks(2, 8192);
  constexpr int kMessages = 60;
  constexpr std::size_t kBytes = 20'000;
  auto sender = std::async(std::launch::async, [&] {
    for (int i = 0; i < kMessages; ++i) t[0]->send(1, 5, pattern(kBytes, i), soon());
  });
  for (int i = 0; i < kMessages; ++i) {
    if (i % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::vector<std::byte> got(kBytes);
    t[1]->recv(0, 5, got, soon());
    ASSERT_EQ(got, pattern(kBytes, i)) << "message " << i;
  }
  sender.get();
}

// A mismatched message stays where it is: each case on ranks of its own.
TEST(ShmTransportTest, SizeMismatchesAreAPeerErrorNamingBothSizes) {
  auto small = ranks(2);
  check_size_mismatch_names_both(*small[0], *small[1], 12, 8);  // through the mailbox
  auto large = ranks(2);
  check_size_mismatch_names_both(*large[0], *large[1], 40'000, 50'000);  // a posted receive
}

TEST(ShmTransportTest, RecvAnyTakesEachSenderInTurnAndOneTagInOrder) {
  auto t = ranks(3);
  check_order_and_recv_any(*t[0], *t[1], *t[2]);
}

TEST(ShmTransportTest, AnAbortEndsAReceiveOnTheOtherRankAtOnce) {
  auto t = ranks(2);
  auto waiting = std::async(std::launch::async, [&] {
    std::vector<std::byte> got(8);
    const auto start = Clock::now();
    try {
      t[1]->recv(0, 3, got, Deadline::after(Seconds(30)));
      ADD_FAILURE() << "the receive returned";
    } catch (const PeerError& e) {
      EXPECT_THAT(e.what(), HasSubstr("rank 0 gave up"));
    }
    return Clock::now() - start;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the receiver sleeps by now
  t[0]->abort("rank 0 gave up");
  EXPECT_LT(waiting.get(), Seconds(5));
}

TEST(ShmTransportTest, AReceiveThatGetsNothingTimesOutNamingThePeer) {
  auto t = ranks(2);
  std::vector<std::byte> got(8);
  try {
    t[1]->recv(0, 3, got, Deadline::after(std::chrono::milliseconds(300)));
    FAIL();
  } catch (const PeerTimeout& e) {
    EXPECT_EQ(e.peer(), 0);
    EXPECT_THAT(e.what(), HasSubstr("rank 0"));
  }
}

}  // namespace
}  // namespace weft::dist
