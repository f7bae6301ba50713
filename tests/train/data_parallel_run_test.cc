// weft-train under weftrun on the shm backend, the debug model (configs/debug.toml) for 12
// steps at a global batch of 8 sequences: one process against DDP, every FSDP mode (2 ranks,
// full_shard also 4) and HSDP, gradient accumulation, tensor parallelism (2 and 4 ranks, with
// and without sequence parallelism and loss parallel), FSDP or DDP x TP, pipeline parallelism
// (alone and x TP) and context parallelism (2 and 4 ranks, and x FSDP). The losses (and
// validation losses) must equal the one-process run's to 1e-6 relative at every step
// (docs/PARALLELISM.md says why not bitwise); a resumed run must equal its uninterrupted run
// bit for bit in the same layout, and to rounding in another.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace {

namespace fs = std::filesystem;

constexpr double kTolerance = 1e-6;
// Every run trains kSteps steps, with a checkpoint (and a validation) every kHalf; resumed
// runs start at step kHalf.
constexpr std::size_t kSteps = 12, kHalf = 6;
const std::string kLast = "step-00000012", kMiddle = "step-00000006";
// One weft-train run: 12 steps of the debug model take seconds; a run past this is hung.
constexpr weft::Seconds kRunLimit{240};

class DataParallelRunTest : public testing::Test {
 protected:
  // Runs weft-train on `ranks` processes (1: without weftrun) with `args`; returns the JSON
  // lines' path. What it prints is appended to <name>.log.
  // `launcher`: the command that starts the ranks (weftrun's by default).
  std::string train(const std::string& name, int ranks, const std::string& args,
                    std::string launcher = "") {
    const std::string jsonl = (dir_ / (name + ".jsonl")).string();
    if (launcher.empty() && ranks > 1) {
      launcher = std::string(WEFT_RUN_TOOL) + " --nproc-per-node " + std::to_string(ranks);
    }
    const std::string command =
        (launcher.empty() ? "" : launcher + " ") +
        WEFT_TRAIN_TOOL " --config " WEFT_SOURCE_DIR "/configs/debug.toml" +
        " --training.dataset_path " WEFT_SOURCE_DIR "/data/tinyshakespeare.txt" +
        " --training.steps " + std::to_string(kSteps) + " --training.seq_len 64" +
        " --metrics.log_freq 1 --metrics.peak_gflops 100 --validation.freq " +
        std::to_string(kHalf) + " --validation.steps 2" + " --checkpoint.folder " +
        (dir_ / name).string() + " --metrics.jsonl_path " + jsonl + " " + args;
    const weft::test::Finished f = weft::test::run(weft::test::words_of(command), {}, kRunLimit);
    EXPECT_EQ(f.code, 0) << command << "\n" << f.out << f.err;
    std::ofstream(dir_ / (name + ".log"), std::ios::app) << f.out;
    return jsonl;
  }
  static std::vector<double> read(const std::string& path, const char* key) {
    std::vector<double> values;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains(key)) values.push_back(j[key].get<double>());
    }
    return values;
  }
  static void expect_close(const std::string& got, const std::string& want, double rel,
                           const std::string& what) {
    for (const char* key : {"loss", "val_loss"}) {
      const auto a = read(want, key), b = read(got, key);
      ASSERT_EQ(a.size(), b.size()) << what << " " << key;
      ASSERT_FALSE(a.empty()) << what;
      double worst = 0;
      for (std::size_t i = 0; i < a.size(); ++i)
        worst = std::max(worst, std::abs(b[i] - a[i]) / a[i]);
      EXPECT_LE(worst, rel) << what << " " << key;
      std::printf("%-40s %-8s largest relative difference %.2e\n", what.c_str(), key, worst);
    }
  }

  // Runs one process at a global batch of 8, then each layout, and expects every layout's
  // losses within kTolerance of it.
  struct Layout {
    const char* name;
    int ranks;
    std::string args;
    bool checkpoint = false;  // writes the final checkpoint
  };
  void expect_layouts_match(const std::vector<Layout>& layouts) {
    const std::string none = "--checkpoint.enable false ";
    const std::string one = train("one", 1, none + "--training.batch_size 8");
    for (const Layout& l : layouts)
      expect_close(train(l.name, l.ranks, (l.checkpoint ? "" : none) + l.args), one, kTolerance,
                   l.name);
  }

  // weft-generate samples from a checkpoint (a step directory) of any layout.
  static void expect_generates(const fs::path& checkpoint) {
    const weft::test::Finished g =
        weft::test::run({WEFT_GENERATE_TOOL, "--checkpoint", checkpoint.string(), "--prompt",
                         "ROMEO:", "--max-new-tokens", "40", "--temperature", "0"},
                        {}, kRunLimit);
    EXPECT_EQ(g.code, 0) << g.err;
    EXPECT_GE(g.out.size(), 40u) << g.out;
  }

  // Drops run `name`'s last checkpoint, copies its folder to `copies` (for other layouts to
  // resume), resumes it with `args` from step kHalf, and expects the steps after it bit for
  // bit as `whole` (the uninterrupted run's losses).
  void expect_resumes_bitwise(const std::string& name, int ranks, const std::string& args,
                              const std::vector<double>& whole,
                              const std::vector<std::string>& copies) {
    fs::remove_all(dir_ / name / kLast);
    for (const std::string& copy : copies)
      fs::copy(dir_ / name, dir_ / copy, fs::copy_options::recursive);
    const auto resumed = read(train(name, ranks, args + "--checkpoint.resume true"), "loss");
    ASSERT_EQ(resumed.size(), kSteps + kHalf);  // the resumed run appended its steps
    for (std::size_t i = kHalf; i < kSteps; ++i)
      EXPECT_EQ(resumed[i + kHalf], whole[i]) << name << " step " << i + 1;
  }

  // A run resumed at step kHalf against the uninterrupted run's later steps, to rounding.
  static void expect_continues(const std::vector<double>& resumed,
                               const std::vector<double>& whole) {
    ASSERT_EQ(resumed.size(), kSteps - kHalf);
    for (std::size_t i = 0; i < resumed.size(); ++i) {
      EXPECT_NEAR(resumed[i], whole[kHalf + i], kTolerance * whole[kHalf + i])
          << "step " << kHalf + i + 1;
    }
  }

  const weft::test::TempDir tmp_{"weft-dp-run"};
  const fs::path& dir_ = tmp_.path();
};

