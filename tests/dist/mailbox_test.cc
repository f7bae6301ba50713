// Mailbox's recycled buffers: what deliver_copy writes into, what it keeps and how much.
#include "weft/dist/transport/mailbox.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <vector>

namespace weft::dist {
namespace {

std::vector<std::byte> message(std::size_t bytes, int value) {
  return std::vector<std::byte>(bytes, static_cast<std::byte>(value));
}

std::vector<std::byte> received(Mailbox& box, int from, Tag tag, std::size_t bytes) {
  std::vector<std::byte> out(bytes);
  box.recv(from, tag, out, Deadline::after(std::chrono::seconds(5)));
  return out;
}

constexpr std::size_t kLarge = Mailbox::kSpareMinBytes;

TEST(MailboxTest, ReceivedBuffersServeLaterCopies) {
  Mailbox box(/*recycles=*/true);
  box.deliver_copy(1, 7, message(kLarge, 3));
  EXPECT_EQ(box.spare_bytes(), 0u);
  EXPECT_EQ(received(box, 1, 7, kLarge), message(kLarge, 3));
  EXPECT_GE(box.spare_bytes(), kLarge);  // the received buffer, kept
  box.deliver_copy(1, 8, message(kLarge / 2 + kLarge, 0));
  EXPECT_GE(box.spare_bytes(), kLarge);  // too small for it: a new buffer
  box.deliver_copy(1, 9, message(kLarge, 5));
  EXPECT_EQ(box.spare_bytes(), 0u);  // this one fits: taken
  EXPECT_EQ(received(box, 1, 9, kLarge), message(kLarge, 5));
  EXPECT_EQ(received(box, 1, 8, kLarge / 2 + kLarge), message(kLarge / 2 + kLarge, 0));
}

TEST(MailboxTest, KeepsTheLargestFewAndNoSmallOnes) {
  Mailbox box(/*recycles=*/true);
  box.deliver_copy(0, 1, message(kLarge - 64, 1));
  received(box, 0, 1, kLarge - 64);
  EXPECT_EQ(box.spare_bytes(), 0u);
  std::size_t largest = 0;
  for (std::size_t i = 1; i <= Mailbox::kSpares + 2; ++i) {
    box.deliver(0, 2, message(i * kLarge, 1));
    received(box, 0, 2, i * kLarge);
    largest = i * kLarge;
  }
  EXPECT_GE(box.spare_bytes(), largest + (largest - kLarge));
  EXPECT_LT(box.spare_bytes(), largest + (largest - kLarge) + 2 * kLarge);  // only kSpares
}

TEST(MailboxTest, KeepsNothingUnlessItRecycles) {
  Mailbox box;
  box.deliver_copy(0, 1, message(2 * kLarge, 1));
  EXPECT_EQ(received(box, 0, 1, 2 * kLarge), message(2 * kLarge, 1));
  EXPECT_EQ(box.spare_bytes(), 0u);
}

}  // namespace
}  // namespace weft::dist
