// TCPStore beyond the shared Store contract (store_test.cc): the job token's proof, clients that
// break the protocol, and servers that are missing or gone.
#include "weft/store/tcp_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "weft/net/auth.h"
#include "weft/net/socket.h"
#include "weft/store/internal/wire.h"

namespace weft::store {
namespace {

using namespace std::chrono_literals;
using internal::ErrorCode;
using internal::MsgType;
using internal::PayloadWriter;
using testing::HasSubstr;

TCPStoreOptions server_options(std::string token = "job-1") {
  return {.is_server = true, .token = std::move(token), .timeout = 10s};
}

std::unique_ptr<TCPStore> client_of(const TCPStore& server, std::string token = "job-1") {
  return std::make_unique<TCPStore>(
      TCPStoreOptions{.port = server.port(), .token = std::move(token), .timeout = 10s});
}

net::Socket raw_connect(const TCPStore& server) {
  return net::Socket::connect("127.0.0.1", server.port(), Deadline::after(5s));
}

void send_raw(net::Socket& s, const std::string& bytes) {
  s.send_all(std::as_bytes(std::span(bytes)), Deadline::after(5s));
}

std::string hello(const net::Nonce& nonce) {
  return internal::encode_frame(MsgType::kHello, PayloadWriter().bytes(nonce).take());
}

std::string proof(const net::Mac& mac) {
  return internal::encode_frame(MsgType::kProof, PayloadWriter().bytes(mac).take());
}

// The server's nonce, from its answer to a hello.
net::Nonce read_challenge(net::Socket& s) {
  const internal::Frame f = internal::recv_frame(s, Deadline::after(5s));
  EXPECT_EQ(f.type, MsgType::kChallenge);
  internal::PayloadReader r(f.payload);
  net::Nonce server;
  net::Mac mac;
  r.bytes(server);
  r.bytes(mac);
  r.finish();
  return server;
}

// The client's proof of `token` for the nonces of one connection.
net::Mac proof_of(const std::string& token, const net::Nonce& client, const net::Nonce& server) {
  return net::token_mac(token, net::Role::kDialer, internal::kAuthContext, client, server);
}

// A raw connection through the token handshake, ready for requests.
net::Socket authed_connect(const TCPStore& server, const std::string& token = "job-1") {
  net::Socket s = raw_connect(server);
  const net::Nonce ours = net::fresh_nonce();
  send_raw(s, hello(ours));
  send_raw(s, proof(proof_of(token, ours, read_challenge(s))));
  EXPECT_EQ(internal::recv_frame(s, Deadline::after(5s)).type, MsgType::kOk);
  return s;
}

// Expects an error frame with `code`, then end of file: the server closed the connection.
void expect_error_then_close(net::Socket& s, ErrorCode code) {
  const internal::Frame f = internal::recv_frame(s, Deadline::after(5s));
  ASSERT_EQ(f.type, MsgType::kError);
  internal::PayloadReader r(f.payload);
  EXPECT_EQ(static_cast<ErrorCode>(r.u32()), code) << r.str();
  std::byte one[1];
  EXPECT_THROW(s.recv_all(one, Deadline::after(5s)), net::ConnectionClosed);
}

// The server still serves a well-behaved client.
void expect_still_serving(const TCPStore& server, const std::string& token = "job-1") {
  auto c = client_of(server, token);
  c->set("alive", "yes");
  EXPECT_EQ(c->get("alive"), "yes");
}

TEST(TCPStoreTest, ServerPicksAPortAndClientsShareData) {
  TCPStore server(server_options());
  EXPECT_GT(server.port(), 0);
  auto client = client_of(server);
  EXPECT_EQ(client->port(), server.port());
  EXPECT_EQ(client->address(), "127.0.0.1:" + std::to_string(server.port()));
  server.set("from", "server");
  EXPECT_EQ(client->get("from"), "server");
}

TEST(TCPStoreTest, WrongTokenIsRejected) {
  TCPStore server(server_options("right"));
  for (const std::string token : {"wrong", ""}) {
    try {
      client_of(server, token);
      FAIL() << "expected weft::Error for token '" << token << "'";
    } catch (const TimeoutError&) {
      FAIL() << "a refused token must not look like a timeout";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("wrong job token"));
    }
  }
  expect_still_serving(server, "right");
}

TEST(TCPStoreTest, ServerWithoutTokenTakesAnyProofButClientsWithOneRefuseIt) {
  TCPStore server(server_options(""));
  client_of(server, "")->set("k", "v");
  EXPECT_EQ(server.get("k"), "v");
  authed_connect(server, "anything");  // the server checks nothing: there is no secret
  // A client with a token wants a server that proves it.
  EXPECT_THAT([&] { client_of(server, "whatever"); },
              testing::ThrowsMessage<Error>(HasSubstr("wrong job token")));
}

TEST(TCPStoreTest, RawClientWithWrongTokenCannotReadKeys) {
  TCPStore server(server_options("right"));
  server.set("secret", "s3cr3t");
  net::Socket s = raw_connect(server);
  const net::Nonce ours = net::fresh_nonce();
  send_raw(s, hello(ours));
  const net::Nonce theirs = read_challenge(s);
  // A request right behind the refused proof must not be answered.
  send_raw(s,
           proof(proof_of("wrong", ours, theirs)) +
               internal::encode_frame(MsgType::kGet, PayloadWriter().str("secret").i64(0).take()));
  expect_error_then_close(s, ErrorCode::kWrongToken);
}

TEST(TCPStoreTest, ProofFromAnotherConnectionIsRefused) {
  TCPStore server(server_options("right"));
  net::Socket first = raw_connect(server);
  const net::Nonce ours = net::fresh_nonce();
  send_raw(first, hello(ours));
  const net::Nonce first_nonce = read_challenge(first);
  // A replay: the same client nonce on a second connection, answered with the first one's
  // proof. The server's fresh nonce makes it worthless.
  net::Socket second = raw_connect(server);
  send_raw(second, hello(ours));
  read_challenge(second);
  send_raw(second, proof(proof_of("right", ours, first_nonce)));
  expect_error_then_close(second, ErrorCode::kWrongToken);
}

TEST(TCPStoreTest, TokenNeverCrossesTheWireAndAServerWithoutItIsRefused) {
  const std::string token = "secret-token-0123456789";
  net::Listener impostor = net::Listener::bind();
  std::thread client([&] {
    EXPECT_THAT([&] { TCPStore({.port = impostor.port(), .token = token, .timeout = 5s}); },
                testing::ThrowsMessage<Error>(HasSubstr("wrong job token")));
  });
  net::Socket s = impostor.accept(Deadline::after(5s));
  const internal::Frame hello_frame = internal::recv_frame(s, Deadline::after(5s));
  EXPECT_EQ(hello_frame.type, MsgType::kHello);
  EXPECT_EQ(hello_frame.payload.find(token), std::string::npos);
  // An answer without the token: a guessed MAC.
  send_raw(s, internal::encode_frame(
                  MsgType::kChallenge,
                  PayloadWriter().bytes(net::fresh_nonce()).bytes(net::Mac{}).take()));
  client.join();
  // The client hung up without sending its proof.
  EXPECT_THROW(internal::recv_frame(s, Deadline::after(5s)), net::ConnectionClosed);
}

TEST(TCPStoreTest, SecondHelloInsteadOfTheProofIsRejected) {
  TCPStore server(server_options());
  net::Socket s = raw_connect(server);
  send_raw(s, hello(net::fresh_nonce()));
  read_challenge(s);
  send_raw(s, hello(net::fresh_nonce()));
  expect_error_then_close(s, ErrorCode::kHelloExpected);
  expect_still_serving(server);
}

TEST(TCPStoreTest, ProofBeforeHelloIsRejected) {
  TCPStore server(server_options());
  net::Socket s = raw_connect(server);
  send_raw(s, proof(net::Mac{}));
  expect_error_then_close(s, ErrorCode::kHelloExpected);
}

TEST(TCPStoreTest, RequestBeforeHelloIsRejected) {
  TCPStore server(server_options());
  net::Socket s = raw_connect(server);
  send_raw(s, internal::encode_frame(MsgType::kNumKeys, ""));
  expect_error_then_close(s, ErrorCode::kHelloExpected);
}

TEST(TCPStoreTest, GarbageIsRejectedWhileOthersKeepWorking) {
  TCPStore server(server_options());
  auto waiter = client_of(server);
  std::thread blocked([&] { EXPECT_EQ(waiter->get("after-garbage"), "ok"); });
  net::Socket s = raw_connect(server);
  send_raw(s, std::string(100, '\xab'));
  expect_error_then_close(s, ErrorCode::kMalformed);
  expect_still_serving(server);
  server.set("after-garbage", "ok");
  blocked.join();
}

TEST(TCPStoreTest, BadMagicIsRejected) {
  TCPStore server(server_options());
  net::Socket s = raw_connect(server);
  std::string frame = hello(net::fresh_nonce());
  frame[0] = 'X';
  send_raw(s, frame);
  expect_error_then_close(s, ErrorCode::kMalformed);
  expect_still_serving(server);
}

TEST(TCPStoreTest, OversizedLengthIsRejectedBeforeAllocating) {
  TCPStore server(server_options());
  net::Socket s = authed_connect(server);
  std::string header = internal::encode_frame(MsgType::kSet, "");
  const std::uint32_t huge = 0xF0000000u;  // 3.75 GiB, never sent
  for (int i = 0; i < 4; ++i) header[8 + i] = static_cast<char>((huge >> (8 * i)) & 0xff);
  send_raw(s, header);
  expect_error_then_close(s, ErrorCode::kTooLarge);
  expect_still_serving(server);
}

TEST(TCPStoreTest, BadChecksumUnknownTypeAndShortPayloadAreRejected) {
  TCPStore server(server_options());
  std::string bad_crc = internal::encode_frame(MsgType::kNumKeys, "x");
  bad_crc[12] ^= 1;
  const std::string unknown = internal::encode_frame(static_cast<MsgType>(77), "");
  // A key length that runs past the end of the payload.
  const std::string short_payload =
      internal::encode_frame(MsgType::kSet, PayloadWriter().u32(1000).take());
  const std::string wrong_version = [] {
    std::string f = internal::encode_frame(MsgType::kNumKeys, "");
    f[4] = 9;
    return f;
  }();
  const std::pair<std::string, ErrorCode> cases[] = {{bad_crc, ErrorCode::kMalformed},
                                                     {unknown, ErrorCode::kMalformed},
                                                     {short_payload, ErrorCode::kMalformed},
                                                     {wrong_version, ErrorCode::kBadVersion}};
  for (const auto& [frame, code] : cases) {
    net::Socket s = authed_connect(server);
    send_raw(s, frame);
    expect_error_then_close(s, code);
  }
  expect_still_serving(server);
}

TEST(TCPStoreTest, StalledHalfFrameDoesNotBlockOthers) {
  TCPStore server(server_options());
  net::Socket s = raw_connect(server);
  send_raw(s, hello(net::fresh_nonce()).substr(0, 10));  // and then nothing
  const auto start = Clock::now();
  expect_still_serving(server);
  EXPECT_LT(Clock::now() - start, 1s);
}

TEST(TCPStoreTest, NoServerTimesOutNamingTheAddress) {
  int port = 0;
  {
    net::Listener l = net::Listener::bind();
    port = l.port();
  }
  const auto start = Clock::now();
  try {
    TCPStore client({.port = port, .timeout = 500ms});
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("127.0.0.1:" + std::to_string(port)));
  }
  EXPECT_GE(Clock::now() - start, 500ms);
  EXPECT_LT(Clock::now() - start, 1500ms);
}