// Each layout's losses against one process at the same global batch. The 4-rank data-parallel
// layouts run on threads in data_parallel_test; here 4 ranks run where the layout needs them
// (HSDP, TP 4, the 2-D meshes) and once for FSDP. The variants of one strategy (zero2, TP
// without sequence parallelism, CP's all-gather exchange) run on threads only
// (tests/parallel): as processes they would match one process whether or not weft-train
// honoured their option; TrainTest.ParallelismOptionsReachParallelize checks that it does.
TEST_F(DataParallelRunTest, DataParallelLayoutsMatchOneProcess) {
  expect_layouts_match({
      {"ddp-2", 2, "--training.batch_size 4"},
      {"ddp-2-accumulate-2", 2, "--training.batch_size 2 --training.gradient_accumulation_steps 2"},
      {"zero1-2", 2,
       "--training.batch_size 4 --parallelism.data_parallel_shard_degree 2 --parallelism.fsdp_mode "
       "zero1"},
      {"full_shard-4", 4, "--training.batch_size 2 --parallelism.data_parallel_shard_degree 4"},
  });
}

// The same job started by mpirun on the mpi backend: DDP and FSDP against one process.
TEST_F(DataParallelRunTest, MpiRunsMatchOneProcess) {
#ifndef WEFT_MPIRUN
  GTEST_SKIP() << "built without the mpi backend (WEFT_WITH_MPI)";
#else
  const std::string none = "--checkpoint.enable false ";
  const std::string one = train("one", 1, none + "--training.batch_size 8");
  const std::string mpirun =
      WEFT_MPIRUN " --oversubscribe --allow-run-as-root -np 2 -x WEFT_BACKEND=mpi";
  expect_close(train("mpi-ddp-2", 2, none + "--training.batch_size 4", mpirun), one, kTolerance,
               "mpi ddp-2");
  expect_close(
      train("mpi-fsdp-2", 2,
            none + "--training.batch_size 4 --parallelism.data_parallel_shard_degree 2", mpirun),
      one, kTolerance, "mpi fsdp-2");
#endif
}

