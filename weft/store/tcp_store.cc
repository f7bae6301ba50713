#include "weft/store/tcp_store.h"

#include <chrono>

#include "weft/base/error.h"
#include "weft/net/auth.h"
#include "weft/store/internal/kv_table.h"
#include "weft/store/internal/tcp_store_server.h"
#include "weft/store/internal/wire.h"

namespace weft::store {
namespace {

using internal::ErrorCode;
using internal::Frame;
using internal::MsgType;
using internal::PayloadReader;
using internal::PayloadWriter;

// How long past a get's or wait's own timeout the client still waits for the server's
// answer (the server enforces that timeout) before deciding the server stopped answering.
constexpr Seconds kServerGrace{5};

std::int64_t to_millis(Clock::duration d) {
  return std::chrono::ceil<std::chrono::milliseconds>(d).count();
}

// The error a kError reply carries.
struct ServerError {
  ErrorCode code;
  std::string message;
};

ServerError read_error(PayloadReader& r) {
  const auto code = static_cast<ErrorCode>(r.u32());
  return {code, r.str()};
}

// Checks the reply's type and reads its payload with `read`; a reply that breaks the format
// becomes a weft::Error naming the server.
template <class Read>
auto decode_reply(const std::string& what, const std::string& address, const Frame& f, MsgType type,
                  Read read) {
  try {
    if (f.type != type) {
      throw internal::ProtocolError(
          ErrorCode::kMalformed, "reply of type " + std::to_string(static_cast<unsigned>(f.type)) +
                                     " where " + std::to_string(static_cast<unsigned>(type)) +
                                     " was expected");
    }
    PayloadReader r(f.payload);
    auto value = read(r);
    r.finish();
    return value;
  } catch (const internal::ProtocolError& e) {
    throw Error(what + ": the server at " + address + " sent a malformed reply: " + e.what());
  }
}

std::string read_str(PayloadReader& r) { return r.str(); }
std::int64_t read_i64(PayloadReader& r) { return r.i64(); }
std::vector<std::string> read_keys(PayloadReader& r) { return r.keys(); }
bool read_nothing(PayloadReader&) { return true; }

}  // namespace

TCPStore::TCPStore(TCPStoreOptions options) : options_(std::move(options)) {
  set_timeout(options_.timeout);
  if (options_.is_server) {
    server_ = std::make_unique<internal::TCPStoreServer>(options_.bind_host, options_.port,
                                                         options_.token);
    port_ = server_->port();
  } else {
    if (options_.port <= 0 || options_.port > 65535) {
      throw InvalidArgument("TCPStore: a client needs the server's port (1..65535), not " +
                            std::to_string(options_.port));
    }
    port_ = options_.port;
  }
  // Connecting now surfaces a missing server or a refused token here, not at first use.
  net::Socket first = connect(Deadline::after(timeout()));
  std::lock_guard lock(mu_);
  idle_.push_back(std::move(first));
}

// Out of line: the server's type is complete only here. Members go in reverse order, so this
// client's connections close before the server stops.
TCPStore::~TCPStore() = default;

std::string TCPStore::address() const {
  if (options_.host.find(':') != std::string::npos) {
    return "[" + options_.host + "]:" + std::to_string(port_);
  }
  return options_.host + ":" + std::to_string(port_);
}

// A new connection on which both ends have proved the job token (weft/net/auth.h's
// challenge-response, in the frames of internal/wire.h); the token never crosses the wire.
net::Socket TCPStore::connect(Deadline deadline) {
  net::Socket s;
  try {
    s = net::Socket::connect(options_.host, port_, deadline);
  } catch (const TimeoutError& e) {
    throw TimeoutError("TCPStore: no store server answered at " + address() + ": " + e.what());
  }
  const std::string what = "TCPStore: connecting to " + address();
  try {
    const net::Nonce ours = net::fresh_nonce();
    const Frame challenge =
        handshake_step(s, what, MsgType::kHello, PayloadWriter().bytes(ours).take(), deadline);
    const auto [theirs, server_mac] =
        decode_reply(what, address(), challenge, MsgType::kChallenge, [](PayloadReader& r) {
          std::pair<net::Nonce, net::Mac> fields;
          r.bytes(fields.first);
          r.bytes(fields.second);
          return fields;
        });
    const std::string_view token = options_.token;
    if (!net::same_mac(server_mac, net::token_mac(token, net::Role::kListener,
                                                  internal::kAuthContext, ours, theirs))) {
      throw Error(what +
                  ": wrong job token: the server proved a different token than this "
                  "client's (it belongs to another job, or the two were given different "
                  "tokens); give every rank the server's token (TCPStoreOptions::token)");
    }
    const net::Mac proof =
        net::token_mac(token, net::Role::kDialer, internal::kAuthContext, ours, theirs);
    const Frame ok =
        handshake_step(s, what, MsgType::kProof, PayloadWriter().bytes(proof).take(), deadline);
    decode_reply(what, address(), ok, MsgType::kOk, read_nothing);
  } catch (const TimeoutError& e) {
    throw TimeoutError(what + ": no answer to the hello (" + std::string(e.what()) +
                       "); is a weft TCPStore server listening there?");
  }
  return s;
}

// One frame of the token handshake and the server's answer; a refusal becomes weft::Error.
Frame TCPStore::handshake_step(net::Socket& s, const std::string& what, MsgType type,
                               const std::string& payload, Deadline deadline) {
  Frame reply;
  try {
    internal::send_frame(s, type, payload, deadline);
    reply = internal::recv_frame(s, deadline);
  } catch (const TimeoutError&) {
    throw;
  } catch (const Error& e) {
    throw Error(what + ": the hello exchange failed (" + std::string(e.what()) +
                "); is a weft TCPStore server of this version listening there?");
  }
  if (reply.type != MsgType::kError) return reply;
  const ServerError err = decode_reply(what, address(), reply, MsgType::kError, read_error);
  if (err.code == ErrorCode::kWrongToken) {
    throw Error(what +
                ": the server refused this client's wrong job token; give every "
                "rank the token the server was started with (TCPStoreOptions::token)");
  }
  throw Error(what + ": the server refused the connection: " + err.message);
}

net::Socket TCPStore::checkout(Deadline deadline) {
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      net::Socket s = std::move(idle_.back());
      idle_.pop_back();
      return s;
    }
  }
  return connect(deadline);
}

