// The tcp transport's frames: what one connection carries after the handshake, and the
// checks every header passes before the transport acts on it or allocates for it. Layout
// and rules: docs/COLLECTIVES.md, "The tcp transport".
#pragma once

#include <cstdint>
#include <string>

#include "weft/dist/transport/transport.h"

namespace weft::dist::tcp {

constexpr std::uint32_t kFrameMagic = 0x32544657;  // "WFT2"

enum class FrameKind : std::uint32_t {
  kData = 0,       // a segment of a message: its bytes [offset, offset + length) of total
  kAbort = 1,      // the sender's job failed; the payload says why
  kHeartbeat = 2,  // nothing: the sender is alive (sent on a connection idle for a while)
};

// Native byte order: the ranks of a job share an architecture.
struct FrameHeader {
  std::uint32_t magic = kFrameMagic;
  std::uint32_t kind = 0;
  Tag tag = 0;
  std::uint64_t total = 0;   // the message's length
  std::uint64_t offset = 0;  // where this segment's payload goes in it
  std::uint64_t length = 0;  // the payload that follows this header
};
static_assert(sizeof(FrameHeader) == 40);

constexpr std::uint64_t kMaxMessage = std::uint64_t{4} << 30;  // 4 GiB
// Messages are cut into segments of at most this many bytes, so that threads sending to
// the same peer take turns and a receiver can land each segment as it comes.
constexpr std::uint64_t kMaxSegment = std::uint64_t{512} << 10;
constexpr std::uint64_t kMaxAbortReason = std::uint64_t{16} << 10;

// Empty when `header` is a well-formed frame header; else what is wrong with it. Checks the
// magic, the kind, and every length against the limits above, on their own and together.
std::string check_frame(const FrameHeader& header);

}  // namespace weft::dist::tcp
