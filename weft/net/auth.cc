#include "weft/net/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>
#include <cstddef>
#include <string>

namespace weft::net {
Nonce fresh_nonce() {
  Nonce nonce;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), kNonceBytes) != 1) {
    throw weft::Error("auth: the system's random source failed (OpenSSL RAND_bytes)");
  }
  return nonce;
}

Mac token_mac(std::string_view token, Role role, std::string_view context, const Nonce& dialer,
              const Nonce& listener) {
  const std::string_view name = role == Role::kDialer ? "dialer" : "listener";
  std::string message;
  message.reserve(name.size() + context.size() + 2 + 2 * kNonceBytes);
  message.append(name).push_back('\0');
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

bool same_mac(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), kMacBytes) == 0;
}

void prove_token_as_dialer(Socket& socket, std::string_view token, std::string_view context,
                           Deadline deadline) {
  const Nonce dialer = fresh_nonce();
  socket.send_all(dialer, deadline);
  Nonce listener;
  Mac their_mac;
  socket.recv_all(listener, deadline);
  socket.recv_all(their_mac, deadline);
  if (!same_mac(their_mac, token_mac(token, Role::kListener, context, dialer, listener))) {
    throw AuthError("auth: " + socket.peer_name() +
                    " does not hold this job's token: it belongs to another job, or is not a "
                    "weft process");
  }
  socket.send_all(token_mac(token, Role::kDialer, context, dialer, listener), deadline);
}

void prove_token_as_listener(Socket& socket, std::string_view token, std::string_view context,
                             Deadline deadline) {
  Nonce dialer;
  socket.recv_all(dialer, deadline);
  const Nonce listener = fresh_nonce();
  socket.send_all(listener, deadline);
  socket.send_all(token_mac(token, Role::kListener, context, dialer, listener), deadline);
  Mac their_mac;
  socket.recv_all(their_mac, deadline);
  if (!same_mac(their_mac, token_mac(token, Role::kDialer, context, dialer, listener))) {
    throw AuthError("auth: " + socket.peer_name() + " does not hold this job's token");
  }
}

}  // namespace weft::net
