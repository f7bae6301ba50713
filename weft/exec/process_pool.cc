#include "weft/exec/process_pool.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "weft/base/system.h"
#include "weft/base/unique_fd.h"
#include "weft/exec/internal/process_worker.h"

namespace weft {
namespace internal {
namespace {

using TaskPtr = std::shared_ptr<RemoteTaskBase>;

// How often the I/O thread checks on workers even when no socket has news: bounds how long
// a death hidden from the socket (its end kept open by another process) goes unnoticed.
constexpr int kPollMillis = 200;
// How long a worker that closed its socket may take to exit before it is killed.
constexpr auto kExitGrace = std::chrono::seconds(1);

struct Worker {
  pid_t pid = -1;
  UniqueFd fd;         // closed through close_worker_socket, which unregisters it first
  TaskPtr task;        // the task it runs, or null when idle
  std::string outbox;  // request bytes not yet written
  std::size_t sent = 0;
  std::string inbox;  // reply bytes received so far
};

// Waits until `give_up` for `pid` to exit, then kills and reaps it; returns the wait status.
int reap(pid_t pid, std::chrono::steady_clock::time_point give_up) {
  int status = 0;
  while (std::chrono::steady_clock::now() < give_up) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

std::chrono::steady_clock::time_point grace_from_now() {
  return std::chrono::steady_clock::now() + kExitGrace;
}

}  // namespace

class ProcessPoolImpl {
 public:
  explicit ProcessPoolImpl(std::size_t max_workers);
  ~ProcessPoolImpl();

  void enqueue(TaskPtr task);
  void shutdown(bool wait, bool cancel_futures);
  std::size_t max_workers() const { return workers_.size(); }
  std::vector<pid_t> worker_pids() const {
    std::lock_guard lock(mu_);
    return pids_;
  }

 private:
  void io_loop();
  void wake();
  void start_worker(std::size_t i);
  void dispatch();
  void flush(Worker& w);
  void receive(std::size_t i);
  static bool read_available(Worker& w);
  bool handle_replies(Worker& w);
  void check_exited();
  void on_death(std::size_t i, int status, const std::string& extra);
  void mark_broken(const std::string& reason);
  bool finished() const;
  void stop_workers();
  static void close_worker_socket(Worker& w);

  std::vector<Worker> workers_;  // owned by the I/O thread once it runs
  UniqueFd wake_fd_;             // registered in PoolFds until the destructor
  std::thread io_thread_;
  std::thread::id io_thread_id_;  // set once the thread runs; read without joining it

