// Building the tcp transport's mesh: every rank listens, publishes its address in the job's
// store, dials every lower rank and accepts every higher one. Each connection opens with a
// hello (who is dialing, for which job size) and the token proof of weft/net/auth.h; only
// then is it a peer connection. Wire format: docs/COLLECTIVES.md, "The tcp transport".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/base/deadline.h"
#include "weft/net/socket.h"
#include "weft/store/store.h"

namespace weft::dist {
struct TcpTransportOptions;
}

namespace weft::dist::tcp {

constexpr std::uint32_t kHelloMagic = 0x48544657;  // "WFTH"
constexpr std::uint32_t kAckMagic = 0x41544657;    // "WFTA"
constexpr std::uint32_t kVersion = 2;

// Sent by the dialing (higher) rank right after connecting.
struct Hello {
  std::uint32_t magic = kHelloMagic;
  std::uint32_t version = kVersion;
  std::int32_t rank = 0;        // the dialer's
  std::int32_t world_size = 0;  // the job's, as the dialer sees it
};

// Empty when `hello` may come from a rank higher than `rank` of this job; else what is
// wrong with it.
std::string check_hello(const Hello& hello, int rank, int world_size);

// What both ends of the connection between `dialer` and `listener` prove their token for.
std::string auth_context(int dialer, int listener, int world_size);

// The listening side of one connection: reads the hello and runs the token proof within
// `deadline`. Returns the dialer's rank, or -1 when the connection is not a peer of this job
// (a stray, a wrong token, a malformed hello); the caller then drops it.
int accept_peer(net::Socket& socket, int rank, int world_size, const std::string& token,
                Deadline deadline);

// Connects `rank` with every other rank: result[p] is the connection to p (result[rank] is
// invalid). Throws weft::TimeoutError naming the ranks that did not connect in time, and
// PeerError when a lower rank refuses this one or does not hold the token.
std::vector<net::Socket> connect_mesh(int rank, int world_size, store::Store& store,
                                      const TcpTransportOptions& options, Deadline deadline);

}  // namespace weft::dist::tcp
