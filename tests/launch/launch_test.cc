// weft/launch's pieces in-process: line prefixing, the environment contract, the job
// token, option checks, program lookup, exit descriptions.
#include "weft/launch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <regex>
#include <string>

#include "weft/launch/internal/exit_status.h"
#include "weft/launch/internal/line_prefixer.h"

namespace weft::launch {
namespace {

using internal::ExitStatus;
using internal::LinePrefixer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(LinePrefixerTest, PrefixesCompleteLinesAndKeepsTheRest) {
  LinePrefixer p("[3] ");
  EXPECT_EQ(p.feed("a\nbb\nc"), "[3] a\n[3] bb\n");
  EXPECT_EQ(p.feed("cc"), "");
  EXPECT_EQ(p.feed("c\n\n"), "[3] cccc\n[3] \n");
  EXPECT_EQ(p.finish(), "");
}

TEST(LinePrefixerTest, FinishEndsTheLastLine) {
  LinePrefixer p("[0] ");
  EXPECT_EQ(p.feed("tail"), "");
  EXPECT_EQ(p.finish(), "[0] tail\n");
  EXPECT_EQ(p.finish(), "");
}

TEST(LinePrefixerTest, CutsLinesAtTheLimit) {
  LinePrefixer p("> ", 4);
  EXPECT_EQ(p.feed("abcdefghij"), "> abcd\n> efgh\n");
  EXPECT_EQ(p.feed("k\nxy"), "> ijk\n");
  EXPECT_EQ(p.finish(), "> xy\n");
}

LaunchOptions two_nodes() {
  return {.nproc_per_node = 4,
          .nnodes = 2,
          .node_rank = 1,
          .master_addr = "10.0.0.1",
          .master_port = 29500,
          .token = "t",
          .program = "sh"};
}

TEST(WorkerEnvTest, RanksFollowTheNodeRank) {
  const JobPlan plan = plan_job(two_nodes(), nullptr, "/bin:/usr/bin");
  EXPECT_FALSE(plan.hosts_store);
  EXPECT_EQ(plan.master_addr, "10.0.0.1");
  const EnvVars vars = worker_variables(plan, {.store = 29500, .master = 29501}, 2, 5);
  const auto value = [&](const std::string& name) {
    for (const auto& [k, v] : vars) {
      if (k == name) return v;
    }
    return std::string("<unset>");
  };
  EXPECT_EQ(value("RANK"), "6");
  EXPECT_EQ(value("WORLD_SIZE"), "8");
  EXPECT_EQ(value("LOCAL_RANK"), "2");
  EXPECT_EQ(value("LOCAL_WORLD_SIZE"), "4");
  EXPECT_EQ(value("GROUP_RANK"), "1");
  EXPECT_EQ(value("NODE_RANK"), "1");
  EXPECT_EQ(value("WEFT_STORE_PORT"), "29500");
  EXPECT_EQ(value("MASTER_PORT"), "29501");
  EXPECT_EQ(value("WEFT_RESTART_COUNT"), "5");
  EXPECT_EQ(value("WEFT_BACKEND"), "<unset>");
}

// OpenBLAS's idle workers would compete with the ranks for their first ~0.1 s: weftrun runs
// it on one thread unless the user chose otherwise.
TEST(WorkerEnvTest, OpenBlasOnOneThreadUnlessTheUserSetIt) {
  const char* plain[] = {"PATH=/bin", nullptr};
  EXPECT_THAT(merge_environment(plain, {{"RANK", "1"}}, worker_defaults()),
              ElementsAre("PATH=/bin", "RANK=1", "OPENBLAS_NUM_THREADS=1"));
  const char* users[] = {"OPENBLAS_NUM_THREADS=2", nullptr};
  EXPECT_THAT(merge_environment(users, {}, worker_defaults()),
              ElementsAre("OPENBLAS_NUM_THREADS=2"));
}

TEST(WorkerEnvTest, MergeReplacesInheritedVariables) {
  const char* base[] = {"PATH=/bin", "RANK=9", "HOME=/root", nullptr};
  EXPECT_THAT(merge_environment(base, {{"RANK", "1"}, {"WORLD_SIZE", "2"}}),
              ElementsAre("PATH=/bin", "HOME=/root", "RANK=1", "WORLD_SIZE=2"));
  EXPECT_THAT(merge_environment(nullptr, {{"A", "b"}}), ElementsAre("A=b"));
}

TEST(JobTokenTest, FlagThenEnvironmentThenRandom) {
  EXPECT_EQ(resolve_job_token("flag", "env", 2), "flag");
  EXPECT_EQ(resolve_job_token(std::nullopt, "env", 2), "env");
  const std::string a = resolve_job_token(std::nullopt, "", 1);
  const std::string b = resolve_job_token(std::nullopt, nullptr, 1);
  EXPECT_TRUE(std::regex_match(a, std::regex("[0-9a-f]{32}"))) << a;
  EXPECT_NE(a, b);
}

TEST(JobTokenTest, MultiNodeNeedsOne) {
  try {
    resolve_job_token(std::nullopt, nullptr, 2);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("--token"));
  }
  EXPECT_THROW(resolve_job_token(std::string(), nullptr, 1), InvalidArgument);
}

TEST(PlanJobTest, SingleNodeListensOnLoopback) {
  LaunchOptions o{.nproc_per_node = 2, .master_addr = "localhost", .program = "sh"};
  const JobPlan plan = plan_job(o, nullptr, "/bin:/usr/bin");
  EXPECT_TRUE(plan.hosts_store);
  EXPECT_EQ(plan.master_addr, "127.0.0.1");
  EXPECT_EQ(plan.bind_host, "127.0.0.1");
  EXPECT_EQ(plan.token.size(), 32u);
}

TEST(PlanJobTest, RejectsWhatCannotWork) {
  const auto rejects = [](LaunchOptions o, const std::string& says) {
    try {
      plan_job(o, nullptr, "/bin:/usr/bin");
      ADD_FAILURE() << "accepted; expected an error saying " << says;
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr(says));
    }
  };
  rejects({.nproc_per_node = 0, .program = "sh"}, "--nproc-per-node 0");
  rejects({.nnodes = 2, .node_rank = 2, .program = "sh"}, "0 to 1");
  rejects({.nnodes = 2, .master_port = 1, .token = "t", .program = "sh"}, "needs --master-addr");
  rejects({.nnodes = 2, .master_addr = "h", .token = "t", .program = "sh"}, "needs --master-port");
  rejects({.master_addr = "10.0.0.1", .program = "sh"}, "127.0.0.1 only");
  rejects({.master_port = 70000, .program = "sh"}, "--master-port 70000");
  rejects({.max_restarts = -1, .program = "sh"}, "--max-restarts -1");
  rejects({.stop_grace = Seconds(-1), .program = "sh"}, "--stop-grace");
}

TEST(FindProgramTest, LooksNamesUpInPath) {
  EXPECT_EQ(find_program("sh", "/nonexistent:/bin"), "/bin/sh");
  EXPECT_EQ(find_program("/bin/sh", ""), "/bin/sh");
  EXPECT_THROW(find_program("weft-no-such-program", "/bin:/usr/bin"), ProgramNotFound);
  EXPECT_THROW(find_program("/etc/passwd", nullptr), ProgramNotFound);  // not executable
  EXPECT_THROW(find_program("bin", "/"), ProgramNotFound);              // a directory
}

TEST(ExitStatusTest, SaysCodeOrSignal) {
  EXPECT_EQ((ExitStatus{.code = 3}).describe(), "exited with code 3");
  EXPECT_EQ((ExitStatus{.code = 3}).shell_code(), 3);
  const ExitStatus killed{.signal = SIGSEGV};
  EXPECT_EQ(killed.describe(), "was killed by signal 11 (SIGSEGV: Segmentation fault)");
  EXPECT_EQ(killed.shell_code(), 128 + SIGSEGV);
  EXPECT_FALSE(killed.ok());
  EXPECT_TRUE(ExitStatus{}.ok());
}

}  // namespace
}  // namespace weft::launch
