// The thresholds at which the collective engines change algorithm, and the table that
// `weft-bench --tune` measures and writes for one machine (CPU model, backend, rank count):
// Open MPI's tuned decision files and NCCL's tuner plugins are the models. The defaults are
// what docs/COLLECTIVES.md gives and were measured on a 2-vCPU Zen 5; a table replaces them.
//
// Where a table is read: $WEFT_COLLECTIVE_TABLE if set ("off": none), else
// default_table_path(). Every rank of a job reads its own, and the world group's creation
// checks that all ranks read the same one (the same algorithms everywhere or a job would
// hang): if they differ, every rank uses the defaults and rank 0 says so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace weft::dist {

// A threshold no buffer reaches: a range [kNeverBytes, 0] is empty.
inline constexpr std::size_t kNeverBytes = std::size_t{1} << 48;

struct CollectiveTuning {
  // shm engine: an all-reduce up to this size runs in one step (at most a slot, 64 KiB).
  std::size_t one_step_all_reduce_max = std::size_t{16} << 10;
  // shm engine, where every rank can read the others' memory: all-reduces, broadcasts and
  // all-gathers (sizes: the gathered whole) in [min, max] copy straight between the ranks'
  // buffers (min > max: never; all-reduces by default, since the slots' streaming stores).
  std::size_t single_copy_all_reduce_min = kNeverBytes;
  std::size_t single_copy_all_reduce_max = 0;
  std::size_t single_copy_broadcast_min = std::size_t{64} << 10;
  std::size_t single_copy_broadcast_max = std::size_t{4} << 20;
  std::size_t single_copy_all_gather_min = std::size_t{64} << 10;
  std::size_t single_copy_all_gather_max = std::size_t{256} << 10;
  // shm engine, where every rank maps the others' shared arenas: all-reduces of buffers in
  // SharedBuffers on every rank past the one-step range and from this size run in place (each
  // rank writing its slice into the others' buffers), and broadcasts from a root's SharedBuffer
  // (the others copying it out).
  std::size_t in_place_all_reduce_min = 0;
  std::size_t in_place_broadcast_min = std::size_t{4} << 10;  // at least 512 KiB oversubscribed
  // generic engine (tcp, thread, shm's subgroups beyond its pool): all-reduces from this
  // size run the ring, smaller ones recursive doubling.
  std::size_t ring_all_reduce_min = std::size_t{1} << 20;

  bool operator==(const CollectiveTuning&) const = default;
};

// What a table was measured for; a table is used only where all three match.
struct TuningKey {
  std::string cpu;      // weft::cpu_model()
  std::string backend;  // "shm", "tcp", ...
  int ranks = 0;        // the job's world size
};

// $XDG_CACHE_HOME/weft/collectives (else ~/.cache/weft/collectives) / "<backend>-<ranks>-
// <cpu, letters and digits>.table"; empty when neither XDG_CACHE_HOME nor HOME is set.
std::filesystem::path default_table_path(const TuningKey& key);
// The table to read for `key`: $WEFT_COLLECTIVE_TABLE's path, nothing for "off", else
// default_table_path(key) (nothing where that is empty).
std::optional<std::filesystem::path> table_path(const TuningKey& key);

// "key = value" lines (# comments): cpu, backend, ranks, then the thresholds in bytes.
std::string format_table(const TuningKey& key, const CollectiveTuning& tuning);
// Parses a table; InvalidArgument naming the line for anything malformed (an unknown key, a
// number out of range, a missing threshold).
CollectiveTuning parse_table(const std::string& text, TuningKey* key);

// The table at path() for `key`: nullopt when there is none; when it is for another machine
// or malformed, nullopt and `why` says so (for a warning).
std::optional<CollectiveTuning> read_table(const TuningKey& key, std::string* why);
// Writes atomically (a temporary file renamed over it), making the folders; throws
// weft::Error on failure.
void write_table(const std::filesystem::path& path, const TuningKey& key,
                 const CollectiveTuning& tuning);

// A fingerprint of a tuning (0 never: an absent table is 0), for ranks to compare.
std::int64_t fingerprint(const CollectiveTuning& tuning);

}  // namespace weft::dist
