#include "tests/support/subprocess.h"

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
#include <exception>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

extern char** environ;

namespace weft::test {
namespace {

std::vector<std::string> make_env(const EnvChanges& env) {
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

// The exit code a shell would report for a waitpid status.
int exit_code_of(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

}  // namespace

Subprocess::Subprocess(const std::vector<std::string>& argv, const EnvChanges& env) {
  int out[2];
  int err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) std::abort();
  out_fd_.reset(out[0]);
  const UniqueFd out_write(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) std::abort();
  err_fd_.reset(err[0]);
  const UniqueFd err_write(err[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_write.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err_write.get(), 2);
  const std::vector<std::string> env_strings = make_env(env);
  const std::vector<char*> c_argv = c_strings(argv);
  const std::vector<char*> c_env = c_strings(env_strings);
  const int rc = ::posix_spawn(&pid_, c_argv[0], &actions, nullptr, c_argv.data(), c_env.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    std::fprintf(stderr, "Subprocess: cannot start %s\n", c_argv[0]);
    std::abort();
  }
  // The write ends close here: the child holds the only copies, so end-of-file on out_fd_
  // and err_fd_ means it (and whatever it started) closed them.
}

Subprocess::~Subprocess() {
  if (!exit_code_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

void Subprocess::read_some(int timeout_ms) {
  // An empty UniqueFd holds -1, which poll ignores.
  pollfd fds[2] = {{out_fd_.get(), POLLIN, 0}, {err_fd_.get(), POLLIN, 0}};
  if (::poll(fds, 2, timeout_ms) <= 0) return;
  std::string* sinks[2] = {&out_, &err_};
  UniqueFd* fd_of[2] = {&out_fd_, &err_fd_};
  for (int i = 0; i < 2; ++i) {
    if (fds[i].revents == 0) continue;
    char buffer[65536];
    const ssize_t n = ::read(fd_of[i]->get(), buffer, sizeof(buffer));
    if (n > 0) {
      sinks[i]->append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      fd_of[i]->reset();
    }
  }
}

bool Subprocess::try_reap() {
  if (exit_code_) return true;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
  exit_code_ = exit_code_of(status);
  return true;
}

bool Subprocess::wait_for_stdout(const std::function<bool(const std::string&)>& pred,
                                 Seconds timeout) {
  const Deadline deadline = Deadline::after(timeout);
  while (!pred(out_) && !deadline.expired() && (out_fd_ || err_fd_)) read_some(50);
  return pred(out_);
}

int Subprocess::wait(Seconds timeout) {
  const Deadline deadline = Deadline::after(timeout);
  while (!deadline.expired()) {
    const bool open = out_fd_ || err_fd_;
    if (open) read_some(50);
    if (try_reap() && !open) return *exit_code_;
    if (!open) ::usleep(5000);
  }
  return -1;  // the destructor kills it
}

Finished run(const std::vector<std::string>& argv, const EnvChanges& env, Seconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  Subprocess p(argv, env);
  const int code = p.wait(timeout);
  const Seconds took = std::chrono::steady_clock::now() - start;
  return {code, p.out(), p.err(), took.count()};
}

pid_t fork_child(const std::function<void()>& body) {
  std::fflush(nullptr);  // buffered output would otherwise be printed twice
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("fork_child: fork");
    std::abort();
  }
  if (pid == 0) {
    int code = 0;
    try {
      body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child %d: %s\n", ::getpid(), e.what());
      code = 1;
    }
    std::fflush(nullptr);
    ::_exit(code);  // no gtest teardown or static destructors in the child
  }
  return pid;
}

int wait_child(pid_t pid, Seconds timeout) {
  const Deadline deadline = Deadline::after(timeout);
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return exit_code_of(status);
    if (r < 0 && errno != EINTR) return -1;  // not our child, or reaped already
    if (deadline.expired()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return -1;
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

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string word; in >> word;) words.push_back(word);
  return words;
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

}  // namespace weft::test