TEST(TCPStoreTest, ServerGoneFailsWithTheAddress) {
  auto server = std::make_unique<TCPStore>(server_options());
  auto client = client_of(*server);
  const std::string address = client->address();
  client->set("k", "v");
  server.reset();
  const auto start = Clock::now();
  try {
    client->get("k");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(address));
  }
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST(TCPStoreTest, WaitingClientDoesNotBlockOthers) {
  TCPStore server(server_options());
  auto a = client_of(server);
  std::thread waiting([&] { a->wait({"late"}, 10s); });
  auto b = client_of(server);
  const auto start = Clock::now();
  for (int i = 0; i < 200; ++i) b->add("busy", 1);
  EXPECT_LT(Clock::now() - start, 2s);
  b->set("late", "");
  waiting.join();
}

TEST(TCPStoreTest, LargeValuesRoundTripAndOversizedOnesAreRefused) {
  TCPStore server(server_options());
  auto client = client_of(server);
  std::string big(8 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  client->set("big", big);
  EXPECT_EQ(server.get("big"), big);
  EXPECT_THROW(client->set("huge", std::string((64 << 20) + 1, 'x')), InvalidArgument);
  expect_still_serving(server);
}

TEST(TCPStoreTest, ClientNeedsAPort) { EXPECT_THROW(TCPStore({.port = 0}), InvalidArgument); }

}  // namespace
}  // namespace weft::store
