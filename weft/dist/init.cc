#include "weft/dist/init.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>

#include "weft/base/parse.h"
#include "weft/dist/internal/machine_id.h"
#include "weft/dist/internal/registry.h"
#include "weft/dist/launch_env.h"
#include "weft/net/socket.h"
#include "weft/store/death_log.h"
#include "weft/store/file_store.h"
#include "weft/store/prefix_store.h"
#include "weft/store/tcp_store.h"

namespace weft::dist {
namespace {

// With no backend named: shm when every rank runs on this host, else auto (shm within each
// host, tcp or mpi across).
constexpr const char* kOneHostBackend = "shm";
constexpr const char* kMultiHostBackend = "auto";

struct Registry {
  std::mutex mu;
  std::map<std::string, internal::RegisteredBackend> factories;
};

// The registry, with the built-in backends added on first use.
Registry& registry() {
  static Registry r;
  static std::once_flag builtins;
  std::call_once(builtins, [] {
    std::lock_guard lock(r.mu);
    internal::register_builtin_backends(r.factories);
  });
  return r;
}

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

[[noreturn]] void missing(const std::string& what, const std::string& hint) {
  throw InvalidArgument("dist::init_process_group: " + what + " is not set; " + hint);
}

int parse_int(const std::string& name, const std::string& value) {
  if (const auto v =
          parse_integer(value, std::numeric_limits<int>::min(), std::numeric_limits<int>::max())) {
    return static_cast<int>(*v);
  }
  throw InvalidArgument("dist::init_process_group: " + name + "='" + value + "' is not an integer");
}

// This attempt's keys' prefix (weftrun --max-restarts numbers the attempts), the one weftrun
// records deaths under (weft/store/death_log.h).
std::string attempt_prefix() {
  return store::attempt_prefix(
      parse_int("WEFT_RESTART_COUNT", env("WEFT_RESTART_COUNT").value_or("0")));
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

struct Endpoint {
  std::string host;
  int port;
};

// "tcp://host:port" or, for env://, MASTER_ADDR and WEFT_STORE_PORT (weftrun's) or
// MASTER_PORT (or what the launcher's variables say instead: weft/dist/launch_env.h).
Endpoint store_endpoint(const std::string& method) {
  if (method == "env://") {
    const auto launched = launch_environment();
    const std::string hint =
        launched && launched->launcher != "torchrun"
            ? "the job spans hosts and " + launched->launcher +
                  " does not say where rank 0 runs; export MASTER_ADDR (mpirun -x MASTER_ADDR)"
            : "run under weftrun, mpirun or srun, or set MASTER_ADDR and MASTER_PORT";
    auto addr = env("MASTER_ADDR");
    if (!addr && launched) addr = launched->master_addr;
    if (!addr) missing("MASTER_ADDR", hint);
    // weftrun's store, beside MASTER_PORT, which it leaves to a PyTorch program's own store.
    // Only under weftrun: a job launched from inside a weftrun worker inherits the variable.
    if (const auto port = env("WEFT_STORE_PORT"); port && env("WEFT_STORE_HOSTED") == "1") {
      return {*addr, parse_int("WEFT_STORE_PORT", *port)};
    }
    if (const auto port = env("MASTER_PORT")) return {*addr, parse_int("MASTER_PORT", *port)};
    if (!launched || !launched->master_port) missing("MASTER_PORT", hint);
    return {*addr, *launched->master_port};
  }
  const std::string rest = method.substr(6);  // after "tcp://"
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos) {
    throw InvalidArgument("dist::init_process_group: init_method '" + method +
                          "' needs a port: tcp://host:port");
  }
  std::string host = rest.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // tcp://[::1]:29500
  }
  return {host, parse_int("the port of " + method, rest.substr(colon + 1))};
}

std::shared_ptr<store::Store> make_store(const std::string& method, int rank,
                                         const std::string& token, Seconds timeout) {
  if (method.rfind("file://", 0) == 0) {
    auto fs = std::make_shared<store::FileStore>(method.substr(7));
    fs->set_timeout(timeout);
    return fs;
  }
  const Endpoint at = store_endpoint(method);
  store::TCPStoreOptions o;
  o.host = at.host;
  o.port = at.port;
  o.token = token;
  o.timeout = timeout;
  // Under weftrun the launcher hosts the store; run by hand, rank 0 does, on the master
  // address itself (loopback unless the user named another interface).
  o.is_server = rank == 0 && env("WEFT_STORE_HOSTED") != "1";
  o.bind_host = at.host;
  return std::make_shared<store::TCPStore>(o);
}

// The address peers reach this rank at: WEFT_HOST, else the address of the interface
// WEFT_SOCKET_IFNAME names, else loopback for a job on one host, else this host's address on
// the route to the master (logged, since a host with several networks may pick one the other
// hosts cannot reach).
// Where the master is, as the address this rank's listeners must be reachable from: none for
// file:// (one host).
std::optional<std::string> master_host(const std::string& method) {
  if (method.rfind("file://", 0) == 0) return std::nullopt;
  return store_endpoint(method).host;
}

std::string this_host(const std::optional<std::string>& master) {
  if (const auto host = env("WEFT_HOST")) return *host;
  // Logged once per host, by its first rank (every rank of a host finds the same address).
  const auto launched = launch_environment();
  const bool log = !launched || launched->local_rank == 0;
  if (const auto interface = env("WEFT_SOCKET_IFNAME")) {
    // The master's family where the interface has both: a job formed over IPv6 stays on it.
    const bool ipv6 = master && master->find(':') != std::string::npos;
    const std::string mine = net::interface_address(*interface, ipv6);
    if (log) {
      std::fprintf(stderr, "weft: listening on %s (WEFT_SOCKET_IFNAME=%s)\n", mine.c_str(),
                   interface->c_str());
    }
    return mine;
  }
  if (!master || is_loopback(*master)) {
    return master && master->find(':') != std::string::npos ? "::1" : "127.0.0.1";
  }
  const std::string mine = net::local_address_towards(*master);
  if (log) {
    std::fprintf(stderr,
                 "weft: listening on %s, this host's address on the route to the master %s "
                 "(set WEFT_HOST to choose another)\n",
                 mine.c_str(), master->c_str());
  }
  return mine;
}

// Every rank publishes its machine id and reads all others': one host or several.
bool all_on_this_host(store::Store& store, int rank, int world_size, Seconds timeout) {
  const std::string mine = internal::machine_id();
  store.set("host/" + std::to_string(rank), mine);
  for (int r = 0; r < world_size; ++r) {
    const std::string key = "host/" + std::to_string(r);
    store.wait({key}, timeout);
    if (store.get(key) != mine) return false;
  }
  return true;
}

internal::RegisteredBackend find_backend(const std::string& backend) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  const auto it = r.factories.find(backend);
  if (it == r.factories.end()) {
    std::string known;
    for (const auto& [name, f] : r.factories) known += (known.empty() ? "" : ", ") + name;
    throw InvalidArgument("dist::init_process_group: unknown backend '" + backend +
                          "'; registered backends: " + known);
  }
  return it->second;
}

