// libFuzzer target: the tcp transport's frame decoder, fed arbitrary bytes as the whole
// stream of one peer connection after its handshake. Each input gets a fresh transport
// (rank 0 of 2) over a socket pair: the fuzzer writes the input as rank 1 and closes its
// side, then rank 0 receives 8-byte messages under tags 1-3 and an empty one under tag 4.
// Every receive must return a message or fail with PeerError (a malformed frame, a closed
// connection, a size mismatch, an abort frame), within a second: the connection is closed,
// so nothing is left to wait for. Seeds: tests/fuzz/corpus/tcp_frame_fuzz (make_tcp_seeds.py).
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "weft/dist/tcp/tcp_transport.h"
#include "weft/net/socket.h"

namespace {

using weft::Deadline;
using weft::Seconds;

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "tcp_frame_fuzz: %s\n", why.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) fail("socketpair failed");
  std::vector<weft::net::Socket> peers(2);
  peers[1] = weft::net::Socket(fds[0]);
  weft::net::Socket fuzzer(fds[1]);
  weft::dist::TcpTransport transport(0, std::move(peers));
  try {
    fuzzer.send_all({reinterpret_cast<const std::byte*>(data), size}, Deadline::after(Seconds(1)));
  } catch (const weft::net::ConnectionClosed&) {
    // The transport closed the connection part-way: a malformed frame.
  } catch (const weft::TimeoutError&) {
    fail("the transport stopped reading a connection that was still sending");
  }
  ::shutdown(fuzzer.fd(), SHUT_WR);
  for (weft::dist::Tag tag = 1; tag <= 4; ++tag) {
    std::vector<std::byte> out(tag == 4 ? 0 : 8);
    try {
      transport.recv(1, tag, out, Deadline::after(Seconds(1)));
    } catch (const weft::dist::PeerTimeout&) {
      fail("a receive waited on a closed connection");
    } catch (const weft::dist::PeerError&) {
      // Expected for most inputs: the message says why.
    }
  }
  return 0;
}
