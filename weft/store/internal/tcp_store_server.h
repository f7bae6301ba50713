// The server half of TCPStore: one thread that serves every client with poll(). Not public:
// a TCPStore with is_server = true owns one (tcp_store.h).
//
// Blocking requests (get, wait) never block the thread: the connection keeps a waiter with
// the client's deadline, answered when the keys arrive or with a kTimeout reply when the
// deadline passes. A client that breaks the protocol gets a kError frame and is
// disconnected; nothing it sends can affect the other clients. docs/STORES.md has the
// wire format.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "weft/base/deadline.h"
#include "weft/base/unique_fd.h"
#include "weft/net/auth.h"
#include "weft/net/socket.h"
#include "weft/store/internal/kv_table.h"
#include "weft/store/internal/wire.h"

namespace weft::store::internal {

class TCPStoreServer {
 public:
  // Binds host:port (0: a free port, see port()) and starts serving. Throws
  // weft::SystemError if the address cannot be bound.
  TCPStoreServer(const std::string& host, int port, std::string token);
  // Stops the thread and closes every connection; blocks only for that join.
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  int port() const { return port_; }

 private:
  struct Waiter {
    MsgType type;  // kGet or kWait
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };
  struct Challenge {
    net::Nonce client;
    net::Nonce server;
  };
  struct Conn {
    net::Socket socket;
    std::string in;  // the frame being received
    std::string out;
    std::size_t out_sent = 0;
    std::optional<Challenge> challenge;  // sent in answer to the hello
    bool authed = false;                 // the client's proof checked
    bool closing = false;                // an error was sent: drain input until EOF or `timer`
    bool write_shut = false;
    bool dead = false;
    std::optional<Waiter> waiter;
    Clock::time_point timer;  // hello deadline before authentication, drain deadline after
  };

  void run();
  short events(const Conn& c) const;
  int poll_millis() const;
  void wake_drain();
  void accept_all();
  void on_ready(Conn& c, short revents);
  void pump(Conn& c);
  bool read_frame(Conn& c, FrameHeader& header);
  void handle(Conn& c, MsgType type, std::string_view payload);
  void authenticate(Conn& c, MsgType type, PayloadReader& r);
  void handle_request(Conn& c, MsgType type, PayloadReader& r);
  void start_wait(Conn& c, MsgType type, std::vector<std::string> keys, std::int64_t millis);
  bool try_answer(Conn& c);
  void time_out(Conn& c);
  void reply(Conn& c, MsgType type, const std::string& payload);
  void fail(Conn& c, ErrorCode code, const std::string& why);
  void flush(Conn& c);
  void serve_waiters();
  void expire();
  static bool idle(const Conn& c);

  net::Listener listener_;
  int port_ = 0;
  UniqueFd wake_fd_;
  const std::string token_;
  std::atomic<bool> stop_{false};
  // Owned by the server thread once it runs.
  std::vector<std::unique_ptr<Conn>> conns_;
  KvTable table_;
  bool keys_changed_ = false;
  Clock::time_point accept_paused_until_{};
  std::thread thread_;  // last: starts after everything it uses exists
};

}  // namespace weft::store::internal
