#include "tests/launch/subprocess.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

extern char** environ;

namespace weft::launch::testing {
namespace {

std::vector<std::string> make_env(const std::map<std::string, std::optional<std::string>>& env) {
  std::vector<std::string> out;
  for (char** p = environ; *p != nullptr; ++p) {
    const std::string entry(*p);
    if (!env.contains(entry.substr(0, entry.find('=')))) out.push_back(entry);
  }
  for (const auto& [name, value] : env) {
    if (value) out.push_back(name + "=" + *value);
  }
  return out;
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

Subprocess::Subprocess(const std::vector<std::string>& argv,
                       const std::map<std::string, std::optional<std::string>>& env) {
  int out[2];
  int err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) std::abort();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  const std::vector<std::string> env_strings = make_env(env);
  const std::vector<char*> c_argv = c_strings(argv);
  const std::vector<char*> c_env = c_strings(env_strings);
  const int rc = ::posix_spawn(&pid_, c_argv[0], &actions, nullptr, c_argv.data(), c_env.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    std::fprintf(stderr, "Subprocess: cannot start %s\n", c_argv[0]);
    std::abort();
  }
  out_fd_ = out[0];
  err_fd_ = err[0];
}

Subprocess::~Subprocess() {
  if (!exit_code_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

void Subprocess::read_some(int timeout_ms) {
  pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
  if (::poll(fds, 2, timeout_ms) <= 0) return;
  std::string* sinks[2] = {&out_, &err_};
  int* fd_of[2] = {&out_fd_, &err_fd_};
  for (int i = 0; i < 2; ++i) {
    if (fds[i].revents == 0) continue;
    char buffer[65536];
    const ssize_t n = ::read(*fd_of[i], buffer, sizeof(buffer));
    if (n > 0) {
      sinks[i]->append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      ::close(*fd_of[i]);
      *fd_of[i] = -1;  // poll ignores negative descriptors
    }
  }
}

bool Subprocess::try_reap() {
  if (exit_code_) return true;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
  exit_code_ = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  return true;
}

bool Subprocess::wait_for_stdout(const std::function<bool(const std::string&)>& pred,
                                 Seconds timeout) {
  const Deadline deadline = Deadline::after(timeout);
  while (!pred(out_) && !deadline.expired() && (out_fd_ >= 0 || err_fd_ >= 0)) read_some(50);
  return pred(out_);
}

int Subprocess::wait(Seconds timeout) {
  const Deadline deadline = Deadline::after(timeout);
  while (!deadline.expired()) {
    const bool open = out_fd_ >= 0 || err_fd_ >= 0;
    if (open) read_some(50);
    if (try_reap() && !open) return *exit_code_;
    if (!open) ::usleep(5000);
  }
  return -1;  // the destructor kills it
}

Finished run(const std::vector<std::string>& argv,
             const std::map<std::string, std::optional<std::string>>& env, Seconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  Subprocess p(argv, env);
  const int code = p.wait(timeout);
  const Seconds took = std::chrono::steady_clock::now() - start;
  return {code, p.out(), p.err(), took.count()};
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, comm, state;
  stat >> pid_field >> comm >> state;
  return state == "Z";
}

std::string unique_tag() {
  static int counter = 0;
  return "weft-test-tag-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
}

std::vector<pid_t> live_processes_with(const std::string& arg) {
  std::vector<pid_t> found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  while (const dirent* e = ::readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream file("/proc/" + std::string(e->d_name) + "/cmdline");
    const std::string cmdline((std::istreambuf_iterator<char>(file)), {});
    // Arguments are separated by NULs: match a whole one.
    if (cmdline.find('\0' + arg + '\0') != std::string::npos && !process_gone(pid)) {
      found.push_back(pid);
    }
  }
  ::closedir(proc);
  return found;
}

}  // namespace weft::launch::testing