  mutable std::mutex mu_;
  std::deque<TaskPtr> pending_;  // guarded by mu_
  std::vector<pid_t> pids_;      // guarded by mu_
  bool shutdown_ = false;        // guarded by mu_
  std::string broken_reason_;    // guarded by mu_
  std::mutex join_mu_;
};

ProcessPoolImpl::ProcessPoolImpl(std::size_t max_workers)
    : workers_(max_workers == 0 ? available_cores() : max_workers) {
  wake_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_) throw SystemError("ProcessPoolExecutor: eventfd", errno);
  PoolFds::instance().add(wake_fd_.get());
  pids_.assign(workers_.size(), -1);
  try {
    for (std::size_t i = 0; i < workers_.size(); ++i) start_worker(i);
    io_thread_ = std::thread([this] { io_loop(); });
  } catch (...) {
    stop_workers();
    PoolFds::instance().remove(wake_fd_.get());
    wake_fd_.reset();
    throw;
  }
  io_thread_id_ = io_thread_.get_id();
}

ProcessPoolImpl::~ProcessPoolImpl() {
  shutdown(/*wait=*/true, /*cancel_futures=*/false);
  PoolFds::instance().remove(wake_fd_.get());
  wake_fd_.reset();
}

void ProcessPoolImpl::enqueue(TaskPtr task) {
  if (task->request().size() > kMaxPayload) {
    throw InvalidArgument("ProcessPoolExecutor::submit: the encoded arguments take " +
                          std::to_string(task->request().size()) +
                          " bytes, more than a message may carry (4 GiB); pass less data "
                          "per task, for example through map with a smaller chunksize");
  }
  {
    std::lock_guard lock(mu_);
    if (shutdown_) {
      throw ExecutorShutdown(
          "submit() after shutdown(): this ProcessPoolExecutor accepts no more work; create a "
          "new one");
    }
    if (!broken_reason_.empty()) throw BrokenProcessPool(broken_reason_);
    pending_.push_back(std::move(task));
  }
  wake();
}

void ProcessPoolImpl::wake() {
  const std::uint64_t one = 1;
  // A full counter (never in practice) still leaves the eventfd readable, which is enough.
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
}

void ProcessPoolImpl::shutdown(bool wait, bool cancel_futures) {
  std::deque<TaskPtr> cancelled;
  {
    std::lock_guard lock(mu_);
    shutdown_ = true;
    if (cancel_futures) cancelled.swap(pending_);
  }
  // Outside the lock: cancelling runs done-callbacks, which may call back into the pool.
  for (auto& task : cancelled) task->cancel();
  wake();
  // A done-callback runs on the I/O thread, which cannot wait for itself to finish.
  if (!wait || std::this_thread::get_id() == io_thread_id_) return;
  std::lock_guard join_lock(join_mu_);
  if (io_thread_.joinable()) io_thread_.join();
}

void ProcessPoolImpl::start_worker(std::size_t i) {
  SpawnedWorker spawned = spawn_worker();
  const int fd = spawned.fd.get();
  // Non-blocking, so that a stopped or slow worker can never stall the I/O thread.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  workers_[i] = Worker{.pid = spawned.pid, .fd = std::move(spawned.fd)};
  std::lock_guard lock(mu_);
  pids_[i] = spawned.pid;
}

void ProcessPoolImpl::io_loop() {
  std::vector<pollfd> fds;
  while (!finished()) {
    dispatch();
    fds.assign(1, pollfd{wake_fd_.get(), POLLIN, 0});
    for (const Worker& w : workers_) {
      const short events = POLLIN | (w.sent < w.outbox.size() ? POLLOUT : 0);
      fds.push_back(pollfd{w.fd.get(), events, 0});
    }
    const int ready = ::poll(fds.data(), fds.size(), kPollMillis);
    if (ready < 0 && errno != EINTR) mark_broken(std::string("poll failed: ") + strerror(errno));
    if (fds[0].revents & POLLIN) {
      std::uint64_t count;
      [[maybe_unused]] const ssize_t n = ::read(wake_fd_.get(), &count, sizeof(count));
    }
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      const short revents = fds[i + 1].revents;
      if (revents & POLLOUT) flush(workers_[i]);
      if (revents & (POLLIN | POLLHUP | POLLERR)) receive(i);
    }
    check_exited();
  }
  stop_workers();
}

bool ProcessPoolImpl::finished() const {
  for (const Worker& w : workers_) {
    if (w.task) return false;
  }
  std::lock_guard lock(mu_);
  // A broken pool has failed its pending tasks already; a shut-down one runs them first.
  return (shutdown_ || !broken_reason_.empty()) && pending_.empty();
}

void ProcessPoolImpl::dispatch() {
  for (Worker& w : workers_) {
    if (w.task || !w.fd) continue;
    TaskPtr task;
    {
      std::lock_guard lock(mu_);
      while (!pending_.empty() && !task) {
        task = std::move(pending_.front());
        pending_.pop_front();
        if (!task->start()) task.reset();  // cancelled while queued
      }
    }
    if (!task) return;
    w.outbox.clear();
    w.sent = 0;
    append_frame(w.outbox, kRequestMagic, FrameKind::kCall, task->request());
    task->release_request();
    w.task = std::move(task);
    flush(w);
  }
}

void ProcessPoolImpl::flush(Worker& w) {
  while (w.sent < w.outbox.size()) {
    const ssize_t n =
        ::send(w.fd.get(), w.outbox.data() + w.sent, w.outbox.size() - w.sent, MSG_NOSIGNAL);
    if (n > 0) {
      w.sent += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return;  // EAGAIN: poll for POLLOUT; EPIPE: the death shows up as POLLHUP
    }
  }
  std::string().swap(w.outbox);
  w.sent = 0;
}

void ProcessPoolImpl::receive(std::size_t i) {
  Worker& w = workers_[i];
  const bool eof = read_available(w);
  if (!handle_replies(w)) {
    ::kill(w.pid, SIGKILL);
    on_death(i, reap(w.pid, grace_from_now()), " (it sent a malformed reply and was killed)");
  } else if (eof) {
    on_death(i, reap(w.pid, grace_from_now()), "");
  }
}

// Appends what the socket holds to the inbox; true once the worker's end is closed.
bool ProcessPoolImpl::read_available(Worker& w) {
  char buffer[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(w.fd.get(), buffer, sizeof(buffer));
    if (n > 0) {
      w.inbox.append(buffer, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    }
  }
}

// Completes the task for every whole reply in the inbox; false on a malformed frame.
bool ProcessPoolImpl::handle_replies(Worker& w) {
  while (w.inbox.size() >= sizeof(FrameHeader)) {
    FrameHeader header;
    std::memcpy(&header, w.inbox.data(), sizeof(header));
    const bool kind_ok = header.kind == FrameKind::kOk || header.kind == FrameKind::kError;
    if (header.magic != kReplyMagic || !kind_ok || header.length > kMaxPayload || !w.task) {
      return false;
    }
    if (w.inbox.size() - sizeof(header) < header.length) break;  // wait for the rest
    const std::string_view payload(w.inbox.data() + sizeof(header), header.length);
    ByteReader reader(payload);
    TaskPtr task = std::move(w.task);
    if (header.kind == FrameKind::kOk) {
      task->complete(reader);
    } else {
      try {
        auto type = reader.read<std::string>();
        auto what = reader.read<std::string>();
        task->fail(std::make_exception_ptr(RemoteError(std::move(type), std::move(what))));
      } catch (const Error& e) {
        task->fail(std::current_exception());
      }
    }
    w.inbox.erase(0, sizeof(header) + header.length);
  }
  return true;
}

void ProcessPoolImpl::check_exited() {
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    int status = 0;
    if (workers_[i].pid > 0 && ::waitpid(workers_[i].pid, &status, WNOHANG) == workers_[i].pid) {
      on_death(i, status, "");
    }
  }
}

void ProcessPoolImpl::on_death(std::size_t i, int status, const std::string& extra) {
  Worker& w = workers_[i];
  const std::string what =
      "worker process " + std::to_string(w.pid) + " " + describe_exit_status(status) + extra;
  // A reply that arrived just before the death still completes its task.
  read_available(w);
  handle_replies(w);
  close_worker_socket(w);
  if (w.task) {
    w.task->fail(std::make_exception_ptr(BrokenProcessPool(
        what + " while running this task; the pool replaced the worker and keeps serving")));
  }
  workers_[i] = Worker{};
  {
    std::lock_guard lock(mu_);
    pids_[i] = -1;
    if (shutdown_ && pending_.empty()) return;  // no replacement needed any more
  }
  try {
    start_worker(i);
  } catch (const Error& e) {
    mark_broken(what + ", and no replacement could be started: " + e.what());
  }
}

void ProcessPoolImpl::mark_broken(const std::string& reason) {
  std::deque<TaskPtr> orphans;
  {
    std::lock_guard lock(mu_);
    if (broken_reason_.empty()) {
      broken_reason_ = "the ProcessPoolExecutor is broken: " + reason + "; create a new one";
    }
    orphans.swap(pending_);
  }
  const auto error = std::make_exception_ptr(BrokenProcessPool(broken_reason_));
  for (auto& task : orphans) {
    if (task->start()) task->fail(error);
  }
}

void ProcessPoolImpl::stop_workers() {
  // Closing a worker's socket is its signal to exit. Close them all first, then give all the
  // workers one shared grace period, then kill whoever is left.
  for (Worker& w : workers_) close_worker_socket(w);
  const auto give_up = grace_from_now();
  for (Worker& w : workers_) {
    if (w.pid > 0) reap(w.pid, give_up);
    w = Worker{};
  }
  std::lock_guard lock(mu_);
  pids_.assign(pids_.size(), -1);
}

void ProcessPoolImpl::close_worker_socket(Worker& w) {
  if (!w.fd) return;
  // Unregistered before it is closed: a worker forked in between would otherwise close
  // whatever descriptor took the number next (its own socket, even).
  PoolFds::instance().remove(w.fd.get());
  w.fd.reset();
}

}  // namespace internal

ProcessPoolExecutor::ProcessPoolExecutor(std::size_t max_workers)
    : impl_(std::make_unique<internal::ProcessPoolImpl>(max_workers)) {}

ProcessPoolExecutor::~ProcessPoolExecutor() = default;

void ProcessPoolExecutor::shutdown(bool wait, bool cancel_futures) {
  impl_->shutdown(wait, cancel_futures);
}

std::size_t ProcessPoolExecutor::max_workers() const { return impl_->max_workers(); }

std::vector<pid_t> ProcessPoolExecutor::worker_pids() const { return impl_->worker_pids(); }

void ProcessPoolExecutor::enqueue(std::shared_ptr<internal::RemoteTaskBase> task) {
  impl_->enqueue(std::move(task));
}

}  // namespace weft
