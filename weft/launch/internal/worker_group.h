// One attempt of a job on this node: starts every local worker, relays their output,
// forwards signals, starts a worker killed by a signal again in place while the spec allows,
// and on any other failure stops the rest. launcher.cc decides what happens next (restart or
// exit).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "weft/base/deadline.h"
#include "weft/launch/internal/exit_status.h"
#include "weft/launch/internal/line_prefixer.h"
#include "weft/launch/internal/output_stream.h"
#include "weft/launch/internal/progress_line.h"
#include "weft/launch/internal/signal_pipe.h"
#include "weft/launch/internal/worker_process.h"

namespace weft::launch::internal {

struct GroupOutcome {
  enum class Kind { kSucceeded, kFailed, kInterrupted };
  Kind kind = Kind::kSucceeded;
  int rank = -1;      // kFailed: the first rank seen failing
  ExitStatus status;  // kFailed: how it ended
  int signal = 0;     // kInterrupted: the signal weftrun received
  std::string hung;   // kFailed for a worker that did not exit in time: what happened
  std::vector<std::string> endings;  // how each local worker ended, in GroupSpec order
  std::vector<bool> stopped;         // each was found stopped (SIGSTOP, a debugger)
  int replaced = 0;                  // workers started again in place

  // "exited with code 3", or what `hung` says.
  std::string describe() const { return hung.empty() ? status.describe() : hung; }
};

struct GroupSpec {
  std::vector<SpawnRequest> workers;  // one per local rank
  std::vector<int> ranks;             // their global ranks, for the "[rank] " prefixes
  Seconds stop_grace{5.0};            // SIGTERM (or the forwarded signal) .. SIGKILL
  Seconds exit_timeout{0.0};          // once a worker exited 0, the others' limit; 0: none
  // A worker killed by a signal is started again alone, with WEFT_REPLACEMENT=1, the others
  // left running (weftrun --recover in-place), this many times in all; after that, or for a
  // worker that exits with a code, the group stops as below.
  int replacements = 0;
  // weftrun --recover elastic: a worker killed by a signal when no replacement is left is
  // left dead while others run (they go on without it), instead of stopping the group.
  bool elastic = false;
  // Called with the global rank of a worker killed by a signal that is started again or left
  // dead, before its replacement starts (the others read it from the job's store).
  std::function<void(int rank)> record_death;
};

class WorkerGroup {
 public:
  // The workers' progress records (on their stdout) go to `progress`.
  WorkerGroup(GroupSpec spec, SignalPipe& signals, OutputStream& out, OutputStream& err,
              ProgressLine& progress);

  // Starts the workers and returns once every one has exited (and been reaped):
  // - a worker killed by a signal while spec.replacements last is started again, with the
  //   same variables and WEFT_REPLACEMENT=1; after that, with spec.elastic, it is left dead
  //   while another runs;
  // - otherwise a worker exiting non-zero or killed by a signal, first of all, makes the
  //   outcome kFailed; the others get SIGTERM, and SIGKILL once stop_grace has passed;
  // - a worker still running exit_timeout after another exited 0 makes it kFailed (hung),
  //   stopped the same way;
  // - SIGINT, SIGTERM, SIGHUP or SIGQUIT received by the launcher is forwarded to every
  //   worker, with the same SIGKILL deadline, and makes the outcome kInterrupted; a second
  //   one kills them at once.
  // Blocks at most as long as the workers run plus stop_grace plus a few seconds. Throws
  // weft::SystemError if a worker cannot be started; those started are then killed.
  GroupOutcome run();

 private:
  struct Stream {
    UniqueFd fd;
    LinePrefixer lines;
    OutputStream* sink;
  };
  struct Worker {
    WorkerProcess process;
    Stream out;
    Stream err;
    bool done = false;     // exited, or given up on after SIGKILL
    bool stopped = false;  // found stopped (SIGSTOP, a debugger) when told to stop
  };

  void start_all();
  Worker start(std::size_t i, bool replacement);
  bool replace_if_allowed(std::size_t i);
  bool left_behind(std::size_t i);
  void drain(Stream& stream);
  void poll_once();
  int poll_timeout_ms() const;
  void read_stream(Stream& stream);
  void relay(Stream& stream, std::string lines);
  void log(const std::string& message);
  void close_stream(Stream& stream);
  void on_signals();
  void on_exits();
  void on_deadlines();
  void stop_all(int sig);
  void kill_all();
  bool finished();
  void finish();
  int live_count() const;

  GroupSpec spec_;
  SignalPipe& signals_;
  OutputStream& out_;
  OutputStream& err_;
  ProgressLine& progress_;
  std::vector<Worker> workers_;
  GroupOutcome outcome_;
  std::optional<Deadline> kill_at_;      // SIGKILL the survivors then
  std::optional<Deadline> give_up_at_;   // after SIGKILL, stop waiting for them then
  std::optional<Deadline> drain_until_;  // all exited: read what is left until then
  std::optional<Deadline> exit_by_;      // a worker exited 0: the others' limit
  int first_exit_rank_ = -1;             // that worker's rank
};

}  // namespace weft::launch::internal
