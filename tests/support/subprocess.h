// Child processes for tests, never waited for longer than the test says.
//
// Subprocess and run(): a program (weftrun, a tool) started with posix_spawn, its stdout and
// stderr captured; on a timeout it is killed. fork_child() and wait_child(): a function run
// in a forked copy of the test. process_gone(), unique_tag() and live_processes_with(): what
// a test needs to check that nothing it started is left running.
//
// Ranks as forked processes with a job store around them: tests/support/forked_ranks.h.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "weft/base/deadline.h"
#include "weft/base/unique_fd.h"

namespace weft::test {

// Environment changes for a child: a value sets the variable, std::nullopt removes it.
using EnvChanges = std::map<std::string, std::optional<std::string>>;

class Subprocess {
 public:
  // Starts argv[0] (a path) with the test's environment changed by `env`. Aborts the test
  // binary if it cannot start.
  explicit Subprocess(const std::vector<std::string>& argv, const EnvChanges& env = {});
  // Kills it (SIGKILL) if still running, and reaps it.
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // Reads its output until pred(stdout so far) holds or `timeout` passes; returns pred's
  // last value.
  bool wait_for_stdout(const std::function<bool(const std::string&)>& pred, Seconds timeout);
  // Reads all output and waits for it to exit; returns its exit code (128 + the signal if a
  // signal ended it), or -1 if it ran past `timeout` (it is then killed).
  int wait(Seconds timeout);

  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

 private:
  void read_some(int timeout_ms);
  bool try_reap();

  pid_t pid_ = -1;
  UniqueFd out_fd_;  // empty once the child closed its end
  UniqueFd err_fd_;
  std::optional<int> exit_code_;
  std::string out_;
  std::string err_;
};

// Runs argv to completion (at most `timeout`) and returns {exit code, stdout, stderr}.
struct Finished {
  int code;  // as Subprocess::wait: -1 after a timeout
  std::string out;
  std::string err;
  double seconds;
};
Finished run(const std::vector<std::string>& argv, const EnvChanges& env = {},
             Seconds timeout = Seconds(20));

// Runs `body` in a forked child of the test, which then exits with 0, or with 1 after
// printing the exception to stderr if `body` threw. The child ends in _exit: no gtest
// teardown, atexit handler or static destructor runs there. Aborts if fork fails.
pid_t fork_child(const std::function<void()>& body);

// Waits for child `pid` to end, at most `timeout`: returns its exit code (128 + the signal
// if a signal ended it), or -1 if it ran past `timeout` (it is then killed and reaped) or is
// no child of this process left to wait for.
int wait_child(pid_t pid, Seconds timeout);

// The lines of `text`, without their '\n'.
std::vector<std::string> lines_of(const std::string& text);
// The words of `text` split at whitespace, for an argv written as one string
// ("--steps 20 --seed 1"); no quoting.
std::vector<std::string> words_of(const std::string& text);

// Whether process `pid` is gone (no such process, or a zombie nobody reaped).
bool process_gone(pid_t pid);

// A string unique to this call, to pass to workers as an argument so that
// live_processes_with(tag) can find them all, whether or not they printed anything.
std::string unique_tag();
// The processes still running (not zombies) with `arg` among their arguments.
std::vector<pid_t> live_processes_with(const std::string& arg);

}  // namespace weft::test
