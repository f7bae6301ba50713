// The Transport contract every transport's own test checks (transport.h): eager sends both
// ways, order under one tag, recv_any, and a size mismatch reported with both sizes. The
// transports come from the test (built in threads of one process).
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <future>
#include <string>
#include <vector>

#include "weft/dist/transport/transport.h"

namespace weft::dist::testing_transport {

inline std::vector<std::byte> pattern(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
  return v;
}

inline Deadline soon() { return Deadline::after(Seconds(10)); }

// Both send `n` bytes first, then receive: sends are eager, so neither waits for the other.
inline void check_both_send_first(Transport& a, Transport& b, std::size_t n) {
  std::vector<std::byte> got_a(n), got_b(n);
  auto other = std::async(std::launch::async, [&] {
    b.send(a.rank(), 7, pattern(n, 1), soon());
    b.recv(a.rank(), 7, got_b, soon());
  });
  a.send(b.rank(), 7, pattern(n, 0), soon());
  a.recv(b.rank(), 7, got_a, soon());
  other.get();
  EXPECT_EQ(got_a, pattern(n, 1));
  EXPECT_EQ(got_b, pattern(n, 0));
}

// Every rank send_recv()s `n` bytes to the next and from the previous at once, three rounds
// under one tag (a ring's steps): each gets its predecessor's message of that round.
inline void check_send_recv_around_a_ring(const std::vector<Transport*>& ts, std::size_t n) {
  const int size = static_cast<int>(ts.size());
  std::vector<std::future<void>> running;
  for (int r = 0; r < size; ++r) {
    running.push_back(std::async(std::launch::async, [&, r] {
      const int next = (r + 1) % size, prev = (r + size - 1) % size;
      for (int round = 0; round < 3; ++round) {
        std::vector<std::byte> got(n);
        ts[static_cast<std::size_t>(r)]->send_recv(next, 6, pattern(n, 10 * round + r), prev, 6,
                                                   got, soon());
        EXPECT_EQ(got, pattern(n, 10 * round + prev)) << "rank " << r << ", round " << round;
      }
    }));
  }
  for (auto& f : running) f.get();
}

// Three messages from `first` under one tag arrive in order; recv_any finds `second`'s.
inline void check_order_and_recv_any(Transport& to, Transport& first, Transport& second) {
  for (int i = 0; i < 3; ++i) first.send(to.rank(), 5, pattern(100, i), soon());
  second.send(to.rank(), 9, pattern(10, 9), soon());
  for (int i = 0; i < 3; ++i) {
    std::vector<std::byte> got(100);
    to.recv(first.rank(), 5, got, soon());
    EXPECT_EQ(got, pattern(100, i));
  }
  std::vector<std::byte> got(10);
  EXPECT_EQ(to.recv_any(9, got, soon()), second.rank());
  EXPECT_EQ(got, pattern(10, 9));
}

inline void check_size_mismatch_names_both(Transport& from, Transport& to, std::size_t sent,
                                           std::size_t expected) {
  from.send(to.rank(), 3, pattern(sent, 0), soon());
  std::vector<std::byte> got(expected);
  try {
    to.recv(from.rank(), 3, got, soon());
    FAIL() << "a receive of the wrong size succeeded";
  } catch (const PeerError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("sent " + std::to_string(sent) + " bytes where " +
                                               std::to_string(expected) + " were expected"));
  }
}

}  // namespace weft::dist::testing_transport
