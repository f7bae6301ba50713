#include "weft/store/internal/tcp_store_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <thread>

#include "weft/base/error.h"

namespace weft::store::internal {
namespace {

using namespace std::chrono_literals;

// Before its proof is checked, a client may not make the server buffer more than this (a
// hello is a 16-byte nonce, a proof a 32-byte MAC, each with a length prefix).
constexpr std::size_t kMaxHelloBytes = 64;
// A connection must prove the token within this time, so idle port scanners cannot pile up.
constexpr auto kHelloTimeout = 30s;
// After an error frame, how long the server reads and discards what the client still sends
// before closing: closing with unread input would reset the connection and could destroy
// the error frame before the client reads it.
constexpr auto kDrainTime = 2s;
// How long to stop accepting after accept() fails (out of descriptors), instead of spinning.
constexpr auto kAcceptPause = 100ms;
// The longest wait a client may ask for (about three years), so deadlines cannot overflow.
constexpr std::int64_t kMaxWaitMillis = std::int64_t{100'000'000'000};
constexpr std::size_t kReadChunk = 64 << 10;

}  // namespace

TCPStoreServer::TCPStoreServer(const std::string& host, int port, std::string token)
    : listener_(net::Listener::bind(host, port)),
      port_(listener_.port()),
      token_(std::move(token)) {
  wake_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_) throw SystemError("TCPStore server: eventfd", errno);
  thread_ = std::thread([this] { run(); });
}

TCPStoreServer::~TCPStoreServer() {
  stop_.store(true);
  const std::uint64_t one = 1;
  // A full counter (never in practice) still leaves the eventfd readable, which is enough.
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
  thread_.join();
}

void TCPStoreServer::run() {
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    const bool accepting = Clock::now() >= accept_paused_until_;
    const short listen_events = accepting ? POLLIN : 0;
    fds.assign({pollfd{wake_fd_.get(), POLLIN, 0}, pollfd{listener_.fd(), listen_events, 0}});
    for (const auto& c : conns_) fds.push_back(pollfd{c->socket.fd(), events(*c), 0});
    if (::poll(fds.data(), fds.size(), poll_millis()) < 0) {
      // EINTR, or a transient ENOMEM: try again shortly; throwing would end the process.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (fds[0].revents != 0) wake_drain();
    if (stop_.load()) break;
    // Connections accepted now are polled from the next round on: fds covers the old ones.
    const std::size_t polled = conns_.size();
    if (fds[1].revents != 0) accept_all();
    for (std::size_t i = 0; i < polled; ++i) {
      if (fds[i + 2].revents != 0) on_ready(*conns_[i], fds[i + 2].revents);
    }
    serve_waiters();
    expire();
    std::erase_if(conns_, [](const auto& c) { return c->dead; });
  }
  conns_.clear();
}

bool TCPStoreServer::idle(const Conn& c) {
  return !c.closing && !c.dead && !c.waiter && c.out_sent == c.out.size();
}

short TCPStoreServer::events(const Conn& c) const {
  const short out = c.out_sent < c.out.size() ? POLLOUT : short{0};
  // A busy connection is watched only for the peer hanging up, so a client cannot queue
  // requests behind one that waits; its next frame is read once the reply has gone out.
  if (c.closing || idle(c)) return POLLIN | POLLRDHUP | out;
  return POLLRDHUP | out;
}

int TCPStoreServer::poll_millis() const {
  Clock::time_point next = Clock::time_point::max();
  for (const auto& c : conns_) {
    if (c->waiter) next = std::min(next, c->waiter->deadline);
    if (c->closing || !c->authed) next = std::min(next, c->timer);
  }
  if (Clock::now() < accept_paused_until_) next = std::min(next, accept_paused_until_);
  if (next == Clock::time_point::max()) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, INT_MAX));
}

void TCPStoreServer::wake_drain() {
  std::uint64_t count;
  [[maybe_unused]] const ssize_t n = ::read(wake_fd_.get(), &count, sizeof(count));
}

void TCPStoreServer::accept_all() {
  while (true) {
    net::Socket s;
    try {
      s = listener_.try_accept();
    } catch (const SystemError&) {
      // Out of descriptors or memory: existing clients keep being served; new ones wait in
      // the backlog (their connect retries) until the pause ends.
      accept_paused_until_ = Clock::now() + kAcceptPause;
      return;
    }
    if (!s.valid()) return;
    auto c = std::make_unique<Conn>();
    c->socket = std::move(s);
    c->timer = Clock::now() + kHelloTimeout;
    conns_.push_back(std::move(c));
  }
}

