// weftrun end to end: the real binary starting launch_test_worker processes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "weft/base/unique_fd.h"

namespace weft::test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

const std::string kWeftrun = WEFTRUN;
const std::string kWorker = WEFT_TEST_WORKER;
// The variables a test's own environment may carry into weftrun and so change its result.
const std::map<std::string, std::optional<std::string>> kCleanEnv = {
    {"WEFT_JOB_TOKEN", std::nullopt}, {"WEFT_BACKEND", std::nullopt}};

Finished weftrun(std::vector<std::string> args,
                 std::map<std::string, std::optional<std::string>> env = kCleanEnv) {
  args.insert(args.begin(), kWeftrun);
  return run(args, env);
}

// rank -> NAME -> value, from "[rank] NAME=value" lines.
std::map<int, std::map<std::string, std::string>> variables(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> vars;
  const std::regex line(R"(\[(\d+)\] ([A-Za-z_]+)=(.*))");
  for (const std::string& l : lines_of(out)) {
    std::smatch m;
    if (std::regex_match(l, m, line)) vars[std::stoi(m[1])][m[2]] = m[3];
  }
  return vars;
}

// The pids workers announced with "pid=P".
std::vector<pid_t> announced_pids(const std::string& out) {
  std::vector<pid_t> pids;
  const std::regex pid(R"(pid=(\d+))");
  for (std::sregex_iterator it(out.begin(), out.end(), pid), end; it != end; ++it) {
    pids.push_back(static_cast<pid_t>(std::stoi((*it)[1])));
  }
  return pids;
}

// The "nothing left running" checks below are only as good as live_processes_with().
TEST(WeftrunTest, HarnessFindsRunningWorkersByTag) {
  const std::string tag = unique_tag();
  Subprocess worker({kWorker, "sleep", tag});
  ASSERT_TRUE(worker.wait_for_stdout(
      [](const std::string& out) { return out.find("ready") != std::string::npos; }, Seconds(10)));
  EXPECT_THAT(live_processes_with(tag), ElementsAre(worker.pid()));
}

