#include "weft/net/socket.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

namespace weft::net {
namespace {

using namespace std::chrono_literals;
using testing::HasSubstr;

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s)); }

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return v;
}

// A port on which nothing listens (it was free a moment ago).
int closed_port() {
  Listener l = Listener::bind();
  return l.port();
}

TEST(SocketTest, LoopbackEcho) {
  Listener listener = Listener::bind();
  ASSERT_GT(listener.port(), 0);
  std::thread server([&] {
    Socket s = listener.accept(Deadline::after(5s));
    std::string buf(5, '\0');
    s.recv_all(std::as_writable_bytes(std::span(buf)), Deadline::after(5s));
    s.send_all(bytes_of(buf), Deadline::after(5s));
  });
  Socket c = Socket::connect("127.0.0.1", listener.port(), Deadline::after(5s));
  EXPECT_THAT(c.peer_name(), HasSubstr("127.0.0.1:" + std::to_string(listener.port())));
  c.send_all(bytes_of("hello"), Deadline::after(5s));
  std::string echo(5, '\0');
  c.recv_all(std::as_writable_bytes(std::span(echo)), Deadline::after(5s));
  EXPECT_EQ(echo, "hello");
  server.join();
}

TEST(SocketTest, ConnectsByHostName) {
  Listener listener = Listener::bind();
  Socket c = Socket::connect("localhost", listener.port(), Deadline::after(5s));
  EXPECT_TRUE(c.valid());
  EXPECT_TRUE(listener.accept(Deadline::after(5s)).valid());
}

TEST(SocketTest, LargeTransfersBothWays) {
  constexpr std::size_t kBytes = 24 << 20;  // larger than any socket buffer
  Listener listener = Listener::bind();
  const std::vector<std::byte> up = pattern(kBytes, 1), down = pattern(kBytes, 2);
  std::vector<std::byte> got_up(kBytes), got_down(kBytes);
  std::thread server([&] {
    Socket s = listener.accept(Deadline::after(10s));
    // Both sides send and receive at once: neither may wait for the other to read first.
    std::thread sender([&] { s.send_all(down, Deadline::after(30s)); });
    s.recv_all(got_up, Deadline::after(30s));
    sender.join();
  });
  Socket c = Socket::connect("127.0.0.1", listener.port(), Deadline::after(10s));
  std::thread sender([&] { c.send_all(up, Deadline::after(30s)); });
  c.recv_all(got_down, Deadline::after(30s));
  sender.join();
  server.join();
  EXPECT_TRUE(got_up == up);
  EXPECT_TRUE(got_down == down);
}

TEST(SocketTest, ConnectRetriesUntilAListenerAppears) {
  const int port = closed_port();
  std::thread late([port] {
    std::this_thread::sleep_for(200ms);
    Listener l = Listener::bind("127.0.0.1", port);
    l.accept(Deadline::after(5s));
  });
  const auto start = Clock::now();
  Socket c = Socket::connect("127.0.0.1", port, Deadline::after(5s));
  EXPECT_TRUE(c.valid());
  EXPECT_GE(Clock::now() - start, 150ms);
  late.join();
}

TEST(SocketTest, ConnectToClosedPortTimesOutNamingTheAddress) {
  const int port = closed_port();
  const auto start = Clock::now();
  try {
    Socket::connect("127.0.0.1", port, Deadline::after(300ms));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("127.0.0.1:" + std::to_string(port)));
    EXPECT_THAT(e.what(), HasSubstr("refused"));
  }
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 800ms);
}

TEST(SocketTest, RecvOnClosedPeerThrowsConnectionClosed) {
  Listener listener = Listener::bind();
  Socket c = Socket::connect("127.0.0.1", listener.port(), Deadline::after(5s));
  {
    Socket s = listener.accept(Deadline::after(5s));
    s.send_all(bytes_of("abc"), Deadline::after(5s));
  }  // closed after sending 3 of the 8 bytes the client wants
  std::vector<std::byte> buf(8);
  try {
    c.recv_all(buf, Deadline::after(5s));
    FAIL() << "expected ConnectionClosed";
  } catch (const ConnectionClosed& e) {
    EXPECT_THAT(e.what(), HasSubstr("5 of 8"));
  }
}

