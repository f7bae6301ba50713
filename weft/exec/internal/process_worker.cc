#include "weft/exec/internal/process_worker.h"

#include <cxxabi.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <typeinfo>
#include <utility>

#include "weft/base/error.h"
#include "weft/exec/internal/remote_task.h"

namespace weft::internal {
namespace {

// Exit codes a worker uses when it cannot go on; the parent reports them as such.
constexpr int kExitProtocolError = 70;
constexpr int kExitIoError = 71;

// Reads exactly `size` bytes; false on end-of-file before the first byte.
bool read_full(int fd, void* data, std::size_t size) {
  auto* p = static_cast<char*>(data);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, p + done, size - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n == 0) {
      if (done == 0) return false;
      _exit(kExitIoError);  // the parent closed mid-frame
    } else if (errno != EINTR) {
      _exit(kExitIoError);
    }
  }
  return true;
}

void write_full(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n >= 0) {
      done += static_cast<std::size_t>(n);
    } else if (errno != EINTR) {
      _exit(kExitIoError);  // the parent is gone: nobody to report to
    }
  }
}

std::string run_request(const std::string& payload, FrameKind& kind) {
  ByteWriter out;
  try {
    ByteReader in(payload);
    const auto trampoline = reinterpret_cast<Trampoline>(in.read<std::uint64_t>());
    const auto fn = static_cast<std::uintptr_t>(in.read<std::uint64_t>());
    trampoline(fn, in, out);
    kind = FrameKind::kOk;
  } catch (...) {
    const auto [type, what] = describe_current_exception();
    out = ByteWriter();
    out.write(type);
    out.write(what);
    kind = FrameKind::kError;
  }
  return std::move(out.buffer());
}

[[noreturn]] void serve(int fd) {
  std::string payload;
  std::string reply;
  for (;;) {
    FrameHeader header;
    if (!read_full(fd, &header, sizeof(header))) _exit(0);  // the pool shut down
    if (header.magic != kRequestMagic || header.kind != FrameKind::kCall ||
        header.length > kMaxPayload) {
      _exit(kExitProtocolError);
    }
    payload.resize(header.length);
    if (header.length > 0 && !read_full(fd, payload.data(), payload.size())) {
      _exit(kExitIoError);
    }
    FrameKind kind;
    const std::string result = run_request(payload, kind);
    // Output the task printed must appear before the caller sees the result.
    std::fflush(stdout);
    std::fflush(stderr);
    reply.clear();
    append_frame(reply, kReplyMagic, kind, result);
    write_full(fd, reply);
  }
}

}  // namespace

std::pair<std::string, std::string> describe_current_exception() {
  const std::type_info* type = abi::__cxa_current_exception_type();
  std::string name = "unknown exception";
  if (type != nullptr) {
    int status = 0;
    std::unique_ptr<char, decltype(&std::free)> demangled(
        abi::__cxa_demangle(type->name(), nullptr, nullptr, &status), &std::free);
    name = status == 0 && demangled ? demangled.get() : type->name();
  }
  try {
    throw;
  } catch (const std::exception& e) {
    return {name, e.what()};
  } catch (...) {
    return {name, "(not derived from std::exception)"};
  }
}

void append_frame(std::string& out, std::uint32_t magic, FrameKind kind,
                  const std::string& payload) {
  const FrameHeader header{magic, kind, payload.size()};
  out.append(reinterpret_cast<const char*>(&header), sizeof(header));
  out.append(payload);
}

PoolFds& PoolFds::instance() {
  static PoolFds registry;
  return registry;
}

void PoolFds::add(int fd) {
  std::lock_guard lock(mu_);
  fds_.insert(fd);
}

void PoolFds::remove(int fd) {
  std::lock_guard lock(mu_);
  fds_.erase(fd);
}

SpawnedWorker spawn_worker() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw SystemError("ProcessPoolExecutor: socketpair", errno);
  }
  UniqueFd parent_end(sv[0]);
  UniqueFd child_end(sv[1]);
  PoolFds& registry = PoolFds::instance();
  // Held across the fork, so that no pool registers a descriptor the child would miss.
  std::lock_guard lock(registry.mu_);
  // Buffered output would otherwise be printed twice, once by each process.
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    throw SystemError("ProcessPoolExecutor: fork (lower max_workers or raise ulimit -u)", errno);
  }
  if (pid == 0) {
    parent_end.reset();
    // Other pools' descriptors, which this child inherited but does not own.
    for (int fd : registry.fds_) ::close(fd);
    serve(child_end.get());  // never returns: the child ends in _exit
  }
  child_end.reset();
  registry.fds_.insert(parent_end.get());
  return {pid, std::move(parent_end)};
}

std::string describe_exit_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    std::string text = "exited with code " + std::to_string(code);
    if (code == kExitProtocolError) text += " (it received a malformed request)";
    if (code == kExitIoError) text += " (its connection to the pool broke)";
    return text;
  }
  return "ended with wait status " + std::to_string(status);
}

}  // namespace weft::internal
