// libFuzzer target: both sides of the tcp transport's handshake (weft/net/auth.h and the
// hello of weft/dist/tcp/tcp_handshake.h), fed arbitrary bytes as the other side's
// whole stream over a socket pair. The first byte picks the side: even, this process is the
// listening rank 0 of 4 and the input is a dialer's hello and proof; odd, this process dials
// and the input is a listener's nonce, proof and ack. Neither may accept a peer: the input
// cannot hold an HMAC over the fresh nonce this side just drew. Each must give up within a
// second once the input ends. Seeds: tests/fuzz/corpus/tcp_handshake_fuzz (make_tcp_seeds.py).
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

#include "weft/dist/tcp/tcp_handshake.h"
#include "weft/net/auth.h"
#include "weft/net/socket.h"

namespace {

using weft::Deadline;
using weft::Seconds;

constexpr const char* kToken = "fuzz-token";

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "tcp_handshake_fuzz: %s\n", why.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) fail("socketpair failed");
  weft::net::Socket ours(fds[0]);
  weft::net::Socket fuzzer(fds[1]);
  try {
    fuzzer.send_all({reinterpret_cast<const std::byte*>(data + 1), size - 1},
                    Deadline::after(Seconds(1)));
  } catch (const weft::Error&) {
    return 0;  // more than the socket pair buffers: not an interesting handshake
  }
  ::shutdown(fuzzer.fd(), SHUT_WR);
  const Deadline deadline = Deadline::after(Seconds(1));
  if (data[0] % 2 == 0) {
    const int peer = weft::dist::tcp::accept_peer(ours, 0, 4, kToken, deadline);
    if (peer >= 0) fail("a dialer without the token was accepted as rank " + std::to_string(peer));
    return 0;
  }
  try {
    weft::net::prove_token_as_dialer(ours, kToken, weft::dist::tcp::auth_context(2, 0, 4),
                                     deadline);
    fail("a listener without the token was trusted");
  } catch (const weft::net::AuthError&) {
  } catch (const weft::net::ConnectionClosed&) {
  } catch (const weft::TimeoutError&) {
    fail("the dialer waited on a closed connection");
  }
  return 0;
}
