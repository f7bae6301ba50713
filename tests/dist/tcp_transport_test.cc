// The tcp transport on its own: the mesh and its token proof, messages cut in segments,
// receives posted before and after their message, malformed frames, and the difference
// between a peer that is slow (heartbeats keep coming: PeerTimeout) and one that is gone
// (nothing for 2 s: PeerError).
#include "weft/dist/tcp/tcp_transport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <future>
#include <numeric>
#include <thread>

#include "tests/dist/transport_checks.h"
#include "weft/dist/tcp/tcp_frame.h"
#include "weft/store/tcp_store.h"

namespace weft::dist {
namespace {

using testing::HasSubstr;
using namespace testing_transport;

std::shared_ptr<store::Store> new_store() {
  return std::make_shared<store::TCPStore>(
      store::TCPStoreOptions{.port = 0, .is_server = true, .timeout = Seconds(10)});
}

// Builds a mesh of `n` transports in threads, with each rank's token.
std::vector<std::unique_ptr<TcpTransport>> mesh(int n, const std::vector<std::string>& tokens,
                                                Seconds timeout = Seconds(10)) {
  auto store = new_store();
  std::vector<std::future<std::unique_ptr<TcpTransport>>> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.push_back(std::async(std::launch::async, [=] {
      return std::make_unique<TcpTransport>(
          r, n, store, TcpTransportOptions{.token = tokens[r], .connect_timeout = timeout});
    }));
  }
  std::vector<std::unique_ptr<TcpTransport>> out;
  for (auto& r : ranks) out.push_back(r.get());
  return out;
}

// Two transports joined by a socket pair (no handshake), or one and the raw other end.
struct Pair {
  std::unique_ptr<TcpTransport> a;
  net::Socket raw;
};

Pair transport_and_raw_socket() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  std::vector<net::Socket> peers(2);
  peers[1] = net::Socket(fds[0]);
  return {std::make_unique<TcpTransport>(0, std::move(peers)), net::Socket(fds[1])};
}

TEST(TcpTransportTest, MeshCarriesMessagesLargerThanASegmentBothWays) {
  auto t = mesh(2, {"tok", "tok"});
  check_both_send_first(*t[0], *t[1], 3 * tcp::kMaxSegment + 17);
}

TEST(TcpTransportTest, SendRecvAroundARingDeliversEveryRound) {
  auto t = mesh(3, {"tok", "tok", "tok"});
  for (std::size_t n : {std::size_t{100}, 2 * tcp::kMaxSegment + 5}) {
    check_send_recv_around_a_ring({t[0].get(), t[1].get(), t[2].get()}, n);
  }
}

TEST(TcpTransportTest, ThreadsSendingToOnePeerTakeTurnsBySegment) {
  auto t = mesh(2, {"", ""});
  const auto big = pattern(4 * tcp::kMaxSegment, 3);
  auto sender = std::async(std::launch::async, [&] { t[0]->send(1, 1, big, soon()); });
  for (int i = 0; i < 20; ++i) {
    const auto small = pattern(8, i);
    t[0]->send(1, 100 + i, small, soon());
  }
  sender.get();
  // Received in the other order than sent: the tags keep them apart.
  for (int i = 19; i >= 0; --i) {
    std::vector<std::byte> got(8);
    t[1]->recv(0, 100 + i, got, soon());
    EXPECT_EQ(got, pattern(8, i));
  }
  std::vector<std::byte> got(big.size());
  t[1]->recv(0, 1, got, soon());
  EXPECT_EQ(got, big);
}

TEST(TcpTransportTest, MessagesUnderOneTagArriveInOrderAndRecvAnyFindsThem) {
  auto t = mesh(3, {"", "", ""});
  check_order_and_recv_any(*t[0], *t[1], *t[2]);
}

TEST(TcpTransportTest, AWrongTokenIsRefusedWithoutSendingIt) {
  auto store = new_store();
  auto rank0 = std::async(std::launch::async, [&] {
    return std::make_unique<TcpTransport>(
        0, 2, store, TcpTransportOptions{.token = "right", .connect_timeout = Seconds(3)});
  });
  try {
    TcpTransport rank1(1, 2, store, {.token = "wrong", .connect_timeout = Seconds(3)});
    FAIL() << "a rank with the wrong token joined";
  } catch (const PeerError& e) {
    EXPECT_THAT(e.what(), HasSubstr("token"));
  }
  EXPECT_THROW(rank0.get(), weft::TimeoutError);  // rank 0 never got a peer it could trust
}

TEST(TcpTransportTest, SizeMismatchIsAPeerErrorNamingBothSizes) {
  auto t = mesh(2, {"", ""});
  check_size_mismatch_names_both(*t[0], *t[1], 12, 8);
}

TEST(TcpTransportTest, AMalformedFrameClosesThatConnectionWithAClearError) {
  Pair p = transport_and_raw_socket();
  tcp::FrameHeader bad{.kind = 0, .tag = 1, .total = 8, .offset = 0, .length = 1 << 30};
  p.raw.send_all({reinterpret_cast<const std::byte*>(&bad), sizeof bad}, soon());
  std::vector<std::byte> got(8);
  try {
    p.a->recv(1, 1, got, soon());
    FAIL();
  } catch (const PeerError& e) {
    EXPECT_THAT(e.what(), HasSubstr("malformed frame"));
  }
}

