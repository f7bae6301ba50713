#include "weft/launch/launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "weft/base/check.h"
#include "weft/base/error.h"
#include "weft/base/unique_fd.h"
#include "weft/launch/internal/flight_rings.h"
#include "weft/launch/internal/output_stream.h"
#include "weft/launch/internal/signal_pipe.h"
#include "weft/launch/internal/worker_group.h"
#include "weft/launch/worker_env.h"

extern char** environ;

namespace weft::launch {
namespace {

using internal::GroupOutcome;

// With fd 0, 1 or 2 closed, a pipe could take its number and then be closed by execve
// (close-on-exec) in the very worker meant to write to it.
void ensure_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    UniqueFd null_fd(::open("/dev/null", O_RDWR));     // takes the lowest free number: fd
    if (null_fd.get() == fd) (void)null_fd.release();  // stays open as fd for good
  }
}

// `restarts_left`: of --max-restarts, what earlier attempts have not used (in place or not).
internal::GroupSpec group_spec(const JobPlan& plan, JobPorts ports, int restart_count,
                               int restarts_left, const internal::FlightRings& rings) {
  const LaunchOptions& o = plan.options;
  std::vector<std::string> argv{o.program};
  argv.insert(argv.end(), o.args.begin(), o.args.end());
  internal::GroupSpec spec{.stop_grace = o.stop_grace,
                           .exit_timeout = o.exit_timeout,
                           .replacements = o.recover != "restart" ? restarts_left : 0,
                           .elastic = o.recover == "elastic"};
  for (int local = 0; local < o.nproc_per_node; ++local) {
    EnvVars vars = worker_variables(plan, ports, local, restart_count);
    const int ring = rings.fd(local);
    if (ring >= 0) vars.emplace_back("WEFT_FLIGHT_RECORDER_FD", std::to_string(ring));
    const int cpu = plan.cpus.empty() ? -1 : plan.cpus[static_cast<std::size_t>(local)];
    spec.workers.push_back(
        {plan.program_path, argv, merge_environment(environ, vars, worker_defaults()), cpu, ring});
    spec.ranks.push_back(o.node_rank * o.nproc_per_node + local);
  }
  return spec;
}

// The store's port, after starting the store when this node hosts it.
int start_store(const JobPlan& plan, const RendezvousFactory& start_rendezvous,
                std::unique_ptr<RendezvousHost>& store) {
  if (!plan.hosts_store) return plan.options.master_port;
  if (!start_rendezvous) {
    throw InvalidArgument(
        "launch: node 0 hosts the job's store, but no RendezvousFactory was "
        "given; pass one that starts the store");
  }
  store = start_rendezvous(plan.bind_host, plan.options.master_port, plan.token);
  WEFT_CHECK(store != nullptr);
  return store->port();
}

// A port nothing listens on now, on any interface, where PyTorch's TCPStore binds ([::]):
// the system's pick for port 0 on the IPv6 wildcard (which covers IPv4 too), or on IPv4's
// where IPv6 is off. Another process could take it before the workers do, as with
// torchrun's free port; the window is short.
int free_port() {
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_addr = in6addr_any;
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  v4.sin_addr.s_addr = htonl(INADDR_ANY);
  int error = 0;
  for (sockaddr* addr : {reinterpret_cast<sockaddr*>(&v6), reinterpret_cast<sockaddr*>(&v4)}) {
    socklen_t length = addr->sa_family == AF_INET6 ? sizeof v6 : sizeof v4;
    UniqueFd fd(::socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd && ::bind(fd.get(), addr, length) == 0 && ::getsockname(fd.get(), addr, &length) == 0) {
      return ntohs(addr->sa_family == AF_INET6 ? v6.sin6_port : v4.sin_port);
    }
    error = errno;  // before the socket's close can change it
  }
  throw SystemError("launch: finding a free port for the workers' MASTER_PORT", error);
}

// The store's port, and MASTER_PORT: with several nodes the one after --master-port (every
// node must pass the same, without talking to the others), on one node any free port.
JobPorts job_ports(const JobPlan& plan, int store_port) {
  if (plan.options.nnodes > 1) return {store_port, plan.options.master_port + 1};
  return {store_port, free_port()};
}

