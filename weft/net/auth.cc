#include "weft/net/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>
#include <cstddef>
#include <string>

namespace weft::net {
namespace {

constexpr std::size_t kNonceBytes = 16;
constexpr std::size_t kMacBytes = 32;  // SHA-256
using Nonce = std::array<std::byte, kNonceBytes>;
using Mac = std::array<std::byte, kMacBytes>;

Nonce fresh_nonce() {
  Nonce nonce;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), kNonceBytes) != 1) {
    throw weft::Error("auth: the system's random source failed (OpenSSL RAND_bytes)");
  }
  return nonce;
}

Mac mac_of(std::string_view token, std::string_view role, std::string_view context,
           const Nonce& dialer, const Nonce& listener) {
  std::string message;
  message.reserve(role.size() + context.size() + 2 + 2 * kNonceBytes);
  message.append(role).push_back('\0');
  message.append(context).push_back('\0');
  message.append(reinterpret_cast<const char*>(dialer.data()), kNonceBytes);
  message.append(reinterpret_cast<const char*>(listener.data()), kNonceBytes);
  Mac mac;
  unsigned int length = 0;
  const unsigned char* ok =
      HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(),
           reinterpret_cast<unsigned char*>(mac.data()), &length);
  if (ok == nullptr || length != kMacBytes) throw weft::Error("auth: HMAC-SHA256 failed");
  return mac;
}

bool same(const Mac& a, const Mac& b) { return CRYPTO_memcmp(a.data(), b.data(), kMacBytes) == 0; }

}  // namespace

void prove_token_as_dialer(Socket& socket, std::string_view token, std::string_view context,
                           Deadline deadline) {
  const Nonce dialer = fresh_nonce();
  socket.send_all(dialer, deadline);
  Nonce listener;
  Mac their_mac;
  socket.recv_all(listener, deadline);
  socket.recv_all(their_mac, deadline);
  if (!same(their_mac, mac_of(token, "listener", context, dialer, listener))) {
    throw AuthError("auth: " + socket.peer_name() +
                    " does not hold this job's token: it belongs to another job, or is not a "
                    "weft process");
  }
  socket.send_all(mac_of(token, "dialer", context, dialer, listener), deadline);
}

void prove_token_as_listener(Socket& socket, std::string_view token, std::string_view context,
                             Deadline deadline) {
  Nonce dialer;
  socket.recv_all(dialer, deadline);
  const Nonce listener = fresh_nonce();
  socket.send_all(listener, deadline);
  socket.send_all(mac_of(token, "listener", context, dialer, listener), deadline);
  Mac their_mac;
  socket.recv_all(their_mac, deadline);
  if (!same(their_mac, mac_of(token, "dialer", context, dialer, listener))) {
    throw AuthError("auth: " + socket.peer_name() + " does not hold this job's token");
  }
}

}  // namespace weft::net
