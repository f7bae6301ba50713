// Crashes, on purpose. A 2-rank FSDP job under weftrun --max-restarts whose ranks are killed at
// random instants finishes with the losses and final state of a job never killed, bit for bit;
// and a save killed at every one of its file-system calls always leaves a newest complete
// checkpoint that loads and verifies.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "weft/checkpoint/file_io.h"
#include "weft/checkpoint/shard_file.h"
#include "weft/train/checkpointing.h"
#include "weft/train/trainer.h"

namespace weft::train {
namespace {

namespace fs = std::filesystem;

const std::string kData = WEFT_SOURCE_DIR "/data/tinyshakespeare.txt";

// A small model of `dim` and `seq`: 200 steps of dim 64, seq 64 take under 2 s on two
// ranks.
std::string small_model(int steps, int dim = 32, int seq = 32) {
  const std::string d = std::to_string(dim), s = std::to_string(seq);
  return "--model.dim " + d + " --model.n_layers 2 --model.n_heads 2 --model.max_seq_len " + s +
         " --training.seq_len " + s + " --training.batch_size 4 --training.steps " +
         std::to_string(steps) + " --training.dataset_path " + kData +
         " --metrics.log_freq 1 --metrics.peak_gflops 100 --validation.enable false";
}

// Each step's loss as last logged (a resumed job logs the steps after its checkpoint again).
std::map<std::int64_t, double> last_losses(const std::string& jsonl) {
  std::map<std::int64_t, double> losses;
  std::ifstream in(jsonl);
  for (std::string line; std::getline(in, line);) {
    try {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) losses[j["step"].get<std::int64_t>()] = j["loss"].get<double>();
    } catch (const nlohmann::json::exception&) {
      // A line cut by a kill: the step is logged again after the resume.
    }
  }
  return losses;
}

bool is_weft_train(pid_t pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name == "weft-train";
}

// Every chunk's checksum in the checkpoint: equal maps, bitwise equal states.
std::map<std::string, std::uint64_t> checksums(const std::string& dir) {
  std::map<std::string, std::uint64_t> all;
  for (const auto& [name, t] : read_manifest(dir).tensors) {
    for (const auto& c : t.chunks) all[name + checkpoint::box_string(c.box)] = c.checksum;
  }
  return all;
}

// The runs the kill tests make, as set by WEFT_CHAOS_KILLS (default 4), WEFT_CHAOS_RANKS
// (default 2) and WEFT_CHAOS_CONFIG (a weft-train configuration; default the small model
// above). Raised, they measure recovery (docs/RECOVERY.md has the commands).
struct ChaosSetup {
  int kills = 4, ranks = 2, steps = 0;
  std::string model;  // weft-train's options for the model and its training
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::max(1, std::atoi(v)) : fallback;
}

ChaosSetup chaos_setup() {
  ChaosSetup c{.kills = env_int("WEFT_CHAOS_KILLS", 4), .ranks = env_int("WEFT_CHAOS_RANKS", 2)};
  const char* config = std::getenv("WEFT_CHAOS_CONFIG");
  // Steps enough for every kill, 0.05-0.4 s apart, and its recovery.
  c.steps = config != nullptr ? 20 + 12 * c.kills : 200 + 250 * c.kills;
  c.model = config != nullptr ? std::string("--config ") + config + " --training.steps " +
                                    std::to_string(c.steps) + " --training.dataset_path " + kData +
                                    " --metrics.log_freq 1 --validation.enable false"
                              : small_model(c.steps, 64, 64);
  return c;
}

int steps_logged(const std::string& out) {
  int n = 0;
  for (std::size_t at = 0; (at = out.find("] step: ", at)) != std::string::npos; ++at) ++n;
  return n;
}

struct Chaos {
  int kills = 0;
  std::vector<double> recovery_seconds;  // from each kill to the next step logged
};

// What rank 0 says after an in-place recovery, or a replacement that became rank 0.
constexpr const char* kInPlace = "recovered in place in|joined the job in place of";

// Kills a random rank of `job` (weft-train processes whose command line holds `tag`) at a
// random instant in the 0.05-0.4 s after training went on again, `kills` times or until the
// job ends. The first after the first step: a rank dead before training began ends the start-up
// (weftrun's restarts cover that).
Chaos kill_at_random(test::Subprocess& job, const std::string& tag, int kills, unsigned seed) {
  std::mt19937 random(seed);
  Chaos chaos;
  const auto read = [&](double seconds) {
    job.wait_for_stdout([](const std::string&) { return false; }, Seconds(seconds));
  };
  job.wait_for_stdout([](const std::string& out) { return steps_logged(out) > 0; }, Seconds(600));
  while (chaos.kills < kills && !test::process_gone(job.pid())) {
    read(std::uniform_int_distribution<int>(50, 400)(random) / 1000.0);
    std::vector<pid_t> ranks;
    for (pid_t pid : test::live_processes_with(tag))
      if (is_weft_train(pid)) ranks.push_back(pid);
    if (ranks.empty()) continue;  // starting, or finished
    const int logged = steps_logged(job.out());
    const auto killed = std::chrono::steady_clock::now();
    ::kill(ranks[std::uniform_int_distribution<std::size_t>(0, ranks.size() - 1)(random)], SIGKILL);
    ++chaos.kills;
    while (steps_logged(job.out()) == logged && !test::process_gone(job.pid())) read(0.002);
    if (steps_logged(job.out()) > logged) {
      chaos.recovery_seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count());
    }
  }
  return chaos;
}

