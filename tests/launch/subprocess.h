// Runs a program (weftrun) for a test with its stdout and stderr captured, and never waits
// for it longer than the test says: on a timeout it is killed.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "weft/base/deadline.h"

namespace weft::launch::testing {

class Subprocess {
 public:
  // Starts argv[0] (a path) with the test's environment, changed by `env`: a value sets the
  // variable, std::nullopt removes it. Aborts the test binary if it cannot start.
  explicit Subprocess(const std::vector<std::string>& argv,
                      const std::map<std::string, std::optional<std::string>>& env = {});
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
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::optional<int> exit_code_;
  std::string out_;
  std::string err_;
};

// Runs argv to completion (at most `timeout`) and returns {exit code, stdout, stderr}.
struct Finished {
  int code;
  std::string out;
  std::string err;
  double seconds;
};
Finished run(const std::vector<std::string>& argv,
             const std::map<std::string, std::optional<std::string>>& env = {},
             Seconds timeout = Seconds(20));

// The lines of `text`, without their '\n'.
std::vector<std::string> lines_of(const std::string& text);

// Whether process `pid` is gone (no such process, or a zombie nobody reaped).
bool process_gone(pid_t pid);

// A string unique to this call, to pass to workers as an argument so that
// live_processes_with(tag) can find them all, whether or not they printed anything.
std::string unique_tag();
// The processes still running (not zombies) with `arg` among their arguments.
std::vector<pid_t> live_processes_with(const std::string& arg);

}  // namespace weft::launch::testing