// Each rank claims its place in a round once ("claim/round<R>/rank<r>" counts the claims):
// the first claim is this rank's, a later one means a process of this rank joined the round
// before (a replacement's predecessor). Round 0's claims are only counted: a process may make
// its first world more than once (torch's backend makes a group per new_group).
int claim_round(store::Store& attempt, int rank, int round) {
  const auto claim = [&](int r) {
    return attempt.add("claim/round" + std::to_string(r) + "/rank" + std::to_string(rank), 1) == 1;
  };
  if (round == 0) {
    (void)claim(0);
    return 0;
  }
  if (round > 0) {
    if (claim(round)) return round;
    throw InvalidArgument("dist::join_process_group: rank " + std::to_string(rank) +
                          " has joined round " + std::to_string(round) + " already");
  }
  // Every round a process of this rank has joined is claimed; they are few (one a recovery).
  for (int r = 0;; ++r) {
    if (claim(r)) return r;
  }
}

}  // namespace

std::shared_ptr<ProcessGroup> make_world_group(std::shared_ptr<Backend> backend,
                                               const BackendContext& context) {
  std::vector<int> members(static_cast<std::size_t>(context.world_size));
  std::iota(members.begin(), members.end(), 0);
  return std::make_shared<ProcessGroup>(std::move(backend), std::move(members),
                                        GroupOptions{context.timeout, "world"});
}

void register_backend(const std::string& name, BackendFactory factory, BackendTraits traits) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.factories[name] = {std::move(factory), traits};
}

std::vector<std::string> registered_backends() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