// The kills' recovery times, and the steps trained twice (logged more than once).
void print_recoveries(const char* how, unsigned seed, Chaos chaos, const std::string& out,
                      int steps) {
  std::vector<double>& s = chaos.recovery_seconds;
  std::sort(s.begin(), s.end());
  const auto at = [&](double q) {
    return s.empty() ? 0.0 : s[static_cast<std::size_t>(q * static_cast<double>(s.size() - 1))];
  };
  std::printf(
      "%s, seed %u: %d ranks killed; kill to next step p50 %.3f s, p99 %.3f s, max %.3f s; "
      "%d steps trained again\n",
      how, seed, chaos.kills, at(0.5), at(0.99), s.empty() ? 0.0 : s.back(),
      steps_logged(out) - steps);
}

// weftrun running weft-train for the setup's steps, checkpoints every 20 steps into `name`;
// `layout` and `launcher` the options that differ.
std::vector<std::string> job(const test::TempDir& tmp, const ChaosSetup& c, const std::string& name,
                             const std::string& layout, const std::string& launcher) {
  return test::words_of(std::string(WEFT_RUN_TOOL) + " --nproc-per-node " +
                        std::to_string(c.ranks) + " " + launcher + " " WEFT_TRAIN_TOOL " " +
                        c.model + " " + layout +
                        " --checkpoint.enable true --checkpoint.interval 20"
                        " --checkpoint.keep_latest 2 --checkpoint.resume true"
                        " --comm.init_timeout_seconds 30 --checkpoint.folder " +
                        tmp.file(name) + " --metrics.jsonl_path " + tmp.file(name + ".jsonl"));
}

void expect_same_run(const test::TempDir& tmp, const std::string& want, const std::string& got,
                     int steps, unsigned seed) {
  const auto want_losses = last_losses(tmp.file(want + ".jsonl"));
  ASSERT_EQ(want_losses.size(), static_cast<std::size_t>(steps));
  const auto got_losses = last_losses(tmp.file(got + ".jsonl"));
  for (const auto& [step, loss] : want_losses) {
    const auto it = got_losses.find(step);
    if (it == got_losses.end() || it->second != loss) {
      ADD_FAILURE() << "seed " << seed << ": step " << step << " differs first ("
                    << (it == got_losses.end() ? "missing" : std::to_string(it->second))
                    << " against " << loss << ")";
      break;
    }
  }
  EXPECT_EQ(got_losses, want_losses) << "seed " << seed;
  const std::string last = step_directory_name(steps);
  EXPECT_EQ(checksums(tmp.file(got + "/" + last)), checksums(tmp.file(want + "/" + last)))
      << "seed " << seed;
}

