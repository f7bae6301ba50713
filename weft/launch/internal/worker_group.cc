#include "weft/launch/internal/worker_group.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>

#include "weft/base/check.h"
#include "weft/base/error.h"

namespace weft::launch::internal {
namespace {

// After SIGKILL, how long to wait for the workers before giving up on them.
constexpr Seconds kKillWait{5.0};
// Once every worker has exited, how long to keep reading output still in the pipes, or
// held open by processes the workers left behind (which reap() then kills).
constexpr Seconds kDrainWait{1.0};
// The longest poll: a backstop only, since SIGCHLD and output wake the loop.
constexpr int kMaxPollMillis = 1000;
constexpr std::size_t kReadChunk = 64 * 1024;

// Whether `pid` is stopped: state T (or t, traced) in /proc/PID/stat, after the command
// name in parentheses, which may itself hold spaces and parentheses.
bool is_stopped(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const std::size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() &&
         (stat[close + 2] == 'T' || stat[close + 2] == 't');
}

std::string seconds_text(Seconds s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", s.count());
  return text;
}

}  // namespace

WorkerGroup::WorkerGroup(GroupSpec spec, SignalPipe& signals, OutputStream& out, OutputStream& err,
                         ProgressLine& progress)
    : spec_(std::move(spec)), signals_(signals), out_(out), err_(err), progress_(progress) {
  WEFT_CHECK_EQ(spec_.workers.size(), spec_.ranks.size());
}

GroupOutcome WorkerGroup::run() {
  start_all();
  while (!finished()) {
    poll_once();
    on_signals();
    on_exits();
    on_deadlines();
  }
  finish();
  return outcome_;
}

void WorkerGroup::start_all() {
  workers_.reserve(spec_.workers.size());
  for (std::size_t i = 0; i < spec_.workers.size(); ++i) workers_.push_back(start(i, false));
}

WorkerGroup::Worker WorkerGroup::start(std::size_t i, bool replacement) {
  SpawnRequest request = spec_.workers[i];
  if (replacement) {
    std::erase_if(request.env,
                  [](const std::string& e) { return e.rfind("WEFT_REPLACEMENT=", 0) == 0; });
    request.env.emplace_back("WEFT_REPLACEMENT=1");
  }
  WorkerProcess::Started started = WorkerProcess::start(request);
  // Appended piecewise: "[" + std::to_string(...) trips g++ 12's bogus -Wrestrict.
  std::string prefix = "[";
  prefix += std::to_string(spec_.ranks[i]);
  prefix += "] ";
  return Worker{std::move(started.process),
                Stream{std::move(started.stdout_fd), LinePrefixer(prefix), &out_},
                Stream{std::move(started.stderr_fd), LinePrefixer(prefix), &err_}};
}

// A worker killed by a signal (crashed, killed, out of memory), while replacements last and
// the group is not stopping: its last lines relayed, then a new process in its place.
bool WorkerGroup::replace_if_allowed(std::size_t i) {
  Worker& w = workers_[i];
  if (w.process.status().signal == 0 || outcome_.replaced >= spec_.replacements || kill_at_ ||
      outcome_.kind != GroupOutcome::Kind::kSucceeded) {
    return false;
  }
  drain(w.out);
  drain(w.err);
  if (spec_.record_death) spec_.record_death(spec_.ranks[i]);
  ++outcome_.replaced;
  log("rank " + std::to_string(spec_.ranks[i]) + " " + w.process.status().describe() +
      "; starting it again in place (replacement " + std::to_string(outcome_.replaced) + " of " +
      std::to_string(spec_.replacements) + "), the others keep running");
  w = start(i, true);
  return true;
}

// --recover elastic: a worker killed by a signal with no replacement left, while others run,
// does not stop them.
bool WorkerGroup::left_behind(std::size_t i) {
  Worker& w = workers_[i];
  if (!spec_.elastic || w.process.status().signal == 0 || live_count() == 0 || kill_at_ ||
      outcome_.kind != GroupOutcome::Kind::kSucceeded) {
    return false;
  }
  drain(w.out);
  drain(w.err);
  if (spec_.record_death) spec_.record_death(spec_.ranks[i]);
  log("rank " + std::to_string(spec_.ranks[i]) + " " + w.process.status().describe() +
      "; no restart is left, the others go on without it");
  return true;
}

// What a dead worker left in its pipes, then the pipe closed. Bounded: a process it started
// may still hold the pipe open (reap() kills those).
void WorkerGroup::drain(Stream& stream) {
  for (int reads = 0; stream.fd && reads < 64; ++reads) {
    char buffer[kReadChunk];
    const ssize_t n = ::read(stream.fd.get(), buffer, sizeof(buffer));
    if (n <= 0) break;
    relay(stream, stream.lines.feed(std::string_view(buffer, static_cast<std::size_t>(n))));
  }
  close_stream(stream);
}

void WorkerGroup::poll_once() {
  std::vector<pollfd> fds{pollfd{signals_.fd(), POLLIN, 0}};
  std::vector<Stream*> streams;
  for (Worker& w : workers_) {
    for (Stream* s : {&w.out, &w.err}) {
      if (!s->fd) continue;
      fds.push_back(pollfd{s->fd.get(), POLLIN, 0});
      streams.push_back(s);
    }
  }
  const int ready = ::poll(fds.data(), fds.size(), poll_timeout_ms());
  if (ready < 0 && errno != EINTR) throw SystemError("poll on the workers' output", errno);
  if (ready <= 0) return;
  // One read per stream per round: a chatty worker cannot starve the others.
  for (std::size_t i = 0; i < streams.size(); ++i) {
    if (fds[i + 1].revents != 0) read_stream(*streams[i]);
  }
}

int WorkerGroup::poll_timeout_ms() const {
  auto timeout = std::chrono::milliseconds(kMaxPollMillis);
  // Only deadlines that still lead somewhere: a passed one would make poll spin.
  const bool killing = kill_at_ && !give_up_at_ && live_count() > 0;
  const bool exiting = exit_by_ && !kill_at_ && live_count() > 0;
  for (const auto& deadline : {killing ? kill_at_ : std::nullopt, give_up_at_, drain_until_,
                               exiting ? exit_by_ : std::nullopt}) {
    if (!deadline) continue;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline->remaining());
    // A deadline already passed but still pending (a worker that ignores SIGKILL keeps its
    // pipe open): wake every 10 ms rather than spin.
    timeout = std::min(timeout, std::max(left, std::chrono::milliseconds(10)));
  }
  return static_cast<int>(timeout.count());
}

