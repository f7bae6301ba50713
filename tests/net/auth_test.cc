// The token challenge-response (weft/net/auth.h) on a socket pair: both sides accept only
// when both hold the token; a proof is bound to its role, its context and its nonces.
#include "weft/net/auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <exception>
#include <string>
#include <thread>

namespace weft::net {
namespace {

using namespace std::chrono_literals;
using testing::HasSubstr;

struct Outcome {
  std::exception_ptr dialer;
  std::exception_ptr listener;
};

// Runs both sides over a connected socket pair, each with its own token and context.
Outcome handshake(const std::string& dialer_token, const std::string& listener_token,
                  const std::string& dialer_context = "ctx",
                  const std::string& listener_context = "ctx") {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  Socket d(fds[0]), l(fds[1]);
  Outcome out;
  std::thread listener([&] {
    try {
      prove_token_as_listener(l, listener_token, listener_context, Deadline::after(5s));
    } catch (...) {
      out.listener = std::current_exception();
      l.shutdown();  // as the callers do: a refused peer is hung up on
    }
  });
  try {
    prove_token_as_dialer(d, dialer_token, dialer_context, Deadline::after(5s));
  } catch (...) {
    out.dialer = std::current_exception();
    d.shutdown();
  }
  listener.join();
  return out;
}

void expect_auth_error(const std::exception_ptr& e) {
  ASSERT_TRUE(e);
  EXPECT_THROW(std::rethrow_exception(e), AuthError);
}

TEST(AuthTest, SameTokenIsAcceptedByBothSides) {
  const Outcome out = handshake("job-token", "job-token");
  EXPECT_FALSE(out.dialer);
  EXPECT_FALSE(out.listener);
}

TEST(AuthTest, DifferentTokensAreRefused) {
  // The dialer checks the listener's proof first, so it is the one that refuses; the
  // listener sees it hang up.
  const Outcome out = handshake("mine", "theirs");
  expect_auth_error(out.dialer);
  ASSERT_TRUE(out.listener);
  EXPECT_THROW(std::rethrow_exception(out.listener), ConnectionClosed);
}

TEST(AuthTest, ProofIsBoundToItsContext) {
  expect_auth_error(handshake("t", "t", "store", "rank 1 to rank 2").dialer);
}

TEST(AuthTest, MacDependsOnRoleNoncesAndToken) {
  const Nonce a = fresh_nonce(), b = fresh_nonce();
  EXPECT_NE(a, b);
  const Mac base = token_mac("t", Role::kDialer, "c", a, b);
  EXPECT_TRUE(same_mac(base, token_mac("t", Role::kDialer, "c", a, b)));
  EXPECT_FALSE(same_mac(base, token_mac("t", Role::kListener, "c", a, b)));  // reflection
  EXPECT_FALSE(same_mac(base, token_mac("t", Role::kDialer, "c", b, a)));
  EXPECT_FALSE(same_mac(base, token_mac("t", Role::kDialer, "c", a, fresh_nonce())));  // replay
  EXPECT_FALSE(same_mac(base, token_mac("u", Role::kDialer, "c", a, b)));
  EXPECT_FALSE(same_mac(base, token_mac("t", Role::kDialer, "d", a, b)));
}

TEST(AuthTest, ErrorNamesWhatWentWrong) {
  const Outcome out = handshake("mine", "theirs");
  try {
    std::rethrow_exception(out.dialer);
  } catch (const AuthError& e) {
    EXPECT_THAT(e.what(), HasSubstr("does not hold this job's token"));
  }
}

}  // namespace
}  // namespace weft::net
