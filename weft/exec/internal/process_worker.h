// The worker side of ProcessPoolExecutor and the framing both sides share. Not public.
//
// Frame: [u32 magic][u32 kind][u64 payload length][payload]. Requests carry kRequestMagic
// and kind kCall; replies carry kReplyMagic and kind kOk (payload: the encoded result) or
// kError (payload: exception type name, what()). Lengths above kMaxPayload are rejected by
// the reader before anything is allocated. See docs/EXECUTORS.md.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

#include "weft/base/unique_fd.h"

namespace weft::internal {

inline constexpr std::uint32_t kRequestMagic = 0x51544657;            // "WFTQ"
inline constexpr std::uint32_t kReplyMagic = 0x52544657;              // "WFTR"
inline constexpr std::uint64_t kMaxPayload = std::uint64_t{1} << 32;  // 4 GiB

enum class FrameKind : std::uint32_t { kCall = 0, kOk = 1, kError = 2 };

struct FrameHeader {
  std::uint32_t magic;
  FrameKind kind;
  std::uint64_t length;
};
static_assert(sizeof(FrameHeader) == 16);

// Appends a frame holding `payload` to `out`.
void append_frame(std::string& out, std::uint32_t magic, FrameKind kind,
                  const std::string& payload);

struct SpawnedWorker {
  pid_t pid;
  UniqueFd fd;  // the parent's end of the socket pair
};

// Every descriptor the process pools of this process hold (eventfds, parent-side sockets).
// A new worker closes them all, so that no worker keeps another worker's socket open: a
// worker must see end-of-file when its pool closes its socket, and its pool must see
// end-of-file when it dies.
class PoolFds {
 public:
  static PoolFds& instance();
  void add(int fd);
  void remove(int fd);

 private:
  friend SpawnedWorker spawn_worker();
  std::mutex mu_;
  std::set<int> fds_;
};

// Forks a worker process that serves requests on a socket until it reads end-of-file.
// Throws weft::SystemError if the socket pair or the fork fails. The parent's end of the
// socket is registered in PoolFds; remove it from there before closing it.
SpawnedWorker spawn_worker();

// "was killed by signal 9 (Killed)" / "exited with code 3", from a waitpid status.
std::string describe_exit_status(int status);

}  // namespace weft::internal