TEST_F(DataParallelRunTest, TensorParallelLayoutsMatchOneProcess) {
  expect_layouts_match({
      {"tp-2", 2, "--training.batch_size 8 --parallelism.tensor_parallel_degree 2"},
      {"tp-4", 4, "--training.batch_size 8 --parallelism.tensor_parallel_degree 4"},
  });
}

// Context parallelism: each rank its two chunks of every sequence, alone and with FSDP (which
// then shards over dp_shard x cp); weft-generate reads the final checkpoint of CP 2 x FSDP 2.
TEST_F(DataParallelRunTest, ContextParallelLayoutsMatchOneProcess) {
  expect_layouts_match({
      {"cp-2", 2, "--training.batch_size 8 --parallelism.context_parallel_degree 2"},
      {"cp-4", 4, "--training.batch_size 8 --parallelism.context_parallel_degree 4"},
      {"cp-2xfsdp-2", 4,
       "--training.batch_size 4 --parallelism.context_parallel_degree 2"
       " --parallelism.data_parallel_shard_degree 2",
       true},
  });
  expect_generates(dir_ / "cp-2xfsdp-2" / kLast);
}

// HSDP also writes its (final) checkpoint: the replicas share the writing of the shards.
TEST_F(DataParallelRunTest, TwoDimensionalLayoutsMatchOneProcess) {
  expect_layouts_match({
      {"hsdp-2x2", 4,
       "--training.batch_size 2 --parallelism.data_parallel_shard_degree 2"
       " --parallelism.data_parallel_replicate_degree 2",
       true},
      {"fsdp-2xtp-2", 4,
       "--training.batch_size 4 --parallelism.data_parallel_shard_degree 2"
       " --parallelism.tensor_parallel_degree 2"},
      {"ddp-2xtp-2", 4, "--training.batch_size 4 --parallelism.tensor_parallel_degree 2"},
  });
  EXPECT_TRUE(fs::exists(dir_ / "hsdp-2x2" / kLast / "manifest.json"));
}

// FSDP checkpoints (each rank its shards, saved in the background) reshard on load: a
// full_shard run resumed at step 6 equals its uninterrupted run exactly, and a DDP run and a
// tensor-parallel run resume the same checkpoint to within rounding.
TEST_F(DataParallelRunTest, ShardedRunsResumeExactly) {
  const std::string fsdp =
      "--training.batch_size 4 --parallelism.data_parallel_shard_degree 2 "
      "--checkpoint.interval 6 --checkpoint.keep_latest 0 --checkpoint.async_mode async ";
  const std::string whole = train("whole", 2, fsdp);
  const auto a = read(whole, "loss");
  ASSERT_EQ(a.size(), kSteps);
  ASSERT_TRUE(fs::exists(dir_ / "whole" / kMiddle / "manifest.json"));
  expect_resumes_bitwise("whole", 2, fsdp, a, {"ddp", "tp"});
  const std::string ddp = train("ddp", 2, "--training.batch_size 4 --checkpoint.resume true");
  const auto c = read(ddp, "loss");
  expect_continues(c, a);
  // Into tensor parallelism: each rank takes its slices of the whole state.
  const auto d = read(train("tp", 2,
                            "--training.batch_size 8 --parallelism.tensor_parallel_degree 2 "
                            "--checkpoint.resume true"),
                      "loss");
  expect_continues(d, a);
}

// A tensor-parallel run's checkpoints (each rank its slices) reshard: resumed under TP 2 it
// continues bit for bit, resumed under FSDP 2 to within rounding, and weft-generate reads them.
TEST_F(DataParallelRunTest, TensorParallelCheckpointsLoadAnywhere) {
  const std::string tp =
      "--training.batch_size 8 --parallelism.tensor_parallel_degree 2 "
      "--checkpoint.interval 6 --checkpoint.keep_latest 0 ";
  const auto a = read(train("tp", 2, tp), "loss");
  ASSERT_EQ(a.size(), kSteps);
  const fs::path last = dir_ / "tp" / kLast;
  ASSERT_TRUE(fs::exists(last / "manifest.json"));
  expect_generates(last);
  expect_resumes_bitwise("tp", 2, tp, a, {"fsdp"});
  const auto c = read(train("fsdp", 2,
                            "--training.batch_size 4 --parallelism.data_parallel_shard_degree 2 "
                            "--checkpoint.resume true"),
                      "loss");
  expect_continues(c, a);
}