TEST(SocketTest, SendToClosedPeerThrowsConnectionClosed) {
  Listener listener = Listener::bind();
  Socket c = Socket::connect("127.0.0.1", listener.port(), Deadline::after(5s));
  listener.accept(Deadline::after(5s)).close();
  const std::vector<std::byte> chunk = pattern(1 << 16, 3);
  // The first writes may still be accepted; the peer's reset makes a later one fail.
  EXPECT_THROW(
      {
        for (int i = 0; i < 1000; ++i) {
          c.send_all(chunk, Deadline::after(5s));
          std::this_thread::sleep_for(1ms);
        }
      },
      ConnectionClosed);
}

TEST(SocketTest, RecvTimesOut) {
  Listener listener = Listener::bind();
  Socket c = Socket::connect("127.0.0.1", listener.port(), Deadline::after(5s));
  Socket s = listener.accept(Deadline::after(5s));
  std::vector<std::byte> buf(4);
  const auto start = Clock::now();
  EXPECT_THROW(c.recv_all(buf, Deadline::after(200ms)), TimeoutError);
  EXPECT_GE(Clock::now() - start, 200ms);
  EXPECT_LT(Clock::now() - start, 700ms);
}

TEST(SocketTest, ShutdownWakesABlockedReceiver) {
  Listener listener = Listener::bind();
  Socket c = Socket::connect("127.0.0.1", listener.port(), Deadline::after(5s));
  Socket s = listener.accept(Deadline::after(5s));
  std::thread reader([&] {
    std::vector<std::byte> buf(4);
    EXPECT_THROW(c.recv_all(buf, Deadline::after(10s)), ConnectionClosed);
  });
  std::this_thread::sleep_for(50ms);
  c.shutdown();
  reader.join();
}

TEST(SocketTest, AcceptTimesOut) {
  Listener listener = Listener::bind();
  const auto start = Clock::now();
  try {
    listener.accept(Deadline::after(150ms));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr(std::to_string(listener.port())));
  }
  EXPECT_GE(Clock::now() - start, 150ms);
  EXPECT_LT(Clock::now() - start, 650ms);
  EXPECT_FALSE(listener.try_accept().valid());
}

TEST(SocketTest, BindingABusyPortFailsWithTheAddress) {
  Listener first = Listener::bind();
  try {
    Listener::bind("127.0.0.1", first.port());
    FAIL() << "expected SystemError";
  } catch (const SystemError& e) {
    EXPECT_THAT(e.what(), HasSubstr("127.0.0.1:" + std::to_string(first.port())));
    EXPECT_EQ(e.error_code(), EADDRINUSE);
  }
}

TEST(SocketTest, BadPortsAreRejected) {
  EXPECT_THROW(Socket::connect("127.0.0.1", 0, Deadline::after(1s)), InvalidArgument);
  EXPECT_THROW(Socket::connect("127.0.0.1", 70000, Deadline::after(1s)), InvalidArgument);
  EXPECT_THROW(Listener::bind("127.0.0.1", -1), InvalidArgument);
}

TEST(SocketTest, MovedFromSocketIsInvalid) {
  Listener listener = Listener::bind();
  Socket a = Socket::connect("127.0.0.1", listener.port(), Deadline::after(5s));
  Socket b = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  EXPECT_TRUE(b.valid());
  EXPECT_THROW(a.send_all(bytes_of("x"), Deadline::after(1s)), InvalidArgument);
}

// The source address the routing table picks: loopback towards loopback, and an error that
// names a host that does not resolve.
TEST(SocketTest, LocalAddressTowardsAHost) {
  EXPECT_EQ(local_address_towards("127.0.0.1"), "127.0.0.1");
  const std::string local = local_address_towards("localhost");
  EXPECT_TRUE(local.rfind("127.", 0) == 0 || local == "::1") << local;
  EXPECT_THROW(local_address_towards("no-such-host.invalid"), InvalidArgument);
}

TEST(SocketTest, InterfaceAddress) {
  EXPECT_EQ(interface_address("lo"), "127.0.0.1");
  // The IPv6 one where asked for (where loopback has it), the IPv4 one where it has no other.
  const std::string v6 = interface_address("lo", /*prefer_ipv6=*/true);
  EXPECT_TRUE(v6 == "::1" || v6 == "127.0.0.1") << v6;
  try {
    interface_address("no-such-if0");
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("interfaces with one: lo"));
  }
}

}  // namespace
}  // namespace weft::net