// Records the workers' deaths in the job's store: node 0 in the store it hosts, another node
// through a connection to it, made again after a failure. A death that cannot be recorded is
// said and passed over: the workers then wait out their own deadlines instead.
class DeathNotices {
 public:
  DeathNotices(const JobPlan& plan, int store_port, DeathRecorderFactory connect,
               DeathRecorder* host, internal::OutputStream& err)
      : plan_(plan), port_(store_port), connect_(std::move(connect)), host_(host), err_(err) {}

  void record(int attempt, int rank) {
    try {
      if (host_ != nullptr) {
        host_->record_death(attempt, rank);
        return;
      }
      if (!connected_) connected_ = connect_(plan_.master_addr, port_, plan_.token);
      connected_->record_death(attempt, rank);
    } catch (const Error& e) {
      connected_.reset();
      err_.log("cannot record rank " + std::to_string(rank) + "'s death in the job's store (" +
               e.what() + "); the other workers wait out their deadlines instead");
    }
  }

 private:
  const JobPlan& plan_;
  int port_;
  DeathRecorderFactory connect_;
  DeathRecorder* host_;  // node 0's store, or null
  std::unique_ptr<DeathRecorder> connected_;
  internal::OutputStream& err_;
};

// What to say, and which code to return, once an attempt failed with no restart left.
int give_up(const LaunchOptions& o, const GroupOutcome& outcome, int used,
            internal::OutputStream& err) {
  const int code = outcome.status.shell_code();
  std::string line = "rank " + std::to_string(outcome.rank) + " " + outcome.describe() +
                     "; exiting with code " + std::to_string(code);
  if (used >= o.max_restarts && o.max_restarts > 0) {
    line += " (all " + std::to_string(o.max_restarts) + " restarts used)";
  }
  err.log(line);
  return code;
}

}  // namespace

int launch(const LaunchOptions& options, const Rendezvous& rendezvous) {
  const JobPlan plan = plan_job(options, std::getenv("WEFT_JOB_TOKEN"), std::getenv("PATH"));
  ensure_standard_fds();
  internal::OutputStream out(STDOUT_FILENO);
  internal::OutputStream err(STDERR_FILENO);
  internal::ProgressLine progress(STDERR_FILENO, ::isatty(STDERR_FILENO) == 1);
  // Before the store starts: a Ctrl-C from then on is forwarded, not fatal to us alone.
  internal::SignalPipe signals;
  std::unique_ptr<RendezvousHost> store;
  if (!plan.hosts_store && !rendezvous.connect) {
    throw InvalidArgument(
        "launch: this node records its workers' deaths in node 0's store, but no "
        "DeathRecorderFactory was given; pass one that connects to it");
  }
  const JobPorts ports = job_ports(plan, start_store(plan, rendezvous.start, store));
  DeathNotices deaths(plan, ports.store, rendezvous.connect, store.get(), err);
  const std::string n = std::to_string(options.nproc_per_node);
  int used = 0;  // restarts, whole or in place
  for (int restart = 0;; ++restart) {
    const internal::FlightRings rings(options.nproc_per_node);  // each attempt its own
    internal::GroupSpec spec = group_spec(plan, ports, restart, options.max_restarts - used, rings);
    spec.record_death = [&deaths, restart](int rank) { deaths.record(restart, rank); };
    internal::WorkerGroup group(spec, signals, out, err, progress);
    const GroupOutcome outcome = group.run();
    used += outcome.replaced;
    if (outcome.kind != GroupOutcome::Kind::kSucceeded) {
      for (const std::string& line : rings.diagnose(spec.ranks, outcome.endings, outcome.stopped))
        err.log(line);
    }
    switch (outcome.kind) {
      case GroupOutcome::Kind::kSucceeded:
        if (auto line = rings.straggler(spec.ranks)) err.log(*line);
        return 0;
      case GroupOutcome::Kind::kInterrupted:
        err.log("stopped all " + n + " workers after " + internal::signal_name(outcome.signal) +
                "; exiting with code " + std::to_string(128 + outcome.signal));
        return 128 + outcome.signal;
      case GroupOutcome::Kind::kFailed:
        if (used >= options.max_restarts) return give_up(options, outcome, used, err);
        ++used;
        err.log("rank " + std::to_string(outcome.rank) + " " + outcome.describe() +
                "; restarting all " + n + " workers (restart " + std::to_string(used) + " of " +
                std::to_string(options.max_restarts) + ")");
        break;
    }
  }
}

}  // namespace weft::launch
