// libFuzzer target: the TCPStore server's request parser, fed arbitrary bytes over a real
// loopback connection (the server runs in this process, so AddressSanitizer and
// UndefinedBehaviorSanitizer see its parsing). Each input is one client's whole stream: the
// fuzzer sends it, closes its sending side and reads until the server closes the connection.
// The server must close within a second whatever it got (a client that stopped talking is
// done), and must keep serving well-behaved clients: every 64 inputs a client sets and gets a
// key. The server has no token, so that it takes any proof: an input cannot compute the
// HMAC for the server's fresh nonce, and would otherwise never get past the handshake to
// the request parser. Seeds: tests/fuzz/corpus/store_request_fuzz (make_store_seeds.py).
#include <poll.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>

#include "weft/net/socket.h"
#include "weft/store/tcp_store.h"

namespace {

using weft::Deadline;
using weft::Seconds;

weft::store::TCPStore& server() {
  static auto* store =
      new weft::store::TCPStore({.port = 0, .is_server = true, .timeout = Seconds(5)});
  return *store;
}

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "store_request_fuzz: %s\n", why.c_str());
  std::abort();
}

// Reads until the server closes, for at most a second.
void drain_until_closed(weft::net::Socket& socket) {
  const Deadline deadline = Deadline::after(Seconds(1));
  std::byte sink[4096];
  for (;;) {
    pollfd p{socket.fd(), POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.remaining());
    if (::poll(&p, 1, static_cast<int>(left.count())) == 0) {
      fail("the server neither replied nor closed within 1 s of the client's end of input");
    }
    try {
      socket.recv_some(sink);
    } catch (const weft::net::ConnectionClosed&) {
      return;
    }
  }
}

void check_server_serves() {
  weft::store::TCPStore client({.port = server().port(), .timeout = Seconds(5)});
  client.set("fuzz/alive", "yes");
  if (client.get("fuzz/alive") != "yes") fail("the server lost a key");
}

}  // namespace

// The server starts before the first input, so that its allocations are not taken for one
// input's leak.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  server();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static std::uint64_t inputs = 0;
  auto socket =
      weft::net::Socket::connect("127.0.0.1", server().port(), Deadline::after(Seconds(5)));
  try {
    socket.send_all({reinterpret_cast<const std::byte*>(data), size}, Deadline::after(Seconds(1)));
  } catch (const weft::net::ConnectionClosed&) {
    // The server refused a bad frame and closed before taking the rest: right.
  } catch (const weft::TimeoutError&) {
    // It stopped reading (a frame it will reject once complete): drain, then it closes.
  }
  ::shutdown(socket.fd(), SHUT_WR);
  drain_until_closed(socket);
  if (++inputs % 64 == 0) check_server_serves();
  return 0;
}
