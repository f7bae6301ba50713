// Crashes, on purpose. A 2-rank FSDP job under weftrun --max-restarts whose ranks are killed at
// random instants finishes with the losses and final state of a job never killed, bit for bit;
// and a save killed at every one of its file-system calls always leaves a newest complete
// checkpoint that loads and verifies.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
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

TEST(ChaosTest, KilledRanksRestartAndFinishBitwise) {
  constexpr int kSteps = 200;
  const test::TempDir tmp("weft-chaos");
  const auto job = [&](const std::string& name, int restarts) {
    return test::words_of(std::string(WEFT_RUN_TOOL) + " --nproc-per-node 2 --max-restarts " +
                          std::to_string(restarts) + " " WEFT_TRAIN_TOOL " " +
                          small_model(kSteps, 64, 64) +
                          " --parallelism.data_parallel_shard_degree 2 --checkpoint.enable true"
                          " --checkpoint.interval 20 --checkpoint.keep_latest 2"
                          " --checkpoint.resume true --checkpoint.folder " +
                          tmp.file(name) + " --metrics.jsonl_path " + tmp.file(name + ".jsonl"));
  };
  const test::Finished calm = test::run(job("calm", 0), {}, Seconds(120));
  ASSERT_EQ(calm.code, 0) << calm.err;

  const unsigned seed = std::random_device{}();
  std::mt19937 random(seed);
  test::Subprocess chaos(job("chaos", 8));
  int kills = 0;
  while (kills < 4 && !test::process_gone(chaos.pid())) {
    // A random instant in the 0.4 s after the last kill: starting, training, saving,
    // in a collective or in the optimizer step.
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(50, 400)(random)));
    std::vector<pid_t> ranks;
    for (pid_t pid : test::live_processes_with(tmp.file("chaos")))
      if (is_weft_train(pid)) ranks.push_back(pid);
    if (ranks.empty()) continue;  // between a stop and a restart, or finished
    ::kill(ranks[std::uniform_int_distribution<std::size_t>(0, ranks.size() - 1)(random)], SIGKILL);
    ++kills;
  }
  ASSERT_EQ(chaos.wait(Seconds(180)), 0) << "seed " << seed << "\n" << chaos.err();
  std::printf("seed %u: %d ranks killed\n", seed, kills);
  const auto want = last_losses(tmp.file("calm.jsonl"));
  const auto got = last_losses(tmp.file("chaos.jsonl"));
  EXPECT_GE(kills, 2) << "the job ended before the harness could kill it";
  ASSERT_EQ(want.size(), static_cast<std::size_t>(kSteps));
  EXPECT_EQ(got, want) << "seed " << seed;
  const std::string last = step_directory_name(kSteps);
  EXPECT_EQ(checksums(tmp.file("chaos/" + last)), checksums(tmp.file("calm/" + last)))
      << "seed " << seed;
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