// Pipeline stages on 2 ranks (1F1B, interleaved, ZB-V; and x TP 2 or x FSDP 2 on 4) against
// one process; a 1F1B run's checkpoints (each stage its layers) reshard: resumed under the pipeline
// it continues bit for bit, resumed by one process to within rounding, and weft-generate reads
// them.
TEST_F(DataParallelRunTest, PipelineRunsMatchOneProcessAndCheckpointsLoadAnywhere) {
  const std::string one = train("one", 1, "--checkpoint.enable false --training.batch_size 8");
  const std::string pp =
      "--training.batch_size 8 --parallelism.pipeline_parallel_degree 2 "
      "--parallelism.pipeline_parallel_microbatch_size 2 ";
  expect_close(train("pp-2-interleaved", 2,
                     "--checkpoint.enable false " + pp +
                         "--parallelism.pipeline_parallel_schedule Interleaved1F1B"),
               one, kTolerance, "pp-2 Interleaved1F1B");
  const std::string pp_tp = train(
      "pp-2xtp-2", 4, "--checkpoint.enable false " + pp + "--parallelism.tensor_parallel_degree 2");
  expect_close(pp_tp, one, kTolerance, "pp-2 x tp-2 1F1B");
  // The last step's timeline as it ran, for weft-report: both stages' rows, every action.
  std::ifstream metrics(pp_tp);
  std::string svg;
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("pipeline_timeline_svg")) svg = j["pipeline_timeline_svg"];
  }
  EXPECT_THAT(svg, testing::HasSubstr("measured: 1F1B, 2 ranks, 4 micro-batches"));
  EXPECT_THAT(svg, testing::HasSubstr(">rank 1<"));
  // Every rank's idle share, with its stage rank: ranks 0 and 1 hold stage 0 (tp 2).
  std::ifstream log(dir_ / "pp-2xtp-2.log");
  const std::string printed{std::istreambuf_iterator<char>(log), {}};
  for (const char* rank : {"rank 0 (pp rank 0): idle", "rank 1 (pp rank 0): idle",
                           "rank 2 (pp rank 1): idle", "rank 3 (pp rank 1): idle"})
    EXPECT_THAT(printed, testing::HasSubstr(rank));
  expect_close(train("pp-2xfsdp-2", 4,
                     "--checkpoint.enable false --training.batch_size 4 "
                     "--parallelism.pipeline_parallel_degree 2 "
                     "--parallelism.pipeline_parallel_microbatch_size 2 "
                     "--parallelism.data_parallel_shard_degree 2"),
               one, kTolerance, "pp-2 x fsdp-2 1F1B");
  expect_close(train("pp-2-zbv", 2,
                     "--checkpoint.enable false " + pp +
                         "--parallelism.pipeline_parallel_schedule ZBVZeroBubble"),
               one, kTolerance, "pp-2 ZBVZeroBubble");
  const std::string checkpointed = pp + "--checkpoint.interval 6 --checkpoint.keep_latest 0 ";
  const std::string whole = train("pp", 2, checkpointed);
  expect_close(whole, one, kTolerance, "pp-2 1F1B");
  const auto a = read(whole, "loss");
  ASSERT_EQ(a.size(), kSteps);
  const fs::path last = dir_ / "pp" / kLast;
  ASSERT_TRUE(fs::exists(last / "manifest.json"));
  expect_generates(last);
  expect_resumes_bitwise("pp", 2, checkpointed, a, {"single"});
  const auto c =
      read(train("single", 1, "--training.batch_size 8 --checkpoint.resume true"), "loss");
  expect_continues(c, a);
}

}  // namespace