// One request and its reply, with the errors reworded to name the server. A connection
// whose exchange failed is dropped, since its stream may be out of step.
Frame TCPStore::call(const std::string& what, MsgType type, std::string payload,
                     std::optional<Seconds> wait) {
  try {
    return exchange(what, type, std::move(payload), wait);
  } catch (const net::ConnectionClosed& e) {
    throw net::ConnectionClosed(what + ": lost the connection to the TCPStore server at " +
                                address() + " (" + e.what() + "); the server has probably exited");
  } catch (const internal::ProtocolError& e) {
    throw Error(what + ": the server at " + address() + " sent a malformed reply: " + e.what());
  }
}

Frame TCPStore::exchange(const std::string& what, MsgType type, std::string payload,
                         std::optional<Seconds> wait) {
  internal::check_size(what, payload.size() + 8);  // + the i64 a get or wait appends
  const Deadline server_deadline = Deadline::after(wait.value_or(timeout()));
  const Deadline io_deadline = Deadline::after(wait ? *wait + kServerGrace : timeout());
  net::Socket s = checkout(io_deadline);
  // The server waits what is left of the caller's budget after connecting.
  if (wait) payload += PayloadWriter().i64(to_millis(server_deadline.remaining())).take();
  Frame reply;
  try {
    internal::send_frame(s, type, payload, io_deadline);
    reply = internal::recv_frame(s, io_deadline);
  } catch (const TimeoutError& e) {
    throw TimeoutError(what + ": the TCPStore server at " + address() +
                       " did not answer in time (" + e.what() +
                       "); it may be stopped or overloaded");
  }
  if (reply.type == MsgType::kError) {
    const ServerError err = decode_reply(what, address(), reply, MsgType::kError, read_error);
    if (err.code != ErrorCode::kInvalidArgument) {
      throw Error(what + ": the server at " + address() + " refused the request: " + err.message);
    }
    std::lock_guard lock(mu_);
    idle_.push_back(std::move(s));
    throw InvalidArgument(what + ": " + err.message);
  }
  std::lock_guard lock(mu_);
  idle_.push_back(std::move(s));
  return reply;
}

std::int64_t TCPStore::call_int(const std::string& what, MsgType type, std::string payload) {
  return decode_reply(what, address(), call(what, type, std::move(payload)), MsgType::kInt,
                      read_i64);
}

// A get or wait: the server answers with the value (kValue), kOk, or the missing keys.
std::string TCPStore::wait_for(const std::string& what, MsgType type, std::string payload,
                               const std::vector<std::string>& keys, Seconds wait) {
  const Frame reply = call(what, type, std::move(payload), wait);
  if (reply.type == MsgType::kTimeout) {
    const std::vector<std::string> missing =
        decode_reply(what, address(), reply, MsgType::kTimeout, read_keys);
    throw TimeoutError(
        internal::timeout_message(what + " (" + address() + ")", missing, keys.size(), wait));
  }
  if (type == MsgType::kGet) return decode_reply(what, address(), reply, MsgType::kValue, read_str);
  decode_reply(what, address(), reply, MsgType::kOk, read_nothing);
  return {};
}

void TCPStore::set(const std::string& key, const std::string& value) {
  const std::string what = "TCPStore::set";
  const Frame reply = call(what, MsgType::kSet, PayloadWriter().str(key).str(value).take());
  decode_reply(what, address(), reply, MsgType::kOk, read_nothing);
}

std::string TCPStore::get(const std::string& key) {
  return wait_for("TCPStore::get", MsgType::kGet, PayloadWriter().str(key).take(), {key},
                  timeout());
}

std::int64_t TCPStore::add(const std::string& key, std::int64_t delta) {
  return call_int("TCPStore::add", MsgType::kAdd, PayloadWriter().str(key).i64(delta).take());
}

std::string TCPStore::compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) {
  const std::string what = "TCPStore::compare_set";
  const Frame reply =
      call(what, MsgType::kCompareSet, PayloadWriter().str(key).str(expected).str(desired).take());
  return decode_reply(what, address(), reply, MsgType::kValue, read_str);
}

void TCPStore::wait(const std::vector<std::string>& keys, std::optional<Seconds> timeout) {
  wait_for("TCPStore::wait", MsgType::kWait, PayloadWriter().keys(keys).take(), keys,
           timeout.value_or(this->timeout()));
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  return call_int("TCPStore::check", MsgType::kCheck, PayloadWriter().keys(keys).take()) != 0;
}

bool TCPStore::delete_key(const std::string& key) {
  return call_int("TCPStore::delete_key", MsgType::kDeleteKey, PayloadWriter().str(key).take()) !=
         0;
}

std::int64_t TCPStore::num_keys() { return call_int("TCPStore::num_keys", MsgType::kNumKeys, ""); }

}  // namespace weft::store