void WorkerGroup::read_stream(Stream& stream) {
  char buffer[kReadChunk];
  const ssize_t n = ::read(stream.fd.get(), buffer, sizeof(buffer));
  if (n > 0) {
    relay(stream, stream.lines.feed(std::string_view(buffer, static_cast<std::size_t>(n))));
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    close_stream(stream);
  }
}

// The lines, less the progress records (stdout's), with the progress line kept below them.
void WorkerGroup::relay(Stream& stream, std::string lines) {
  if (stream.sink == &out_) lines = progress_.take_records(std::move(lines));
  if (!lines.empty()) {
    progress_.clear();
    stream.sink->write(lines);
  }
  progress_.show();
}

// weftrun's own messages, below the workers' lines and never mixed with the progress bar.
void WorkerGroup::log(const std::string& message) {
  progress_.clear();
  err_.log(message);
}

void WorkerGroup::close_stream(Stream& stream) {
  if (!stream.fd) return;
  relay(stream, stream.lines.finish());
  stream.fd.reset();
}

void WorkerGroup::on_signals() {
  for (const int sig : signals_.take()) {
    if (sig == SIGCHLD) continue;  // on_exits() looks at every worker anyway
    if (outcome_.kind == GroupOutcome::Kind::kInterrupted) {
      log("received " + signal_name(sig) + " again; killing the workers now (SIGKILL)");
      kill_all();
      continue;
    }
    outcome_ = GroupOutcome{.kind = GroupOutcome::Kind::kInterrupted, .signal = sig};
    log("received " + signal_name(sig) + "; forwarding it to " + std::to_string(live_count()) +
        " workers (SIGKILL after " + seconds_text(spec_.stop_grace) + ")");
    stop_all(sig);
  }
}