// Layout-invariant training (deterministic = "layout") reshards bitwise: a checkpoint saved at
// step 6 under any of seven layouts (one process, DDP 2, tensor parallelism 2, FSDP 2
// full_shard, FSDP 2 zero1 with 2 micro-batches, 1F1B on 2 stages, context parallelism 2 with
// 2 micro-batches), resumed under any other, continues to the losses and gradient norms of the
// uninterrupted one-process run, bit for bit. Every run cuts its weights into 4 feature blocks
// and its sequences into 4 blocks of positions, on 2 layers (the 50 runs take a minute).
TEST_F(DataParallelRunTest, LayoutInvariantCheckpointsReshardBitwise) {
  struct Saved {
    std::string name;
    int ranks;
    std::string args;
  };
  const std::vector<Saved> layouts = {
      {"one", 1, "--training.batch_size 8"},
      {"ddp2", 2, "--training.batch_size 4"},
      {"tp2", 2, "--training.batch_size 8 --parallelism.tensor_parallel_degree 2"},
      {"fsdp2", 2, "--training.batch_size 4 --parallelism.data_parallel_shard_degree 2"},
      {"zero1", 2,
       "--training.batch_size 2 --training.gradient_accumulation_steps 2 "
       "--parallelism.data_parallel_shard_degree 2 --parallelism.fsdp_mode zero1"},
      {"pp2", 2,
       "--training.batch_size 8 --parallelism.pipeline_parallel_degree 2 "
       "--parallelism.pipeline_parallel_microbatch_size 2"},
      {"cp2", 2,
       "--training.batch_size 4 --training.gradient_accumulation_steps 2 "
       "--parallelism.context_parallel_degree 2"},
  };
  const std::string mode =
      "--training.deterministic layout --training.deterministic_blocks 4 "
      "--training.deterministic_sequence_blocks 4 --checkpoint.interval 6 --model.n_layers 2 ";
  const std::string whole = train("whole", 1, mode + "--training.batch_size 8");
  const auto losses = read(whole, "loss"), norms = read(whole, "grad_norm");
  ASSERT_EQ(losses.size(), kSteps);
  for (const Saved& a : layouts) {
    train(a.name, a.ranks, mode + a.args + " --training.steps " + std::to_string(kHalf));
    ASSERT_TRUE(fs::exists(dir_ / a.name / kMiddle / "manifest.json")) << a.name;
  }
  for (const Saved& a : layouts) {
    for (const Saved& b : layouts) {
      if (&a == &b) continue;
      const std::string name = a.name + "-to-" + b.name;
      fs::copy(dir_ / a.name, dir_ / name, fs::copy_options::recursive);
      const std::string run = train(name, b.ranks, mode + b.args + " --checkpoint.resume true");
      const auto l = read(run, "loss"), n = read(run, "grad_norm");
      ASSERT_EQ(l.size(), kSteps - kHalf) << name;
      for (std::size_t i = 0; i < l.size(); ++i) {
        EXPECT_EQ(l[i], losses[kHalf + i]) << name << " step " << kHalf + i + 1;
        EXPECT_EQ(n[i], norms[kHalf + i]) << name << " step " << kHalf + i + 1;
      }
    }
  }
}

// bf16 mixed precision, products and gradient sums (mixed_precision_reduce = "bfloat16":
// bfloat16 nodes in the canonical trees), layout-invariant too: one process, DDP 2 and FSDP 2
// under weftrun on shm train the same losses and gradient norms, bit for bit.
TEST_F(DataParallelRunTest, LayoutInvariantBFloat16TrainingIsBitwiseOnAnyLayout) {
  const std::string mode =
      "--training.deterministic layout --training.mixed_precision_param bfloat16 "
      "--training.mixed_precision_reduce bfloat16 --model.n_layers 2 --checkpoint.enable false ";
  const std::string one = train("one", 1, mode + "--training.batch_size 8");
  const auto losses = read(one, "loss"), norms = read(one, "grad_norm");
  ASSERT_EQ(losses.size(), kSteps);
  for (const auto& [name, args] : std::vector<std::pair<std::string, std::string>>{
           {"ddp2", "--training.batch_size 4"},
           {"fsdp2", "--training.batch_size 4 --parallelism.data_parallel_shard_degree 2"}}) {
    const std::string run = train(name, 2, mode + args);
    EXPECT_EQ(read(run, "loss"), losses) << name;
    EXPECT_EQ(read(run, "grad_norm"), norms) << name;
  }
}