void TCPStoreServer::on_ready(Conn& c, short revents) {
  try {
    if (revents & POLLOUT) flush(c);
    if (c.closing) {
      // Bounded per round, so a client that keeps sending cannot hold the thread.
      std::byte sink[kReadChunk];
      for (int i = 0; i < 16 && c.socket.recv_some(sink) > 0; ++i) {
      }
    } else if (idle(c)) {
      pump(c);
    } else if (revents & (POLLRDHUP | POLLHUP | POLLERR)) {
      c.dead = true;  // hung up while its request waits: nobody is left to answer
    }
  } catch (const std::exception&) {
    c.dead = true;  // as in pump: only this connection ends
  }
}

// Reads and handles frames while the connection is idle. Protocol errors end the
// connection with an error frame; the peer closing ends it silently.
void TCPStoreServer::pump(Conn& c) {
  try {
    FrameHeader header;
    while (idle(c) && read_frame(c, header)) {
      const std::string_view payload = std::string_view(c.in).substr(kHeaderBytes);
      check_crc(header, payload);
      handle(c, header.type, payload);
      c.in.clear();
    }
  } catch (const ProtocolError& e) {
    fail(c, e.code(), e.what());
  } catch (const std::exception&) {
    // The peer closed, an OS call failed, or memory ran out: this connection ends, the
    // server and every other client go on.
    c.dead = true;
  }
}

// Reads at most one frame into c.in: the header first, checked before the payload's
// length is trusted. True once a whole frame is buffered.
bool TCPStoreServer::read_frame(Conn& c, FrameHeader& header) {
  while (true) {
    std::size_t want = kHeaderBytes;
    if (c.in.size() >= kHeaderBytes) {
      header = decode_header(c.in);
      // Before its proof, a client is nobody: it may not make the server buffer more than a
      // hello's or a proof's worth.
      if (!c.authed && header.length > kMaxHelloBytes) {
        throw ProtocolError(ErrorCode::kHelloExpected,
                            "the first frames must be a hello and a token proof of at most " +
                                std::to_string(kMaxHelloBytes) + " bytes");
      }
      want += header.length;
    }
    if (c.in.size() == want) return true;
    const std::size_t old = c.in.size();
    c.in.resize(old + std::min(want - old, kReadChunk));
    const std::size_t n = c.socket.recv_some(std::as_writable_bytes(std::span(c.in)).subspan(old));
    c.in.resize(old + n);
    if (n == 0) return false;
  }
}

void TCPStoreServer::handle(Conn& c, MsgType type, std::string_view payload) {
  PayloadReader r(payload);
  if (!c.authed) return authenticate(c, type, r);
  try {
    handle_request(c, type, r);
  } catch (const InvalidArgument& e) {
    // The request was well formed; the operation failed. The connection stays usable.
    reply(c, MsgType::kError,
          PayloadWriter()
              .u32(static_cast<std::uint32_t>(ErrorCode::kInvalidArgument))
              .str(e.what())
              .take());
  }
}

// The listener's side of weft/net/auth.h's challenge-response, one frame at a time: the
// hello's nonce is answered with ours and our proof; the client's proof then admits it. With
// an empty token there is no secret to prove, so any proof is taken (anyone could compute it).
void TCPStoreServer::authenticate(Conn& c, MsgType type, PayloadReader& r) {
  if (!c.challenge) {
    if (type != MsgType::kHello) {
      throw ProtocolError(ErrorCode::kHelloExpected,
                          "the first frame on a connection must be a hello");
    }
    Challenge challenge{.client = {}, .server = net::fresh_nonce()};
    r.bytes(challenge.client);
    r.finish();
    const net::Mac ours = net::token_mac(token_, net::Role::kListener, kAuthContext,
                                         challenge.client, challenge.server);
    c.challenge = challenge;
    return reply(c, MsgType::kChallenge,
                 PayloadWriter().bytes(challenge.server).bytes(ours).take());
  }
  if (type != MsgType::kProof) {
    throw ProtocolError(ErrorCode::kHelloExpected,
                        "the second frame on a connection must be the client's token proof");
  }
  net::Mac theirs;
  r.bytes(theirs);
  r.finish();
  const net::Mac expected = net::token_mac(token_, net::Role::kDialer, kAuthContext,
                                           c.challenge->client, c.challenge->server);
  if (!token_.empty() && !net::same_mac(theirs, expected)) {
    throw ProtocolError(ErrorCode::kWrongToken,
                        "wrong job token: this store belongs to another job, or the client was "
                        "given a different token than the server");
  }
  c.authed = true;
  reply(c, MsgType::kOk, {});
}

