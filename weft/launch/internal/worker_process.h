// One worker process: started with fork + execve in its own process group, its stdout and
// stderr on pipes, and watched without blocking.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "weft/base/deadline.h"
#include "weft/base/unique_fd.h"
#include "weft/launch/internal/exit_status.h"

namespace weft::launch::internal {

struct SpawnRequest {
  std::string path;               // the file to execute
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // "NAME=value"
  int cpu = -1;                   // the CPU to bind the worker to; -1: not bound
  int inherit_fd = -1;            // a descriptor the worker keeps (its flight recorder's ring)
};

class WorkerProcess {
 public:
  struct Started;

  // Starts the program: stdin is /dev/null, stdout and stderr are pipes whose read ends
  // (close-on-exec, non-blocking) are returned; no other descriptor is inherited. The
  // child leads its own process group, gets default signal dispositions and is killed
  // (SIGKILL) if the calling thread exits. Throws weft::SystemError when fork, pipe or
  // execve fail; a child whose execve failed is reaped first.
  static Started start(const SpawnRequest& request);

  WorkerProcess(WorkerProcess&& other) noexcept;
  // Reaps the process this one held (as the destructor does), then takes `other`'s.
  WorkerProcess& operator=(WorkerProcess&& other) noexcept;
  WorkerProcess(const WorkerProcess&) = delete;
  // reap(): nothing the worker started outlives this object.
  ~WorkerProcess();

  pid_t pid() const { return pid_; }
  // True once the process has exited; never blocks. The exited process stays a zombie
  // until reap(), so its pid (and its process group's id) cannot be reused meanwhile and
  // signal_group() cannot hit a stranger.
  bool exited();
  // How it ended; valid once exited() returned true.
  const ExitStatus& status() const { return status_; }
  // Sends `sig` to the worker's process group (the worker and what it started), or to the
  // worker alone if it left the group. Does nothing once reaped.
  void signal_group(int sig);
  // Kills what is left of the process group with SIGKILL and collects the worker, waiting
  // at most `wait` for it to go (a process stuck in the kernel is then left behind).
  void reap(Seconds wait = Seconds(5.0));

 private:
  explicit WorkerProcess(pid_t pid) : pid_(pid) {}

  pid_t pid_ = -1;
  bool exited_ = false;
  bool reaped_ = false;
  ExitStatus status_;
};

struct WorkerProcess::Started {
  WorkerProcess process;
  UniqueFd stdout_fd;
  UniqueFd stderr_fd;
};

}  // namespace weft::launch::internal
