// Reading a flight recorder's ring (ring.h) written by another process, which may be writing
// it still, be stopped mid-write, or be dead: records caught mid-write are left out, and every
// count, index and text is checked before use, since the memory is the other process's to
// scribble on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "weft/base/dtype.h"
#include "weft/base/error.h"
#include "weft/recorder/ring.h"

namespace weft::recorder {

class RingError : public weft::Error {
 public:
  using weft::Error::Error;
};

struct GroupInfo {
  std::uint32_t id = 0;
  std::string name;
  int size = 0;
  int rank = 0;              // the process's rank in the group
  std::vector<int> members;  // the members' job ranks by group rank; empty: not known
};

struct OpRecord {
  std::uint64_t id = 0;
  std::uint64_t seq = 0;
  std::uint64_t count = 0;
  int group = -1;  // index in RingSnapshot::groups; -1: not in the table (it was full)
  int root = -1;
  int peer = -1;
  bool collective = true;
  DType dtype = DType::kUInt8;
  OpState state = OpState::kIssued;
  std::int64_t issued_ns = 0, started_ns = 0, ended_ns = 0;  // 0: not reached
  std::string op, reduce, site;

  // "all_reduce(count=4, dtype=float32, op=sum)", as debug mode's CollectiveMismatch says it.
  std::string call() const;
  // What must agree across the ranks of a collective: op, count, dtype, root and reduce op.
  bool same_call(const OpRecord& other) const;
};

struct RingSnapshot {
  int rank = -1;  // -1: the process never formed its world
  int world_size = 0;
  int pid = 0;
  std::vector<GroupInfo> groups;
  std::vector<OpRecord> records;  // oldest first
};

// Copies the ring out of `memory` (`bytes` long). Throws RingError when it is not a ring of
// this version (the magic, the version or the size differ).
RingSnapshot read_ring(const void* memory, std::size_t bytes);

// "issued", "started", "completed", "failed".
const char* state_name(OpState state);

}  // namespace weft::recorder