// A job whose ranks are killed at random (`launcher`: weftrun's recovery options, restarts
// `restarts`, by default two a kill) finishes with the losses and the final checkpoint of one
// never killed, weftrun or rank 0 having said one of `said`'s |-separated lines (how it
// recovered).
void kill_and_compare(const char* how, const std::string& layout, const std::string& launcher,
                      const std::string& said, ChaosSetup c = chaos_setup(), int restarts = -1) {
  const test::TempDir tmp("weft-chaos");
  const test::Finished calm = test::run(job(tmp, c, "calm", layout, ""), {}, Seconds(1800));
  ASSERT_EQ(calm.code, 0) << calm.err;
  const unsigned seed = std::random_device{}();
  if (restarts < 0) restarts = 2 * c.kills;
  test::Subprocess run(
      job(tmp, c, "chaos", layout, launcher + " --max-restarts " + std::to_string(restarts)));
  const Chaos chaos = kill_at_random(run, tmp.file("chaos"), c.kills, seed);
  ASSERT_EQ(run.wait(Seconds(1800)), 0) << "seed " << seed << "\n" << run.err();
  print_recoveries(how, seed, chaos, run.out(), c.steps);
  // A recovery that took a timeout (a round left for the next, comm.rejoin_timeout_seconds):
  // what weftrun and the ranks said.
  if (!chaos.recovery_seconds.empty() &&
      *std::max_element(chaos.recovery_seconds.begin(), chaos.recovery_seconds.end()) > 10) {
    std::printf("%s", run.err().c_str());
  }
  EXPECT_GE(chaos.kills, std::min(2, c.kills)) << "the job ended before the harness could kill it";
  bool told = false;
  for (std::size_t at = 0; at <= said.size();) {
    const std::size_t bar = std::min(said.find('|', at), said.size());
    told = told || (run.out() + run.err()).find(said.substr(at, bar - at)) != std::string::npos;
    at = bar + 1;
  }
  EXPECT_TRUE(told) << said << "\n" << run.err();
  expect_same_run(tmp, "calm", "chaos", c.steps, seed);
}

TEST(ChaosTest, KilledRanksRestartAndFinishBitwise) {
  kill_and_compare("restart", "--parallelism.data_parallel_shard_degree 2", "",
                   "; restarting all ");
}

// DDP survives a rank's death in place: the others keep their state, the replacement takes
// it, and the run goes on from the current step (docs/RECOVERY.md), bit for bit.
TEST(ChaosTest, KilledRanksRejoinInPlaceAndFinishBitwise) {
  kill_and_compare("in place", "", "--recover in-place", kInPlace);
}

// An elastic DDP job goes on without a killed rank, its slots of the global batch shared by
// the others, and takes the replacement back at a step boundary (docs/RECOVERY.md); in the
// layout-invariant mode every step is bitwise the calm run's, whichever ranks trained it.
TEST(ChaosTest, KilledRanksLeaveAndRejoinElasticallyAndFinishBitwise) {
  kill_and_compare("elastic", "--training.deterministic layout", "--recover elastic",
                   "recovered elastically");
}

// With no restart left, an elastic job finishes on the ranks that survived, the same.
TEST(ChaosTest, ElasticJobFinishesOnTheRanksLeftWhenNoRestartRemains) {
  const ChaosSetup c{.kills = 1, .ranks = 3, .steps = 300, .model = small_model(300, 64, 64)};
  kill_and_compare("elastic, no restart", "--training.deterministic layout", "--recover elastic",
                   "the others go on without it", c, 0);
}

// Every process holding the state killed at once: their replacements read the deaths weftrun
// recorded and end at once, and weftrun restarts every worker from the newest checkpoint,
// instead of the replacements waiting out their admission (130 s).
TEST(ChaosTest, ElasticJobRestartsAtOnceWhenEveryRankHoldingTheStateDies) {
  const ChaosSetup c{.ranks = 2, .steps = 300, .model = small_model(300, 64, 64)};
  const std::string layout = "--training.deterministic layout";
  const test::TempDir tmp("weft-chaos");
  const test::Finished calm = test::run(job(tmp, c, "calm", layout, ""), {}, Seconds(600));
  ASSERT_EQ(calm.code, 0) << calm.err;
  test::Subprocess run(job(tmp, c, "chaos", layout, "--recover elastic --max-restarts 6"));
  run.wait_for_stdout([](const std::string& out) { return steps_logged(out) > 30; }, Seconds(600));
  const int logged = steps_logged(run.out());
  const auto killed = std::chrono::steady_clock::now();
  for (pid_t pid : test::live_processes_with(tmp.file("chaos")))
    if (is_weft_train(pid)) ::kill(pid, SIGKILL);
  run.wait_for_stdout([&](const std::string& out) { return steps_logged(out) > logged; },
                      Seconds(600));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count(), 30);
  ASSERT_EQ(run.wait(Seconds(600)), 0) << run.err();
  EXPECT_NE(run.err().find("; restarting all "), std::string::npos) << run.err();
  EXPECT_NE(run.err().find("died before rank"), std::string::npos) << run.err();
  expect_same_run(tmp, "calm", "chaos", c.steps, 0);
}

