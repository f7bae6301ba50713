// weftrun: starts a job's worker processes on this node, torchrun's counterpart. This file
// only reads the command line; weft/launch does the work (docs/LAUNCHER.md).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store_rendezvous.h"
#include "weft/launch/launcher.h"

namespace {

using weft::launch::LaunchOptions;

// The job's store, started by node 0's weftrun: the one place that picks its implementation.
const weft::launch::Rendezvous kRendezvous{weft::tools::start_store_rendezvous,
                                           weft::tools::connect_store_recorder};

constexpr const char* kDescription =
    "weftrun: starts a job's worker processes on this node (torchrun's counterpart).\n"
    "Everything from PROGRAM on is passed to the program untouched, options included.\n";

constexpr const char* kFooter =
    "Each worker gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, NODE_RANK,\n"
    "GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (left free for a PyTorch program's own\n"
    "store), WEFT_STORE_PORT, WEFT_JOB_TOKEN, WEFT_RESTART_COUNT, WEFT_STORE_HOSTED,\n"
    "WEFT_PROGRESS_RELAY and (with --backend) WEFT_BACKEND; stdin is /dev/null. Each line a\n"
    "worker prints is written to weftrun's stdout or stderr prefixed with \"[RANK] \".\n"
    "SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to the workers (SIGKILL after\n"
    "--stop-grace; a second signal kills them at once). When a worker fails, the others\n"
    "are stopped, and all are restarted while --max-restarts allow; with --recover in-place\n"
    "a worker killed by a signal is started again alone (WEFT_REPLACEMENT=1, every worker\n"
    "has WEFT_RECOVER=in-place) and weft-train's ranks go on from the current step; with\n"
    "--recover elastic they go on without it and take it back when it has started.\n"
    "Exit status: 0 when every worker exited 0 (elastic: every one not left dead); else the\n"
    "failed worker's exit code (128+N for signal N), 128+N when weftrun got signal N, 127\n"
    "when PROGRAM cannot be found, 2 for a bad command line, 1 when the job cannot be\n"
    "started. See docs/LAUNCHER.md.";

// CLI11 2.1 would print "Usage: weftrun [OPTIONS]", hiding PROGRAM and its arguments.
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: weftrun --nproc-per-node N [OPTIONS] PROGRAM [ARGS...]\n";
  }
};

struct Flags {
  std::string token;
  double stop_grace = 5.0;
  double exit_timeout = 300.0;
  CLI::Option* token_option = nullptr;
};

// Help texts are wrapped by hand: CLI11 indents after each '\n' but does not wrap.
void add_options(CLI::App& app, LaunchOptions& o, Flags& f) {
  app.add_option("--nproc-per-node", o.nproc_per_node,
                 "Workers to start on this node (LOCAL_WORLD_SIZE)")
      ->required();
  app.add_option("--nnodes", o.nnodes,
                 "Nodes in the job (default 1); each runs weftrun with the\n"
                 "same options but its own --node-rank");
  app.add_option("--node-rank", o.node_rank,
                 "This node's rank, 0 to nnodes-1 (default 0);\n"
                 "node 0 hosts the job's store");
  app.add_option("--master-addr", o.master_addr,
                 "Address of node 0 that every node reaches; node 0's store\n"
                 "listens on it. Required with --nnodes > 1; with one node\n"
                 "the store listens on 127.0.0.1 only");
  app.add_option("--master-port", o.master_port,
                 "Port of the job's store on node 0 (WEFT_STORE_PORT); with\n"
                 "--nnodes > 1 required, and the workers' MASTER_PORT is the next one.\n"
                 "Default 0: any free port, one node only");
  app.add_option("--max-restarts", o.max_restarts,
                 "Times to restart all of this node's workers after one fails\n"
                 "(default 0); WEFT_RESTART_COUNT numbers the attempts");
  app.add_option("--recover", o.recover,
                 "restart (default): a failed worker stops the others and all\n"
                 "restart; in-place: a worker killed by a signal is started\n"
                 "again alone and rejoins the others (weft-train: from the current\n"
                 "step, docs/RECOVERY.md); elastic: the others go on without it\n"
                 "and take it back when it has started (or go on without it once\n"
                 "no restart is left); each start counts against --max-restarts");
  app.add_option("--backend", o.backend,
                 "weft::dist backend for the workers, passed as WEFT_BACKEND\n"
                 "(e.g. tcp); default: WEFT_BACKEND as inherited, if set");
  f.token_option = app.add_option("--token", f.token,
                                  "The job's shared secret, passed as WEFT_JOB_TOKEN. Default:\n"
                                  "$WEFT_JOB_TOKEN, else a random one (one node only). Prefer\n"
                                  "the variable: other users can read command lines (ps)");
  app.add_option("--bind-to", o.bind_to,
                 "core: each worker on a CPU of its own (as mpirun), when\n"
                 "there are no more workers than CPUs; none: not bound\n"
                 "(default none: measured faster, docs/LAUNCHER.md)");
  app.add_option("--stop-grace", f.stop_grace,
                 "Seconds that workers being stopped get between SIGTERM (or\n"
                 "the forwarded signal) and SIGKILL (default 5)");
  app.add_option("--exit-timeout", f.exit_timeout,
                 "Seconds the other workers get to exit once one has exited 0;\n"
                 "those still running then are taken as hung (in teardown) and\n"
                 "stopped, and the job fails (default 300; 0: no limit)");
}

// Fills `options` from the command line; an exit code when weftrun should exit right away.
std::optional<int> parse(int argc, char** argv, LaunchOptions& options) {
  CLI::App app(kDescription, "weftrun");
  app.formatter(std::make_shared<Formatter>());
  Flags flags;
  add_options(app, options, flags);
  app.footer(kFooter);
  // Parsing stops at the first argument that is not one of weftrun's: PROGRAM.
  app.prefix_command();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  std::vector<std::string> rest = app.remaining();
  // CLI11 keeps a "--" that came before PROGRAM; after it, PROGRAM may even start with '-'.
  const bool separated = !rest.empty() && rest.front() == "--";
  if (separated) rest.erase(rest.begin());
  if (rest.empty() || (!separated && rest.front().starts_with("-"))) {
    const std::string problem = rest.empty() ? "PROGRAM is missing" : "unknown option " + rest[0];
    std::fprintf(stderr, "weftrun: %s\nRun with --help for more information.\n", problem.c_str());
    return 2;
  }
  options.program = rest.front();
  options.args.assign(rest.begin() + 1, rest.end());
  if (flags.token_option->count() > 0) options.token = flags.token;
  options.stop_grace = weft::Seconds(flags.stop_grace);
  options.exit_timeout = weft::Seconds(flags.exit_timeout);
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  LaunchOptions options;
  if (const std::optional<int> code = parse(argc, argv, options)) return *code;
  try {
    return weft::launch::launch(options, kRendezvous);
  } catch (const weft::launch::ProgramNotFound& e) {
    std::fprintf(stderr, "weftrun: error: %s\n", e.what());
    return 127;
  } catch (const weft::InvalidArgument& e) {
    std::fprintf(stderr, "weftrun: error: %s\n", e.what());
    return 2;
  } catch (const weft::Error& e) {
    std::fprintf(stderr, "weftrun: error: %s\n", e.what());
    return 1;
  }
}