void WorkerGroup::on_exits() {
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    Worker& w = workers_[i];
    if (w.done || !w.process.exited()) continue;
    if (!w.process.status().ok() && replace_if_allowed(i)) continue;
    w.done = true;
    if (left_behind(i)) continue;
    // Only the first failure counts: the others are usually its consequence (or ours).
    if (!w.process.status().ok() && outcome_.kind == GroupOutcome::Kind::kSucceeded) {
      outcome_ = GroupOutcome{.kind = GroupOutcome::Kind::kFailed,
                              .rank = spec_.ranks[i],
                              .status = w.process.status()};
      stop_all(SIGTERM);
    } else if (w.process.status().ok() && !exit_by_ && spec_.exit_timeout.count() > 0) {
      exit_by_ = Deadline::after(spec_.exit_timeout);
      first_exit_rank_ = spec_.ranks[i];
    }
  }
}

void WorkerGroup::on_deadlines() {
  if (exit_by_ && exit_by_->expired() && outcome_.kind == GroupOutcome::Kind::kSucceeded &&
      live_count() > 0) {
    const auto hung =
        std::find_if(workers_.begin(), workers_.end(), [](const Worker& w) { return !w.done; });
    const std::size_t i = static_cast<std::size_t>(hung - workers_.begin());
    outcome_ = GroupOutcome{
        .kind = GroupOutcome::Kind::kFailed,
        .rank = spec_.ranks[i],
        .status = ExitStatus{.code = 1},
        .hung = "did not exit within " + seconds_text(spec_.exit_timeout) + " of rank " +
                std::to_string(first_exit_rank_) +
                " exiting with code 0 (hung, in teardown? --exit-timeout sets the limit)"};
    stop_all(SIGTERM);
  }
  if (kill_at_ && !give_up_at_ && kill_at_->expired() && live_count() > 0) {
    log(std::to_string(live_count()) + " workers still running " + seconds_text(spec_.stop_grace) +
        " after being told to stop; killing them (SIGKILL)");
    kill_all();
  }
  if (!give_up_at_ || !give_up_at_->expired()) return;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i].done) continue;
    log("rank " + std::to_string(spec_.ranks[i]) + " (pid " +
        std::to_string(workers_[i].process.pid()) +
        ") did not exit after SIGKILL; leaving it behind");
    workers_[i].done = true;
  }
}

void WorkerGroup::stop_all(int sig) {
  for (Worker& w : workers_) {
    if (w.done) continue;
    w.stopped = is_stopped(w.process.pid());
    w.process.signal_group(sig);
    if (w.stopped) w.process.signal_group(SIGCONT);  // or the signal waits for it
  }
  if (!kill_at_) kill_at_ = Deadline::after(spec_.stop_grace);
}

void WorkerGroup::kill_all() {
  for (Worker& w : workers_) {
    if (!w.done) w.process.signal_group(SIGKILL);
  }
  if (!give_up_at_) give_up_at_ = Deadline::after(kKillWait);
}

int WorkerGroup::live_count() const {
  return static_cast<int>(
      std::count_if(workers_.begin(), workers_.end(), [](const Worker& w) { return !w.done; }));
}

bool WorkerGroup::finished() {
  if (live_count() > 0) return false;
  if (!drain_until_) drain_until_ = Deadline::after(kDrainWait);
  const bool open = std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) {
    return static_cast<bool>(w.out.fd) || static_cast<bool>(w.err.fd);
  });
  return !open || drain_until_->expired();
}

void WorkerGroup::finish() {
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    Worker& w = workers_[i];
    close_stream(w.out);
    close_stream(w.err);
    const bool exited = w.process.exited();
    std::string ending = !exited ? "did not exit after SIGKILL" : w.process.status().describe();
    if (outcome_.rank == spec_.ranks[i] && !outcome_.hung.empty()) ending = outcome_.hung;
    if (w.stopped) ending = "was stopped (SIGSTOP, or a debugger) when the job ended; it " + ending;
    outcome_.endings.push_back(std::move(ending));
    outcome_.stopped.push_back(w.stopped);
    // One given up on after SIGKILL has been waited for long enough already.
    w.process.reap(exited ? Seconds(5.0) : Seconds(0));
  }
  progress_.clear();  // the launcher's last lines, and the shell's prompt, on a clean line
}

}  // namespace weft::launch::internal
