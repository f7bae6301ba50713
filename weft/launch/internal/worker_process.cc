#include "weft/launch/internal/worker_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>
#include <utility>

#include "weft/base/deadline.h"
#include "weft/base/error.h"
#include "weft/launch/internal/signal_pipe.h"

namespace weft::launch::internal {
namespace {

// How long a child may take from fork to execve before we stop waiting to hear whether
// execve failed; it then counts as started (a late failure shows as exit code 127).
constexpr Seconds kExecReportWait{10.0};
constexpr int kExitExecFailed = 127;

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw SystemError("pipe2 for a worker (raise ulimit -n or lower --nproc-per-node)", errno);
  }
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

struct ChildSetup {
  const char* path;
  char* const* argv;
  char* const* envp;
  const sigset_t* mask;  // the mask to give back before execve
  pid_t parent;
  int stdin_fd, stdout_fd, stderr_fd, status_fd;
  int cpu;
  int inherit_fd;
};

// Runs in the forked child: only async-signal-safe calls, nothing allocated.
[[noreturn]] void exec_child(const ChildSetup& s) {
  for (int sig : SignalPipe::kHandled) ::signal(sig, SIG_DFL);
  ::sigprocmask(SIG_SETMASK, s.mask, nullptr);
  ::setpgid(0, 0);
  // A worker whose launcher is gone has nobody to read its output or stop it.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != s.parent) ::_exit(kExitExecFailed);  // the launcher died already
  if (s.cpu >= 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(s.cpu, &one);
    ::sched_setaffinity(0, sizeof(one), &one);  // best effort: an unbound worker still runs
  }
  if (::dup2(s.stdin_fd, 0) < 0 || ::dup2(s.stdout_fd, 1) < 0 || ::dup2(s.stderr_fd, 2) < 0) {
    ::_exit(kExitExecFailed);
  }
  // Descriptors the launcher inherited without close-on-exec are not the worker's
  // business (Python's close_fds does the same); status_fd must stay open until execve.
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  if (s.inherit_fd >= 3) ::fcntl(s.inherit_fd, F_SETFD, 0);
  ::execve(s.path, s.argv, s.envp);
  const int err = errno;
  [[maybe_unused]] const ssize_t n = ::write(s.status_fd, &err, sizeof(err));
  ::_exit(kExitExecFailed);
}

// The errno of the child's failed execve, or 0 once it exec'd (the close-on-exec pipe
// reached end-of-file) or did not say within kExecReportWait.
int read_exec_errno(int fd) {
  const Deadline deadline = Deadline::after(kExecReportWait);
  int err = 0;
  while (!deadline.expired()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.remaining());
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()) + 1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return 0;
    const ssize_t n = ::read(fd, &err, sizeof(err));
    if (n < 0 && errno == EINTR) continue;
    return n == static_cast<ssize_t>(sizeof(err)) ? err : 0;
  }
  return 0;
}

pid_t fork_child(const ChildSetup& setup, sigset_t* old_mask) {
  // All signals blocked across fork: the child must not run the launcher's handlers
  // before it has reset them.
  sigset_t all;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, old_mask);
  const pid_t pid = ::fork();
  if (pid == 0) exec_child(setup);
  const int err = errno;
  ::pthread_sigmask(SIG_SETMASK, old_mask, nullptr);
  errno = err;
  return pid;
}

}  // namespace

WorkerProcess::Started WorkerProcess::start(const SpawnRequest& request) {
  Pipe out = make_pipe();
  Pipe err = make_pipe();
  Pipe status = make_pipe();
  UniqueFd null_in(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!null_in) throw SystemError("open /dev/null for a worker's stdin", errno);
  const std::vector<char*> argv = c_strings(request.argv);
  const std::vector<char*> envp = c_strings(request.env);
  sigset_t old_mask;
  // The child restores old_mask, which fork_child fills before forking.
  const ChildSetup setup{request.path.c_str(), argv.data(),   envp.data(),       &old_mask,
                         ::getpid(),           null_in.get(), out.write.get(),   err.write.get(),
                         status.write.get(),   request.cpu,   request.inherit_fd};
  const pid_t pid = fork_child(setup, &old_mask);
  if (pid < 0) {
    throw SystemError("fork a worker (raise ulimit -u or lower --nproc-per-node)", errno);
  }
  // The child does this too; doing it here as well means the group exists before we
  // might signal it, whichever process runs first. EACCES after its execve is harmless.
  ::setpgid(pid, pid);
  WorkerProcess process(pid);
  status.write.reset();
  out.write.reset();
  err.write.reset();
  if (const int exec_errno = read_exec_errno(status.read.get()); exec_errno != 0) {
    process.reap();
    throw SystemError("cannot execute " + request.path +
                          " (is it a program for this machine, or a script starting with #!?)",
                      exec_errno);
  }
  ::fcntl(out.read.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(err.read.get(), F_SETFL, O_NONBLOCK);
  return Started{std::move(process), std::move(out.read), std::move(err.read)};
}

WorkerProcess::WorkerProcess(WorkerProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      exited_(other.exited_),
      reaped_(std::exchange(other.reaped_, true)),
      status_(other.status_) {}

WorkerProcess& WorkerProcess::operator=(WorkerProcess&& other) noexcept {
  if (this == &other) return *this;
  reap();
  pid_ = std::exchange(other.pid_, -1);
  exited_ = other.exited_;
  reaped_ = std::exchange(other.reaped_, true);
  status_ = other.status_;
  return *this;
}

WorkerProcess::~WorkerProcess() { reap(); }

bool WorkerProcess::exited() {
  if (exited_ || reaped_) return true;
  siginfo_t info = {};
  // WNOWAIT: see the exit but leave the zombie, keeping the pid and group id ours.
  const int r = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
  if (r == 0 && info.si_pid == pid_) {
    exited_ = true;
    if (info.si_code == CLD_EXITED) {
      status_ = ExitStatus{.code = info.si_status};
    } else {
      status_ = ExitStatus{.signal = info.si_status};
    }
  } else if (r < 0 && errno == ECHILD) {
    // Something else in this process reaped it, so its status is lost; it cannot be
    // counted as a success.
    exited_ = true;
    status_ = ExitStatus{.code = kExitExecFailed};
  }
  return exited_;
}

void WorkerProcess::signal_group(int sig) {
  if (reaped_) return;
  if (::kill(-pid_, sig) != 0) ::kill(pid_, sig);
}

void WorkerProcess::reap(Seconds wait) {
  if (reaped_) return;
  reaped_ = true;
  // The leader is not yet collected, so -pid_ is still this worker's group: this also
  // ends anything the worker left behind in it.
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  const Deadline deadline = Deadline::after(wait);
  int wait_status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid_, &wait_status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR) || deadline.expired()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace weft::launch::internal
