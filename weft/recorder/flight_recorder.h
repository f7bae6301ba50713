// The flight recorder: this process's last operations on every process group (which
// operation, group, sequence number, size, dtype, root, reduce op, the issuing thread's label,
// state and times) in a ring (ring.h). When a job fails or times out, the rings name the rank
// that is behind or diverged (diagnosis.h):
// - under weftrun the ring is memory weftrun shares with the process (WEFT_FLIGHT_RECORDER_FD),
//   and weftrun reads every rank's ring, whatever state the rank is in;
// - otherwise (mpirun, srun, Python) the ring is the process's own, and with
//   WEFT_FLIGHT_RECORDER_DUMP=PREFIX set the process writes it to PREFIX<rank>.json when one
//   of its operations first fails (a timeout, a dead peer, a mismatch), for weft-fr to read.
// WEFT_FLIGHT_RECORDER=0 turns it off. Recording takes no lock and no system call: an atomic
// increment, a record's stores and three reads of the coarse clock per operation
// (docs/PERFORMANCE.md measures it). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "weft/base/dtype.h"
#include "weft/recorder/ring.h"

namespace weft::recorder {

// What is recorded when an operation is issued.
struct OpInfo {
  std::uint32_t group = kMaxGroups;  // FlightRecorder::add_group's index
  std::uint64_t seq = 0;
  std::string_view op;      // "all_reduce"
  std::uint64_t count = 0;  // elements
  DType dtype = DType::kUInt8;
  int root = -1;
  std::string_view reduce;  // "sum"; empty when it does not reduce
  int peer = -1;            // point-to-point: the group rank on the other end
  bool collective = true;
  bool started = false;  // it starts as it is issued (on its caller's thread): no started()
};

class FlightRecorder {
 public:
  // This process's recorder.
  static FlightRecorder& process();

  bool enabled() const { return ring_ != nullptr; }
  // The process's job rank and world size, once its world group forms. A process holding
  // several ranks (the threads backend) records under kSeveralRanks (ring.h), and dumps nothing.
  void set_rank(int rank, int world_size);
  // Names a group in the ring's table (`members`: its members' job ranks, in group rank order);
  // returns its index for OpInfo::group (kMaxGroups once the table is full: its operations
  // are still recorded, without the name).
  std::uint32_t add_group(std::uint32_t id, std::string_view name, std::span<const int> members,
                          int rank);

  // Records an operation as issued; returns its id for started() and finished(). Disabled:
  // returns kWriting, which the others ignore. The first finished(id, false) writes the dump
  // when WEFT_FLIGHT_RECORDER_DUMP asks for one.
  std::uint64_t issued(const OpInfo& info);
  void started(std::uint64_t id);
  void finished(std::uint64_t id, bool ok);

  // Labels the operations this thread issues while it lives. Nests: inside another label the
  // label is "outer / inner" ("step 12 / FSDP gather layers.2"), and the outer one is restored
  // at the end. Labels longer than the record holds (47 bytes) are cut.
  class Site {
   public:
    explicit Site(std::string_view label);
    ~Site();
    Site(const Site&) = delete;
    Site& operator=(const Site&) = delete;

   private:
    char saved_[sizeof(Record::site)];
  };

  // A recorder writing to `memory` (kRingBytes, zero-filled or a ring this process wrote) and
  // dumping to `dump_prefix`<rank>.json on a failure (empty: never), for tests; nullptr:
  // disabled.
  explicit FlightRecorder(void* memory, std::string dump_prefix = "");

 private:
  Record* record_of(std::uint64_t id) const;
  void dump_after_failure() const;

  RingHeader* ring_;
  Record* records_;
  std::string dump_prefix_;  // WEFT_FLIGHT_RECORDER_DUMP, own ring only; empty: no dump
  std::atomic<bool> dumped_{false};
};

}  // namespace weft::recorder