std::shared_ptr<ProcessGroup> init_process_group(InitOptions options) {
  return join_process_group(std::move(options)).world;
}

JoinedWorld join_process_group(InitOptions options) {
  std::string backend =
      !options.backend.empty() ? options.backend : env("WEFT_BACKEND").value_or("");
  if (backend == "thread") {
    throw InvalidArgument(
        "dist::init_process_group: the thread backend runs ranks as threads of "
        "one process; call weft::dist::run_threads(n, fn) instead");
  }
  const auto launched = launch_environment();
  BackendContext context;
  context.rank = options.rank >= 0 ? options.rank : launched ? launched->rank : -1;
  context.world_size = options.world_size >= 0 ? options.world_size
                       : launched              ? launched->world_size
                                               : -1;
  context.timeout =
      checked_timeout(options.timeout.value_or(kDefaultTimeout), "init_process_group's timeout");
  if (!backend.empty()) {  // an unknown name fails before rendezvous
    const auto named = find_backend(backend);
    if (!named.traits.uses_store) return {named.factory(context), 0};
  }
  if (context.rank < 0 || context.world_size < 0) {
    missing("RANK", "run under weftrun, mpirun or srun, or set RANK and WORLD_SIZE");
  }
  if (context.world_size < 1 || context.rank < 0 || context.rank >= context.world_size) {
    throw InvalidArgument("dist::init_process_group: rank " + std::to_string(context.rank) +
                          " is not in [0, world size " + std::to_string(context.world_size) + ")");
  }
  if (options.round < InitOptions::kFirstFreeRound) {
    throw InvalidArgument("dist::join_process_group: round " + std::to_string(options.round) +
                          " is negative (kFirstFreeRound, -1, asks for the first free one)");
  }
  const std::string method = options.init_method.empty() ? "env://" : options.init_method;
  if (!options.store && method != "env://" && method.rfind("tcp://", 0) != 0 &&
      method.rfind("file://", 0) != 0) {
    throw InvalidArgument("dist::init_process_group: unknown init_method '" + method +
                          "'; use env://, tcp://host:port or file:///path");
  }
  // Run by hand, rank 0 hosts the store, which dies with it: no later round could meet.
  if (options.round != 0 && !options.store && method.rfind("file://", 0) != 0 &&
      env("WEFT_STORE_HOSTED") != "1") {
    throw InvalidArgument(
        "dist::join_process_group: a round after the first needs a store that outlives every "
        "rank: run under weftrun (which hosts it), or pass InitOptions::store");
  }
  context.token = env("WEFT_JOB_TOKEN").value_or("");
  context.host = this_host(options.store ? env("MASTER_ADDR") : master_host(method));
  // Closed by default: a job reachable from other hosts must be joined with its token.
  if (context.token.empty() && !is_loopback(context.host)) {
    throw InvalidArgument("dist::init_process_group: this job listens on " + context.host +
                          ", beyond this host, without a job token; set WEFT_JOB_TOKEN to the "
                          "same secret on every rank (weftrun --token does)");
  }
  // Keys of an earlier attempt (weftrun --max-restarts) must not leak into this one.
  auto base = options.store ? options.store
                            : make_store(method, context.rank, context.token, context.timeout);
  auto attempt = std::make_shared<store::PrefixStore>(attempt_prefix(), base);
  const int round = claim_round(*attempt, context.rank, options.round);
  context.store = round == 0 ? attempt
                             : std::make_shared<store::PrefixStore>("round" + std::to_string(round),
                                                                    std::move(attempt));
  if (backend.empty()) {
    backend = all_on_this_host(*context.store, context.rank, context.world_size, context.timeout)
                  ? kOneHostBackend
                  : kMultiHostBackend;
  }
  return {find_backend(backend).factory(context), round};
}

std::shared_ptr<store::Store> connect_job_store(Seconds timeout) {
  if (env("WEFT_STORE_HOSTED") != "1") {
    throw InvalidArgument(
        "dist::connect_job_store: the job's store must outlive every rank: run under weftrun, "
        "which hosts it");
  }
  auto base = make_store("env://", -1, env("WEFT_JOB_TOKEN").value_or(""),
                         checked_timeout(timeout, "connect_job_store's timeout"));
  return std::make_shared<store::PrefixStore>(attempt_prefix(), std::move(base));
}

}  // namespace weft::dist
