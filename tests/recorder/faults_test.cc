// The flight recorder's fault suite: a 2-rank job under weftrun (tests/recorder/fault_worker.cc)
// commits one fault, and weftrun's diagnosis must name the rank behind, or the ranks that
// diverged, the collective, its site and what the other rank was doing (fifteen faults).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace weft::test {
namespace {

using ::testing::HasSubstr;

struct Fault {
  std::string name;
  bool debug;  // under WEFT_DIST_DEBUG=detail: faults the default mode lets pass
  std::vector<std::string> expect;
  bool fails = true;  // the job fails (a straggler's succeeds)
};

void PrintTo(const Fault& f, std::ostream* os) { *os << f.name; }

class FaultTest : public testing::TestWithParam<Fault> {};

TEST_P(FaultTest, WeftrunNamesTheCulprit) {
  const Fault& f = GetParam();
  EnvChanges env{
      {"WEFT_JOB_TOKEN", std::nullopt},
      {"WEFT_BACKEND", std::nullopt},
      {"WEFT_FLIGHT_RECORDER", std::nullopt},
      {"WEFT_DIST_DEBUG", f.debug ? std::optional<std::string>("detail") : std::nullopt}};
  const Finished r =
      run({WEFTRUN, "--nproc-per-node", "2", "--exit-timeout", "2", FAULT_WORKER, f.name}, env,
          Seconds(60));
  if (f.fails) {
    EXPECT_GT(r.code, 0) << r.err;
  } else {
    EXPECT_EQ(r.code, 0) << r.err;
  }
  for (const std::string& e : f.expect) EXPECT_THAT(r.err, HasSubstr(e));
}

const std::string kBehind = "weftrun: flight recorder: rank 1 is behind on group 'world': ";
const std::string kLastCompleted =
    "rank 1's last collective there is #2 all_reduce(count=4, dtype=float32, op=sum) "
    "(completed, at 'step 2')";
const std::string kDiverged =
    "weftrun: flight recorder: ranks diverged on group 'world' at collective #3: rank 0 called "
    "all_reduce(count=4, dtype=float32, op=sum) at 'step 3'; rank 1 called ";

INSTANTIATE_TEST_SUITE_P(
    Faults, FaultTest,
    testing::Values(
        Fault{"missing", false, {kBehind + kLastCompleted, "rank 0 reached #3 all_reduce(count=4"}},
        Fault{"extra",
              false,
              {"rank 1's last collective there is #3", "rank 0 reached #4", "at 'step 4'"}},
        Fault{"stop", false, {kBehind + kLastCompleted, "at 'step 3'"}},
        Fault{"kill", false, {kBehind + kLastCompleted, "(rank 1 was killed by signal 9"}},
        Fault{"subgroup", false, {"rank 1 is behind on group 'world/0'", "at 'step 3'"}},
        Fault{
            "size", false, {kDiverged + "all_reduce(count=8, dtype=float32, op=sum) at 'step 3'."}},
        Fault{"order",
              false,
              {"rank 1 is behind on group 'world'", "rank 0 is behind on group 'world/0'"}},
        Fault{"p2p",
              false,
              {"point-to-point operations that did not complete: rank 0 in recv(peer=1) on "
               "group 'world' (",
               "rank 1 in recv(peer=0) on group 'world' (",
               "ranks 0 and 1 each wait to receive from the other: a deadlock"}},
        Fault{"collective", false, {kDiverged + "broadcast(count=4, dtype=float32, root=0)"}},
        Fault{"dtype", true, {kDiverged + "all_reduce(count=4, dtype=int32, op=sum)"}},
        Fault{"op", true, {kDiverged + "all_reduce(count=4, dtype=float32, op=max)"}},
        Fault{"root",
              true,
              {"ranks diverged on group 'world' at collective #3: rank 0 called "
               "broadcast(count=4, dtype=float32, root=0) at 'step 3'; rank 1 called "
               "broadcast(count=4, dtype=float32, root=1)"}},
        Fault{"teardown",
              false,
              {"weftrun: rank 1 did not exit within 2 s of rank 0 exiting with code 0 (hung, in "
               "teardown?",
               "weftrun: flight recorder: every operation every rank issued completed: the stop "
               "was outside communication"}},
        Fault{"straggler",
              false,
              {"weftrun: flight recorder: rank 1 is a straggler on group 'world': it arrived last "
               "at 1"},
              /*fails=*/false},
        Fault{"pipeline",
              false,
              {"rank 0 waits on rank 1 in recv(peer=1), and rank 1 is in no point-to-point "
               "operation with it: its last completed operation is recv(peer=0) (completed, at "
               "'stage 1 forward mb 2')"}}),
    [](const testing::TestParamInfo<Fault>& p) { return p.param.name; });

// The pid of the worker weftrun (`launcher`) started as rank `rank`: its child whose
// environment says RANK=<rank>; -1 when there is none.
pid_t worker_pid(pid_t launcher, int rank) {
  const std::string wanted = std::string("\0RANK=", 6) + std::to_string(rank) + '\0';
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const std::size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(line.substr(close + 1));
    char state = 0;
    pid_t parent = 0;
    fields >> state >> parent;
    if (parent != launcher) continue;
    std::ifstream environ(entry.path() / "environ", std::ios::binary);
    const std::string env = '\0' + std::string(std::istreambuf_iterator<char>(environ), {});
    if (env.find(wanted) != std::string::npos) return std::stoi(name);
  }
  return -1;
}

