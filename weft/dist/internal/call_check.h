// Debug mode (WEFT_DIST_DEBUG=detail): before each collective, the ranks exchange a
// signature of the call and all throw CollectiveMismatch, listing every rank's call, if they
// disagree, instead of hanging or mixing up data. Off by default; when off it costs one
// branch per operation. Not public.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "weft/dist/buffer.h"
#include "weft/dist/engine/collective_engine.h"
#include "weft/dist/op.h"
#include "weft/dist/reduce_op.h"

namespace weft::dist::internal {

// What must agree across ranks for one collective call.
struct CallSignature {
  static constexpr std::size_t kAnyCount = static_cast<std::size_t>(-1);  // varies by rank

  Op op = Op::barrier;
  DType dtype = DType::kFloat32;
  std::size_t count = 0;
  int root = -1;                   // -1: the op has no root
  std::optional<ReduceOp> reduce;  // empty: the op does not reduce

  std::string describe() const;  // "all_reduce(count=10, dtype=float32, op=sum)"
};

// True when WEFT_DIST_DEBUG=detail (read once per process).
bool call_checks_enabled();

// Exchanges `mine` with every rank of the group (`group_size` ranks) through its `engine`, on a
// tag of its own next to `op`'s, and throws CollectiveMismatch on every rank if any rank's
// signature differs. Ranks at different sequence numbers use different tags and, on engines
// that match messages by tag, never meet here: they time out instead, and the timeout names
// the rank that had not arrived; shm's step engine compares the calls and fails at once.
void check_call(CollectiveEngine& engine, const OpContext& op, int group_size,
                const CallSignature& mine, std::uint64_t seq, const std::string& group);

}  // namespace weft::dist::internal
