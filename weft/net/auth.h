// Mutual proof that both ends of a connection hold the job token, without sending it:
// an HMAC-SHA256 challenge-response. Used by every connection a job opens (the store's and
// the tcp transport's), so that a process that does not hold the token can neither join
// the job nor pass itself off as one of its ranks.
//
//   dialer -> listener   nonce_d                       (16 random bytes)
//   listener -> dialer   nonce_l, HMAC(token, "listener" | context | nonce_d | nonce_l)
//   dialer -> listener   HMAC(token, "dialer" | context | nonce_d | nonce_l)
//
// Each side checks the other's MAC (in constant time) before going on. Fresh nonces from
// both ends stop replays; the role in the MAC stops a listener's answer being reflected back
// as a dialer's; `context` (the protocol and the ranks, say) binds the proof to the one
// connection it was made for. Wire format: docs/FORMATS.md.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "weft/base/deadline.h"
#include "weft/base/error.h"
#include "weft/net/socket.h"

namespace weft::net {

// The other end does not hold the token (or spoke something else than this protocol).
class AuthError : public weft::Error {
 public:
  using weft::Error::Error;
};

// The steps, for event loops that cannot block (the TCPStore server).
inline constexpr std::size_t kNonceBytes = 16;
inline constexpr std::size_t kMacBytes = 32;  // HMAC-SHA256
using Nonce = std::array<std::byte, kNonceBytes>;
using Mac = std::array<std::byte, kMacBytes>;
enum class Role { kDialer, kListener };

// 16 bytes from the system's random source (OpenSSL RAND_bytes).
Nonce fresh_nonce();
// HMAC(token, role | context | dialer | listener): what the side with `role` sends.
Mac token_mac(std::string_view token, Role role, std::string_view context, const Nonce& dialer,
              const Nonce& listener);
// Constant-time comparison.
bool same_mac(const Mac& a, const Mac& b);

// The connecting side. Throws AuthError when the listener's proof is wrong,
// ConnectionClosed when the listener hangs up (it refused ours), weft::TimeoutError.
void prove_token_as_dialer(Socket& socket, std::string_view token, std::string_view context,
                           Deadline deadline);

// The accepting side. Throws AuthError when the dialer's proof is wrong (the caller then
// closes the connection), ConnectionClosed, weft::TimeoutError.
void prove_token_as_listener(Socket& socket, std::string_view token, std::string_view context,
                             Deadline deadline);

}  // namespace weft::net