TEST(TcpTransportTest, AKilledPeerFailsAPostedReceiveAtOnce) {
  auto t = mesh(2, {"", ""});
  auto waiting = std::async(std::launch::async, [&] {
    std::vector<std::byte> got(8);
    t[0]->recv(1, 1, got, Deadline::after(Seconds(30)));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = Clock::now();
  t[1].reset();  // closes its connections, as a killed process's kernel does
  try {
    waiting.get();
    FAIL();
  } catch (const PeerError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 1 closed its connection"));
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
}

// A receive from a raw socket that never sends, not even heartbeats, with this timeout:
// a PeerError saying the peer went quiet, never a PeerTimeout.
void expect_silence_is_a_peer_error(Seconds timeout) {
  Pair silent = transport_and_raw_socket();
  std::vector<std::byte> got(8);
  try {
    silent.a->recv(1, 1, got, Deadline::after(timeout));
    FAIL();
  } catch (const PeerTimeout&) {
    FAIL() << "a peer silent since before the deadline should be a PeerError";
  } catch (const PeerError& e) {
    EXPECT_THAT(e.what(), HasSubstr("has sent nothing for"));
  }
}

TEST(TcpTransportTest, ASilentPeerIsGoneButASlowOneOnlyTimesOut) {
  // After 2 s of silence the peer is gone.
  expect_silence_is_a_peer_error(Seconds(2.5));
  // Quiet for less than 2 s when the deadline passes: the receive waits until the silence
  // tells a lost peer from a slow one, no longer than the deadline plus 2 s.
  const auto start = Clock::now();
  expect_silence_is_a_peer_error(Seconds(0.3));
  EXPECT_LT(Clock::now() - start, Seconds(0.3 + 2 + 1));  // 1 s of slack for a busy machine
  // A live transport that does not send still heartbeats: a plain timeout.
  auto t = mesh(2, {"", ""});
  std::vector<std::byte> got(8);
  EXPECT_THROW(t[0]->recv(1, 1, got, Deadline::after(Seconds(2.5))), PeerTimeout);
}

TEST(TcpTransportTest, AbortReachesThePeersWithItsReason) {
  auto t = mesh(3, {"", "", ""});
  t[2]->abort("rank 2 ran out of memory");
  for (int r : {0, 1}) {
    std::vector<std::byte> got(8);
    try {
      t[r]->recv(2, 1, got, soon());
      FAIL();
    } catch (const PeerError& e) {
      EXPECT_THAT(e.what(), HasSubstr("rank 2 ran out of memory"));
    }
  }
}

TEST(TcpTransportTest, ListensOnIPv6Loopback) {
  auto store = new_store();
  const TcpTransportOptions v6{.listen_host = "::1", .connect_timeout = Seconds(10)};
  auto rank0 = std::async(std::launch::async,
                          [&] { return std::make_unique<TcpTransport>(0, 2, store, v6); });
  TcpTransport rank1(1, 2, store, v6);
  auto rank0_transport = rank0.get();
  rank1.send(0, 1, pattern(64, 5), soon());
  std::vector<std::byte> got(64);
  rank0_transport->recv(1, 1, got, soon());
  EXPECT_EQ(got, pattern(64, 5));
}

// Connections that stay silent or send half a hello hold up nobody: each handshake runs on its
// own, and past the bounds (64 pending, 16 from one address) the oldest pending one is closed.
TEST(TcpTransportTest, SilentAndWrongConnectionsDoNotDelayTheRanks) {
  auto store = new_store();
  const TcpTransportOptions options{.token = "t", .connect_timeout = Seconds(20)};
  auto rank0 = std::async(std::launch::async,
                          [&] { return std::make_unique<TcpTransport>(0, 3, store, options); });
  const std::string addr = store->get("tcp/addr/0");
  const auto colon = addr.rfind(':');
  const std::string host = addr.substr(0, colon);
  const int port = std::stoi(addr.substr(colon + 1));
  std::vector<net::Socket> strays;
  for (int i = 0; i < 80; ++i) {
    strays.push_back(net::Socket::connect(host, port, soon()));
    if (i % 4 == 0) strays.back().send_all(pattern(7, i), soon());  // half a hello
  }
  const auto start = Clock::now();
  auto rank1 = std::async(std::launch::async,
                          [&] { return std::make_unique<TcpTransport>(1, 3, store, options); });
  TcpTransport rank2(2, 3, store, options);
  auto t0 = rank0.get();
  auto t1 = rank1.get();
  // One at a time, the first silent connection alone held the listener for 5 s.
  EXPECT_LT(Clock::now() - start, Seconds(4));
  rank2.send(0, 1, pattern(64, 5), soon());
  std::vector<std::byte> got(64);
  t0->recv(2, 1, got, soon());
  EXPECT_EQ(got, pattern(64, 5));
}

}  // namespace
}  // namespace weft::dist