void TCPStoreServer::handle_request(Conn& c, MsgType type, PayloadReader& r) {
  switch (type) {
    case MsgType::kSet: {
      std::string key = r.str(), value = r.str();
      r.finish();
      table_.set(key, std::move(value));
      keys_changed_ = true;
      return reply(c, MsgType::kOk, {});
    }
    case MsgType::kGet: {
      std::string key = r.str();
      const std::int64_t millis = r.i64();
      r.finish();
      return start_wait(c, type, {std::move(key)}, millis);
    }
    case MsgType::kWait: {
      std::vector<std::string> keys = r.keys();
      const std::int64_t millis = r.i64();
      r.finish();
      return start_wait(c, type, std::move(keys), millis);
    }
    case MsgType::kAdd: {
      const std::string key = r.str();
      const std::int64_t delta = r.i64();
      r.finish();
      const std::int64_t sum = table_.add(key, delta);
      keys_changed_ = true;
      return reply(c, MsgType::kInt, PayloadWriter().i64(sum).take());
    }
    case MsgType::kCompareSet: {
      std::string key = r.str(), expected = r.str(), desired = r.str();
      r.finish();
      const std::string now = table_.compare_set(key, expected, std::move(desired));
      keys_changed_ = true;
      return reply(c, MsgType::kValue, PayloadWriter().str(now).take());
    }
    case MsgType::kCheck: {
      const std::vector<std::string> keys = r.keys();
      r.finish();
      return reply(c, MsgType::kInt, PayloadWriter().i64(table_.missing(keys).empty()).take());
    }
    case MsgType::kDeleteKey: {
      const std::string key = r.str();
      r.finish();
      return reply(c, MsgType::kInt, PayloadWriter().i64(table_.erase(key)).take());
    }
    case MsgType::kNumKeys:
      r.finish();
      return reply(c, MsgType::kInt, PayloadWriter().i64(table_.size()).take());
    default:
      throw ProtocolError(ErrorCode::kMalformed,
                          "unknown request type " + std::to_string(static_cast<unsigned>(type)));
  }
}

void TCPStoreServer::start_wait(Conn& c, MsgType type, std::vector<std::string> keys,
                                std::int64_t millis) {
  millis = std::clamp<std::int64_t>(millis, 0, kMaxWaitMillis);
  c.waiter = Waiter{type, std::move(keys), Clock::now() + std::chrono::milliseconds(millis)};
  if (!try_answer(c) && millis == 0) time_out(c);
}

void TCPStoreServer::time_out(Conn& c) {
  const std::vector<std::string> missing = table_.missing(c.waiter->keys);
  c.waiter.reset();
  reply(c, MsgType::kTimeout, PayloadWriter().keys(missing).take());
}

// Answers c's waiter if its keys are all present.
bool TCPStoreServer::try_answer(Conn& c) {
  const Waiter& w = *c.waiter;
  if (!table_.missing(w.keys).empty()) return false;
  const std::string payload =
      w.type == MsgType::kGet ? PayloadWriter().str(*table_.find(w.keys[0])).take() : "";
  const MsgType type = w.type == MsgType::kGet ? MsgType::kValue : MsgType::kOk;
  c.waiter.reset();
  reply(c, type, payload);
  return true;
}

void TCPStoreServer::reply(Conn& c, MsgType type, const std::string& payload) {
  c.out += encode_frame(type, payload);
  flush(c);
}

void TCPStoreServer::fail(Conn& c, ErrorCode code, const std::string& why) {
  c.in.clear();
  c.waiter.reset();
  c.closing = true;
  c.timer = Clock::now() + kDrainTime;
  c.out += encode_frame(MsgType::kError,
                        PayloadWriter().u32(static_cast<std::uint32_t>(code)).str(why).take());
  flush(c);
}

// Sends what the socket takes now. A peer that went away marks the connection dead here,
// so that callers need not care whether a reply could be delivered.
void TCPStoreServer::flush(Conn& c) {
  while (c.out_sent < c.out.size()) {
    std::size_t n = 0;
    try {
      n = c.socket.send_some(std::as_bytes(std::span(c.out)).subspan(c.out_sent));
    } catch (const Error&) {  // net::ConnectionClosed or weft::SystemError
      c.dead = true;
      return;
    }
    if (n == 0) return;  // the socket buffer is full; poll() says when to go on
    c.out_sent += n;
  }
  c.out.clear();
  c.out_sent = 0;
  if (c.closing && !c.write_shut) {
    // End of file after the error frame tells the client there is nothing more to read.
    ::shutdown(c.socket.fd(), SHUT_WR);
    c.write_shut = true;
  }
}

void TCPStoreServer::serve_waiters() {
  // Answering frees a connection to handle its next request, which may set more keys.
  while (keys_changed_) {
    keys_changed_ = false;
    for (const auto& c : conns_) {
      if (c->waiter && !c->dead && try_answer(*c) && idle(*c)) pump(*c);
    }
  }
}

void TCPStoreServer::expire() {
  const Clock::time_point now = Clock::now();
  for (const auto& c : conns_) {
    if (c->dead) continue;
    if (c->closing) {
      if (now >= c->timer) c->dead = true;
    } else if (!c->authed && now >= c->timer) {
      fail(*c, ErrorCode::kHelloExpected, "no hello within the allowed time");
    } else if (c->waiter && now >= c->waiter->deadline) {
      time_out(*c);
      if (idle(*c)) pump(*c);
    }
  }
}

}  // namespace weft::store::internal