// Sharded layouts rebuild a dead rank's pieces from its buddy's copy, the others theirs from
// their own, and go on from the newest step every copy survived at, bit for bit.
class ShardedChaosTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ShardedChaosTest, KilledRanksRejoinInPlaceFromBuddyCopiesAndFinishBitwise) {
  kill_and_compare(GetParam(), GetParam(), "--recover in-place", kInPlace);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ShardedChaosTest,
                         ::testing::Values("--parallelism.data_parallel_shard_degree 2",
                                           "--parallelism.tensor_parallel_degree 2",
                                           "--parallelism.pipeline_parallel_degree 2",
                                           "--parallelism.context_parallel_degree 2"));

// HSDP (replicas of an FSDP group) on 4 ranks: the same, from the buddy copies.
TEST(ChaosTest, KilledRanksOfAnHsdpJobRejoinInPlaceAndFinishBitwise) {
  ChaosSetup c = chaos_setup();
  c.ranks = std::max(c.ranks, 4);
  kill_and_compare("HSDP in place",
                   "--parallelism.data_parallel_replicate_degree 2 "
                   "--parallelism.data_parallel_shard_degree 2",
                   "--recover in-place", kInPlace, c);
}

// Only a replicated layout goes on with fewer ranks: the others are refused before training.
TEST(ChaosTest, ElasticRecoveryIsRefusedForAShardedLayout) {
  const test::Finished r =
      test::run(test::words_of(std::string(WEFT_RUN_TOOL) +
                               " --nproc-per-node 2 --recover elastic " + WEFT_TRAIN_TOOL + " " +
                               small_model(2) + " --parallelism.data_parallel_shard_degree 2"),
                {}, Seconds(60));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("use --recover in-place"), std::string::npos) << r.err;
}

// Trains 4 steps with a checkpoint every 2 into `folder`, calling `hook` before every
// file-system call of the checkpoints (in a forked child: the hook may end it).
int train_in_child(const std::string& folder, checkpoint::FileSystemHook hook) {
  const pid_t child = test::fork_child([&] {
    checkpoint::set_file_system_hook(std::move(hook));
    std::vector<std::pair<std::string, std::string>> o;
    const auto words = test::words_of(small_model(4) +
                                      " --checkpoint.enable true --checkpoint.interval 2"
                                      " --checkpoint.keep_latest 1 --checkpoint.folder " +
                                      folder);
    for (std::size_t i = 0; i + 1 < words.size(); i += 2)
      o.emplace_back(words[i].substr(2), words[i + 1]);
    std::ostringstream log;
    Trainer(load_config("", o), log).run();
  });
  return test::wait_child(child, Seconds(60));
}

TEST(ChaosTest, SaveKilledAtEveryFileSystemCallLeavesACheckpoint) {
  const test::TempDir tmp("weft-chaos-fs");
  // How many calls the run makes, and how many before its second save starts.
  const std::string counted = tmp.file("counted");
  ASSERT_EQ(train_in_child(
                counted,
                [n = 0, path = tmp.file("calls")](const char* call, const std::string& p) mutable {
                  std::ofstream(path, std::ios::app) << n++ << ' ' << call << ' ' << p << '\n';
                }),
            0);
  std::ifstream calls(tmp.file("calls"));
  int total = 0, second = -1;
  for (std::string line; std::getline(calls, line); ++total) {
    if (second < 0 && line.find("step-00000004") != std::string::npos) second = total;
  }
  ASSERT_GT(second, 0);
  for (int k = second; k < total; ++k) {
    const std::string folder = tmp.file("k" + std::to_string(k));
    const int code = train_in_child(folder, [k, n = 0](const char*, const std::string&) mutable {
      if (n++ == k) ::_exit(3);
    });
    ASSERT_EQ(code, 3) << "call " << k;
    const std::vector<std::string> complete = complete_checkpoints(folder);
    ASSERT_FALSE(complete.empty()) << "call " << k;
    const checkpoint::Manifest m = read_manifest(complete.back());
    EXPECT_NO_THROW(checkpoint::verify_checkpoint(complete.back(), m)) << "call " << k;
    nn::Llama model(parse_config(m.config, "manifest").model);
    EXPECT_NO_THROW(load_model(complete.back(), model)) << "call " << k;
    fs::remove_all(folder);
  }
}

}  // namespace
}  // namespace weft::train