TEST(WeftrunTest, SetsTheEnvironmentOfEveryRank) {
  const Finished r = weftrun({"--nproc-per-node", "3", "--backend", "tcp", kWorker, "env"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto vars = variables(r.out);
  ASSERT_EQ(vars.size(), 3u) << r.out;
  const std::string port = vars.at(0).at("MASTER_PORT");
  const std::string store_port = vars.at(0).at("WEFT_STORE_PORT");
  const std::string token = vars.at(0).at("WEFT_JOB_TOKEN");
  EXPECT_NE(port, "0");
  EXPECT_NE(store_port, "0");
  EXPECT_NE(port, store_port);
  EXPECT_TRUE(std::regex_match(token, std::regex("[0-9a-f]{32}"))) << token;
  for (int rank = 0; rank < 3; ++rank) {
    const auto& v = vars.at(rank);
    EXPECT_EQ(v.at("RANK"), std::to_string(rank));
    EXPECT_EQ(v.at("LOCAL_RANK"), std::to_string(rank));
    EXPECT_EQ(v.at("WORLD_SIZE"), "3");
    EXPECT_EQ(v.at("LOCAL_WORLD_SIZE"), "3");
    EXPECT_EQ(v.at("GROUP_RANK"), "0");
    EXPECT_EQ(v.at("NODE_RANK"), "0");
    EXPECT_EQ(v.at("GROUP_WORLD_SIZE"), "1");
    EXPECT_EQ(v.at("MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(v.at("MASTER_PORT"), port);
    EXPECT_EQ(v.at("WEFT_STORE_PORT"), store_port);
    EXPECT_EQ(v.at("WEFT_BACKEND"), "tcp");
    EXPECT_EQ(v.at("WEFT_JOB_TOKEN"), token);
    EXPECT_EQ(v.at("WEFT_RESTART_COUNT"), "0");
    EXPECT_EQ(v.at("WEFT_STORE_HOSTED"), "1");
    EXPECT_EQ(v.at("WEFT_STORE_PORT_taken"), "1") << "weftrun's store does not hold its port";
    // Free for a PyTorch program's env:// rendezvous, which starts a TCPStore there.
    EXPECT_EQ(v.at("MASTER_PORT_taken"), "0") << "MASTER_PORT is not left to the workers";
  }
}

TEST(WeftrunTest, SecondNodeGetsOffsetRanksAndHostsNoStore) {
  const Finished r =
      weftrun({"--nproc-per-node", "2", "--nnodes", "3", "--node-rank", "1", "--master-addr",
               "127.0.0.1", "--master-port", "1", "--token", "sesame", kWorker, "env"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto vars = variables(r.out);
  ASSERT_EQ(vars.size(), 2u) << r.out;
  for (int rank : {2, 3}) {
    const auto& v = vars.at(rank);
    EXPECT_EQ(v.at("LOCAL_RANK"), std::to_string(rank - 2));
    EXPECT_EQ(v.at("WORLD_SIZE"), "6");
    EXPECT_EQ(v.at("GROUP_RANK"), "1");
    EXPECT_EQ(v.at("NODE_RANK"), "1");
    EXPECT_EQ(v.at("GROUP_WORLD_SIZE"), "3");
    EXPECT_EQ(v.at("WEFT_STORE_PORT"), "1");
    EXPECT_EQ(v.at("MASTER_PORT"), "2");
    EXPECT_EQ(v.at("WEFT_JOB_TOKEN"), "sesame");
    EXPECT_EQ(v.at("WEFT_BACKEND"), "<unset>");
  }
}

TEST(WeftrunTest, TakesTheTokenFromTheEnvironment) {
  const Finished r = weftrun({"--nproc-per-node", "1", kWorker, "env"},
                             {{"WEFT_JOB_TOKEN", "from-env"}, {"WEFT_BACKEND", "mpi"}});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(variables(r.out).at(0).at("WEFT_JOB_TOKEN"), "from-env");
  EXPECT_EQ(variables(r.out).at(0).at("WEFT_BACKEND"), "mpi");  // inherited, not cleared
}

TEST(WeftrunTest, MultiNodeWithoutTokenSaysToPassOne) {
  const Finished r = weftrun({"--nproc-per-node", "1", "--nnodes", "2", "--master-addr",
                              "127.0.0.1", "--master-port", "1", kWorker, "env"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--token"));
  EXPECT_EQ(r.out, "");
}

TEST(WeftrunTest, PassesEverythingAfterProgramUntouched) {
  const Finished r = weftrun(
      {"--nproc-per-node", "1", kWorker, "args", "--nproc-per-node", "7", "--", "--help", "a b"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "[0] arg=--nproc-per-node\n[0] arg=7\n[0] arg=--\n[0] arg=--help\n"
            "[0] arg=a b\n");
}

TEST(WeftrunTest, DoubleDashEndsWeftrunsOptions) {
  const Finished r = weftrun({"--nproc-per-node", "1", "--", kWorker, "args", "--", "x"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[0] arg=--\n[0] arg=x\n");
}

TEST(WeftrunTest, PrefixesWholeLinesWithoutTearing) {
  constexpr int kRanks = 4;
  constexpr int kLines = 4000;
  const Finished r = weftrun(
      {"--nproc-per-node", std::to_string(kRanks), kWorker, "spam", std::to_string(kLines)});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::regex line(R"(\[(\d)\] rank=(\d) line=(\d+) x{100})");
  for (const auto& [text, fd_lines] : {std::pair{r.out, kLines * 3 / 4}, {r.err, kLines / 4}}) {
    std::vector<int> next(kRanks, -1);  // the last line number seen per rank
    int count = 0;
    for (const std::string& l : lines_of(text)) {
      std::smatch m;
      ASSERT_TRUE(std::regex_match(l, m, line)) << "torn or stray line: " << l.substr(0, 200);
      ASSERT_EQ(m[1], m[2]) << l.substr(0, 200);
      const int rank = std::stoi(m[1]);
      ASSERT_GT(std::stoi(m[3]), next[rank]) << "lines of rank " << rank << " out of order";
      next[rank] = std::stoi(m[3]);
      ++count;
    }
    EXPECT_EQ(count, kRanks * fd_lines);
  }
}

TEST(WeftrunTest, FlushesAnUnterminatedLastLine) {
  const Finished r = weftrun({"--nproc-per-node", "2", kWorker, "partial"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[0] no newline at the end\n"));
  EXPECT_THAT(r.out, HasSubstr("[1] no newline at the end\n"));
}

TEST(WeftrunTest, CutsOverlongLinesIntoPrefixedPieces) {
  const Finished r = weftrun({"--nproc-per-node", "1", kWorker, "long", "200000"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::size_t letters = 0;
  for (const std::string& l : lines_of(r.out)) {
    ASSERT_EQ(l.rfind("[0] ", 0), 0u);
    EXPECT_LE(l.size(), 4u + 64 * 1024);
    letters += l.size() - 4;
  }
  EXPECT_EQ(letters, 200000u);
}

TEST(WeftrunTest, FailingRankStopsTheOthersAndGivesItsExitCode) {
  const std::string tag = unique_tag();
  const Finished r = weftrun({"--nproc-per-node", "3", kWorker, "fail", "1", "3", tag});
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_LT(r.seconds, 4.0);
  EXPECT_THAT(r.err, HasSubstr("weftrun: rank 1 exited with code 3; exiting with code 3"));
  EXPECT_THAT(live_processes_with(tag), ::testing::IsEmpty());
}

TEST(WeftrunTest, NamesTheSignalThatKilledARank) {
  const std::string tag = unique_tag();
  const Finished r =
      weftrun({"--nproc-per-node", "2", kWorker, "signal", "1", std::to_string(SIGKILL), tag});
  EXPECT_EQ(r.code, 128 + SIGKILL) << r.err;
  EXPECT_LT(r.seconds, 4.0);
  EXPECT_THAT(r.err, HasSubstr("rank 1 was killed by signal 9 (SIGKILL: Killed)"));
  EXPECT_THAT(live_processes_with(tag), ::testing::IsEmpty());
}

TEST(WeftrunTest, RestartsTheGroupAfterAFailure) {
  const Finished r = weftrun({"--nproc-per-node", "2", "--max-restarts", "2", kWorker, "flaky"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("exited with code 3; restarting all 2 workers (restart 1 of 2)"));
  EXPECT_THAT(r.err, Not(HasSubstr("restart 2 of 2")));
  EXPECT_THAT(r.out, HasSubstr("[0] attempt 1\n"));
  EXPECT_THAT(r.out, HasSubstr("[1] attempt 1\n"));
}

TEST(WeftrunTest, GivesUpWhenRestartsAreUsedUp) {
  const std::string tag = unique_tag();
  const Finished r =
      weftrun({"--nproc-per-node", "2", "--max-restarts", "1", kWorker, "fail", "0", "4", tag});
  EXPECT_EQ(r.code, 4) << r.err;
  EXPECT_THAT(r.err, HasSubstr("(restart 1 of 1)"));
  EXPECT_THAT(r.err, HasSubstr("rank 0 exited with code 4; exiting with code 4 (all 1 restarts"));
  EXPECT_THAT(live_processes_with(tag), ::testing::IsEmpty());
}

TEST(WeftrunTest, RecoverInPlaceStartsAKilledWorkerAgainAlone) {
  const Finished r = weftrun({"--nproc-per-node", "3", "--recover", "in-place", "--max-restarts",
                              "2", kWorker, "crash-once", "1"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("rank 1 was killed by signal 9 (SIGKILL: Killed); starting it "
                               "again in place (replacement 1 of 2), the others keep running"));
  for (const char* line : {"[0] started replacement=0 recover=in-place attempt=0\n",
                           "[1] started replacement=0 recover=in-place attempt=0\n",
                           "[1] started replacement=1 recover=in-place attempt=0\n",
                           "[2] started replacement=0 recover=in-place attempt=0\n"}) {
    EXPECT_EQ(r.out.find(line), r.out.rfind(line)) << line << " more than once:\n" << r.out;
    EXPECT_THAT(r.out, HasSubstr(line));
  }
}

TEST(WeftrunTest, RecoverInPlaceCountsAgainstMaxRestarts) {
  const Finished none =
      weftrun({"--nproc-per-node", "2", "--recover", "in-place", kWorker, "crash-once", "1"});
  EXPECT_EQ(none.code, 128 + SIGKILL) << none.err;
  EXPECT_THAT(none.err, Not(HasSubstr("in place")));
  // A worker that exits with a code says what is wrong: every worker restarts, as without.
  const Finished flaky = weftrun(
      {"--nproc-per-node", "2", "--recover", "in-place", "--max-restarts", "1", kWorker, "flaky"});
  EXPECT_EQ(flaky.code, 0) << flaky.err;
  EXPECT_THAT(flaky.err,
              HasSubstr("exited with code 3; restarting all 2 workers (restart 1 of 1)"));
  EXPECT_EQ(weftrun({"--nproc-per-node", "1", "--recover", "sometimes", kWorker, "env"}).code, 2);
}

// Elastic: a killed worker is started again while restarts last; then it is left dead and the
// others go on, and the job succeeds when they do.
TEST(WeftrunTest, RecoverElasticLeavesAKilledWorkerOnceNoRestartIsLeft) {
  const Finished r =
      weftrun({"--nproc-per-node", "3", "--recover", "elastic", kWorker, "crash-once", "1"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("rank 1 was killed by signal 9 (SIGKILL: Killed); no restart is "
                               "left, the others go on without it"));
  EXPECT_THAT(r.out, HasSubstr("[2] started replacement=0 recover=elastic attempt=0\n"));
  const Finished replaced = weftrun({"--nproc-per-node", "2", "--recover", "elastic",
                                     "--max-restarts", "1", kWorker, "crash-once", "1"});
  EXPECT_EQ(replaced.code, 0) << replaced.err;
  EXPECT_THAT(replaced.out, HasSubstr("[1] started replacement=1 recover=elastic attempt=0\n"));
}

// The port bound on loopback (`port`, or the system's pick for 0), then closed; -1 when
// something listens there.
int bind_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                     ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0;
  ::close(fd);
  return bound ? ntohs(addr.sin_port) : -1;
}

// A port P nothing listens on now, nor on P + 1 (a job's store and its MASTER_PORT).
int unused_port_pair() {
  for (int tries = 0; tries < 100; ++tries) {
    const int port = bind_loopback(0);
    if (port > 0 && port < 65535 && bind_loopback(port + 1) == port + 1) return port;
  }
  ADD_FAILURE() << "no two free ports in a row";
  return 0;
}

// weftrun records a death in the job's store before the replacement starts: node 0's weftrun
// in the store it hosts, another node's through a connection to node 0's store.
TEST(WeftrunTest, RecordsEachDeathInTheJobsStoreBeforeTheReplacementStarts) {
  const Finished one = weftrun({"--nproc-per-node", "2", "--recover", "in-place", "--max-restarts",
                                "1", kWorker, "crash-once", "1"});
  EXPECT_EQ(one.code, 0) << one.err;
  EXPECT_THAT(one.out, HasSubstr("[1] deaths=1 ranks=1\n"));

  const std::string port = std::to_string(unused_port_pair());
  std::vector<std::unique_ptr<Subprocess>> nodes;
  for (const char* node : {"0", "1"}) {
    // Node 0's worker outlives node 1's replacement, which reads node 0's store.
    std::vector<std::string> argv{kWeftrun,    "--nnodes",         "2",  "--node-rank",
                                  node,        "--nproc-per-node", "1",  "--master-addr",
                                  "127.0.0.1", "--master-port",    port, "--token",
                                  "sesame"};
    argv.insert(argv.end(), {"--recover", "in-place", "--max-restarts", "1", kWorker, "crash-once",
                             "1", "3000"});
    nodes.push_back(std::make_unique<Subprocess>(argv, kCleanEnv));
  }
  for (auto& node : nodes) EXPECT_EQ(node->wait(Seconds(30)), 0) << node->err();
  EXPECT_THAT(nodes[1]->out(), HasSubstr("[1] deaths=1 ranks=1\n"));
}

// Starts weftrun with sleeping workers, waits until they all run, then sends it SIGTERM.
Finished terminate_sleepers(const std::vector<std::string>& extra, const std::string& mode) {
  std::vector<std::string> argv{kWeftrun, "--nproc-per-node", "3"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const std::string tag = unique_tag();
  argv.insert(argv.end(), {kWorker, mode, tag});
  Subprocess p(argv, kCleanEnv);
  const bool ready = p.wait_for_stdout(
      [](const std::string& out) { return announced_pids(out).size() == 3; }, Seconds(10));
  EXPECT_TRUE(ready) << p.out() << p.err();
  const auto start = std::chrono::steady_clock::now();
  ::kill(p.pid(), SIGTERM);
  const int code = p.wait(Seconds(15));
  const Seconds took = std::chrono::steady_clock::now() - start;
  EXPECT_THAT(live_processes_with(tag), ::testing::IsEmpty());
  return {code, p.out(), p.err(), took.count()};
}

TEST(WeftrunTest, SigtermStopsEveryWorker) {
  const Finished r = terminate_sleepers({}, "sleep");
  EXPECT_EQ(r.code, 128 + SIGTERM) << r.err;
  EXPECT_LT(r.seconds, 3.0);
  EXPECT_THAT(r.err, HasSubstr("received SIGTERM; forwarding it to 3 workers"));
}

TEST(WeftrunTest, KillsWorkersThatIgnoreSigtermAfterTheGrace) {
  const Finished r = terminate_sleepers({"--stop-grace", "0.5"}, "ignore-term");
  EXPECT_EQ(r.code, 128 + SIGTERM) << r.err;
  EXPECT_GT(r.seconds, 0.4);
  EXPECT_LT(r.seconds, 3.0);
  EXPECT_THAT(r.err, HasSubstr("killing them (SIGKILL)"));
}

TEST(WeftrunTest, WorkersInheritNoStrayDescriptors) {
  // A descriptor the test leaks into weftrun on purpose: the workers must not see it.
  UniqueFd leaked(::dup(2));
  ASSERT_TRUE(leaked);
  // Each keeps the flight recorder's ring, a memfd of its own, and nothing else.
  const Finished r = weftrun({"--nproc-per-node", "3", kWorker, "fds"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(lines_of(r.out),
              UnorderedElementsAre("[0] fds= ring", "[1] fds= ring", "[2] fds= ring"));
  auto off = kCleanEnv;
  off["WEFT_FLIGHT_RECORDER"] = "0";
  const Finished unrecorded = weftrun({"--nproc-per-node", "2", kWorker, "fds"}, off);
  leaked.reset();
  ASSERT_EQ(unrecorded.code, 0) << unrecorded.err;
  EXPECT_THAT(lines_of(unrecorded.out), UnorderedElementsAre("[0] fds= none", "[1] fds= none"));
}

// --bind-to core: one CPU per worker when there are enough, each a different one; none
// bound by default, or when there are more workers than CPUs.
TEST(WeftrunTest, BindsEachWorkerToACpuOfItsOwn) {
  cpu_set_t mine;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(mine), &mine), 0);
  const int cpus = CPU_COUNT(&mine);
  if (cpus < 2) GTEST_SKIP() << "needs 2 CPUs";
  auto vars =
      variables(weftrun({"--nproc-per-node", "2", "--bind-to", "core", kWorker, "cpus"}).out);
  EXPECT_EQ(vars[0]["cpus"], "1");
  EXPECT_EQ(vars[1]["cpus"], "1");
  EXPECT_NE(vars[0]["cpu"], vars[1]["cpu"]);
  vars = variables(weftrun({"--nproc-per-node", "2", kWorker, "cpus"}).out);
  EXPECT_EQ(vars[0]["cpus"], std::to_string(cpus));
  vars = variables(
      weftrun({"--nproc-per-node", std::to_string(cpus + 1), "--bind-to", "core", kWorker, "cpus"})
          .out);
  EXPECT_EQ(vars[0]["cpus"], std::to_string(cpus));
  const Finished bad = weftrun({"--nproc-per-node", "1", "--bind-to", "socket", kWorker, "cpus"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--bind-to socket: use core"));
}

TEST(WeftrunTest, HelpExplainsEveryOption) {
  const Finished r = weftrun({"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* option : {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr",
                             "--master-port", "--max-restarts", "--recover", "--backend", "--token",
                             "--stop-grace", "--bind-to", "PROGRAM", "ARGS"}) {
    EXPECT_THAT(r.out, HasSubstr(option));
  }
}

TEST(WeftrunTest, UnknownProgramIsAClearError) {
  const Finished r = weftrun({"--nproc-per-node", "2", "weft-no-such-program"});
  EXPECT_EQ(r.code, 127);
  EXPECT_THAT(r.err, HasSubstr("cannot find PROGRAM 'weft-no-such-program' in PATH"));
}

TEST(WeftrunTest, BadCommandLinesExitWithTwo) {
  EXPECT_EQ(weftrun({kWorker, "env"}).code, 2);           // no --nproc-per-node
  EXPECT_EQ(weftrun({"--nproc-per-node", "2"}).code, 2);  // no PROGRAM
  EXPECT_EQ(weftrun({"--nproc-per-node", "2", "--nprocs", "3", kWorker}).code, 2);
  EXPECT_EQ(weftrun({"--nproc-per-node", "0", kWorker, "env"}).code, 2);
  const Finished r = weftrun({"--nproc-per-node", "1", "--master-addr", "10.1.2.3", kWorker});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("127.0.0.1 only"));
}

}  // namespace
}  // namespace weft::test
