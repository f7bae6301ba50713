// TCPStore: a Store served over TCP by one process (the rank with is_server = true) to all
// the others, for jobs that span machines. As torch.distributed.TCPStore.
//
//   TCPStore server({.port = 0, .is_server = true, .token = job_token});  // also a client
//   TCPStore client({.host = "10.0.0.1", .port = server_port, .token = job_token});
//
// The server is one thread serving every client with poll() (docs/STORES.md): get and wait
// park on the server with the caller's deadline and are answered when the keys arrive, so a
// waiting client never holds up the others.
//
// Closed by default: each connection starts with a challenge-response in which client and
// server each prove they hold `token` without sending it (HMAC-SHA256, weft/net/auth.h).
// When the proofs do not match, the connection is refused and the client throws weft::Error
// ("wrong job token"): a client without the token never reads or writes a key, and a client
// with it refuses a server without it. The proof keeps out strays, other jobs and whoever
// only listens; it does not bind the channel, so an active relay in the middle could pass
// both proofs on (nothing after the proof is encrypted). A server with an empty token takes
// any client.
//
// Thread-safety: every member may be called from any thread. Concurrent calls use separate
// connections (a small pool, grown on demand), so a get blocking in one thread does not
// delay a set in another.
//
// Blocking and errors:
//   - The constructor connects once, retrying until timeout; weft::TimeoutError names
//     host:port if no server answers by then, weft::Error if the token is refused,
//     weft::SystemError if the server cannot bind bind_host:port.
//   - Every call is bounded: get and wait by their timeout (the server answers, and the
//     TimeoutError names the missing keys) plus a few seconds of grace should the server
//     itself stop answering; the other calls by the store's timeout. A server that is gone
//     makes calls throw net::ConnectionClosed (or, once no pooled connection is left,
//     weft::TimeoutError) naming host:port.
//   - Requests over 64 MiB of keys and values throw weft::InvalidArgument; add on a value
//     that is not an integer throws weft::InvalidArgument (the connection stays usable).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "weft/net/socket.h"
#include "weft/store/store.h"

namespace weft::store {

namespace internal {
class TCPStoreServer;
struct Frame;
enum class MsgType : std::uint16_t;
}  // namespace internal

struct TCPStoreOptions {
  // Where clients connect (the server's own client too).
  std::string host = "127.0.0.1";
  // The server's port; with is_server, 0 picks a free one (see TCPStore::port()).
  int port = 0;
  bool is_server = false;
  // The address the server listens on; "0.0.0.0" (or "::") to accept other machines.
  std::string bind_host = "127.0.0.1";
  // The job token both ends prove they hold; empty on the server accepts any client.
  std::string token;
  Seconds timeout = kDefaultStoreTimeout;
};

class TCPStore : public Store {
 public:
  explicit TCPStore(TCPStoreOptions options);
  // Closes this client's connections; with is_server, stops the server (other clients'
  // calls then fail) and joins its thread.
  ~TCPStore() override;
  TCPStore(const TCPStore&) = delete;
  TCPStore& operator=(const TCPStore&) = delete;

  // The server's port: the one picked when options.port was 0 on the server.
  int port() const { return port_; }
  // "host:port" clients connect to, as error messages name it.
  std::string address() const;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys,
            std::optional<Seconds> timeout = std::nullopt) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  std::int64_t num_keys() override;

 private:
  net::Socket connect(Deadline deadline);
  internal::Frame handshake_step(net::Socket& s, const std::string& what, internal::MsgType type,
                                 const std::string& payload, Deadline deadline);
  net::Socket checkout(Deadline deadline);
  internal::Frame call(const std::string& what, internal::MsgType type, std::string payload,
                       std::optional<Seconds> wait = std::nullopt);
  internal::Frame exchange(const std::string& what, internal::MsgType type, std::string payload,
                           std::optional<Seconds> wait);
  std::int64_t call_int(const std::string& what, internal::MsgType type, std::string payload);
  std::string wait_for(const std::string& what, internal::MsgType type, std::string payload,
                       const std::vector<std::string>& keys, Seconds wait);

  const TCPStoreOptions options_;
  std::unique_ptr<internal::TCPStoreServer> server_;  // with is_server only
  int port_ = 0;
  std::mutex mu_;
  std::vector<net::Socket> idle_;  // connections not in use; guarded by mu_
};

}  // namespace weft::store