// weft-train's own pipeline (two stages, 1F1B) with stage 1 stopped mid-training: weftrun
// names it and the step it stopped in (and the transfer, when it stopped in one).
TEST(PipelineFaultTest, WeftrunNamesAStageStoppedInTraining) {
  EnvChanges env{{"WEFT_JOB_TOKEN", std::nullopt},
                 {"WEFT_BACKEND", std::nullopt},
                 {"WEFT_FLIGHT_RECORDER", std::nullopt},
                 {"WEFT_DIST_DEBUG", std::nullopt}};
  Subprocess job({WEFTRUN,
                  "--nproc-per-node",
                  "2",
                  WEFT_TRAIN,
                  "--model.dim",
                  "32",
                  "--model.n_layers",
                  "2",
                  "--model.n_heads",
                  "2",
                  "--model.max_seq_len",
                  "32",
                  "--training.seq_len",
                  "32",
                  "--training.batch_size",
                  "4",
                  "--training.steps",
                  "1000000",
                  "--training.dataset_path",
                  DATA,
                  "--metrics.log_freq",
                  "1",
                  "--validation.enable",
                  "false",
                  "--checkpoint.enable",
                  "false",
                  "--parallelism.pipeline_parallel_degree",
                  "2",
                  "--parallelism.pipeline_parallel_microbatch_size",
                  "2",
                  "--comm.train_timeout_seconds",
                  "3"},
                 env);
  ASSERT_TRUE(job.wait_for_stdout(
      [](const std::string& out) { return out.find("step: 5 ") != std::string::npos; },
      Seconds(60)))
      << job.err();
  const pid_t stage1 = worker_pid(job.pid(), 1);
  ASSERT_GT(stage1, 0);
  ASSERT_EQ(::kill(stage1, SIGSTOP), 0);
  EXPECT_GT(job.wait(Seconds(60)), 0);
  EXPECT_THAT(job.err(), HasSubstr("weftrun: flight recorder: rank 1 was stopped (SIGSTOP, or a "
                                   "debugger) when the job ended, the others waiting on it; it"));
  // Where it stopped: a pipeline transfer ("at 'step 6 / pipeline 1SEND_B1'") or one of the
  // step's collectives ("at 'step 5'"), as the timing has it.
  EXPECT_THAT(job.err(), testing::ContainsRegex("rank 1 was stopped [^\n]* at 'step [0-9]+"));
}

// Without weftrun's rings (mpirun, srun), each rank dumps its own ring when an operation
// fails; weftrun writes its workers' the same way. weft-fr reads them, says what weftrun
// says, and exports them as PyTorch's flight recorder writes its dumps.
TEST(WeftFrTest, ReadsDumpsNamesTheCulpritAndExportsThemForTorch) {
  TempDir dir("weft-fr");
  const std::string prefix = dir.file("trace_");
  EnvChanges env{{"WEFT_JOB_TOKEN", std::nullopt},
                 {"WEFT_BACKEND", std::nullopt},
                 {"WEFT_FLIGHT_RECORDER", std::nullopt},
                 {"WEFT_DIST_DEBUG", std::nullopt},
                 {"WEFT_FLIGHT_RECORDER_DUMP", prefix}};
  const Finished job =
      run({WEFTRUN, "--nproc-per-node", "2", FAULT_WORKER, "size"}, env, Seconds(60));
  EXPECT_THAT(job.err, HasSubstr("weftrun: flight recorder: wrote " + prefix + "1.json"));

  const Finished fr = run({WEFT_FR, "--records", prefix});
  EXPECT_EQ(fr.code, 0) << fr.err;
  EXPECT_THAT(fr.out, HasSubstr(kDiverged.substr(std::string("weftrun: ").size()) +
                                "all_reduce(count=8, dtype=float32, op=sum) at 'step 3'."));
  EXPECT_THAT(fr.out, HasSubstr("rank 1 (pid "));

  const std::string torch = dir.file("torch");
  const Finished exported = run({WEFT_FR, "--export-torch", torch, prefix});
  ASSERT_EQ(exported.code, 0) << exported.err;
  // What PyTorch's analyser reads of each file (torch/distributed/flight_recorder).
  const Finished python =
      run({PYTHON, "-c",
           "import pickle, sys\n"
           "for r in (0, 1):\n"
           "    d = pickle.load(open(sys.argv[1] + '/weft_trace_rank_%d' % r, 'rb'))\n"
           "    e = d['entries'][3]\n"
           "    print(r, d['version'], d['pg_config']['0']['ranks'], e['profiling_name'],\n"
           "          e['process_group'], e['collective_seq_id'], e['input_sizes'],\n"
           "          e['input_dtypes'], e['state'], e['frames'][0]['name'])\n",
           torch});
  ASSERT_EQ(python.code, 0) << python.err;
  EXPECT_EQ(python.out,
            "0 2.10 [0, 1] nccl:all_reduce ['0', 'world'] 3 [[4]] ['Float'] started step 3\n"
            "1 2.10 [0, 1] nccl:all_reduce ['0', 'world'] 3 [[8]] ['Float'] started step 3\n");
}

TEST(WeftFrTest, RefusesWhatIsNotADump) {
  TempDir dir("weft-fr");
  EXPECT_EQ(run({WEFT_FR, dir.file("none_")}).code, 2);
  std::ofstream(dir.file("bad_0.json")) << "{\"format\": \"weft-flight-recorder\"}";
  const Finished bad = run({WEFT_FR, dir.file("bad_")});
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err, HasSubstr("'version' is missing"));
}

}  // namespace
}  // namespace weft::test
