#include "weft/dist/tcp/tcp_frame.h"

namespace weft::dist::tcp {

std::string check_frame(const FrameHeader& h) {
  if (h.magic != kFrameMagic) return "a frame without weft's magic number";
  switch (static_cast<FrameKind>(h.kind)) {
    case FrameKind::kHeartbeat:
      if (h.tag != 0 || h.total != 0 || h.offset != 0 || h.length != 0) {
        return "a heartbeat frame with a payload";
      }
      return {};
    case FrameKind::kAbort:
      if (h.offset != 0 || h.length != h.total || h.total > kMaxAbortReason) {
        return "an abort frame of " + std::to_string(h.total) + " bytes (at most " +
               std::to_string(kMaxAbortReason) + ", in one segment)";
      }
      return {};
    case FrameKind::kData:
      if (h.total > kMaxMessage) {
        return "a message of " + std::to_string(h.total) + " bytes (the limit is 4 GiB)";
      }
      if (h.length > kMaxSegment || h.offset > h.total || h.length > h.total - h.offset ||
          (h.length == 0 && h.total != 0)) {
        return "a segment of " + std::to_string(h.length) + " bytes at offset " +
               std::to_string(h.offset) + " of a " + std::to_string(h.total) + "-byte message";
      }
      return {};
  }
  return "a frame of unknown kind " + std::to_string(h.kind);
}

}  // namespace weft::dist::tcp
