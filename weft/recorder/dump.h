// A flight recorder's ring as a file: what a process writes when one of its operations fails
// (WEFT_FLIGHT_RECORDER_DUMP), what weftrun writes for each of its workers when a job fails,
// and what weft-fr reads. JSON, one file per rank, named PREFIX<rank>.json:
//   {"format": "weft-flight-recorder", "version": 1, "rank", "world_size", "pid", "host",
//    "status", "dumped_monotonic_ns", "dumped_unix_ms",
//    "groups": [{"id", "name", "size", "rank", "members" (job ranks; []: not known)}],
//    "records": [{"id", "seq", "group" (index in groups, -1: unnamed), "op", "collective",
//                 "count", "dtype", "root", "peer", "reduce", "site", "state",
//                 "issued_ns", "started_ns", "ended_ns"}]}   (oldest first)
// The records' times are on the writer's coarse monotonic clock (ring.h), as is
// dumped_monotonic_ns: a reader measures ages against it, never across machines.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "weft/base/error.h"
#include "weft/recorder/ring_reader.h"

namespace weft::recorder {

// A dump that is not one: not JSON, another format or version, a field missing or out of range.
class DumpError : public weft::Error {
 public:
  using weft::Error::Error;
};

struct Dump {
  RingSnapshot ring;
  std::string host;
  std::string status;  // how the process stood: "failed in an operation", "was killed by ..."
  std::int64_t dumped_monotonic_ns = 0;
  std::int64_t dumped_unix_ms = 0;
};

// `ring` as dumped now, on this host.
Dump dump_of(RingSnapshot ring, std::string status);

std::string dump_json(const Dump& dump);
// Parses what dump_json wrote; every count, index and name is checked. `source` names the
// text in errors (a path).
Dump parse_dump(std::string_view text, const std::string& source);

// Writes `bytes` to `path` whole or not at all (a temporary file renamed over it). Throws
// weft::SystemError naming the path.
void write_file_whole(const std::string& path, std::string_view bytes);
// write_file_whole(path, dump_json(dump)).
void write_dump(const std::string& path, const Dump& dump);
// Throws SystemError when `path` cannot be read, DumpError when it is not a dump.
Dump read_dump(const std::string& path);

}  // namespace weft::recorder
