#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "weft/base/system.h"
#include "weft/train/checkpointing.h"
#include "weft/train/config.h"
#include "weft/train/data.h"
#include "weft/train/trainer.h"

namespace weft::train {
namespace {

using testing::HasSubstr;
using testing::Not;
namespace fs = std::filesystem;

const std::string kData = WEFT_SOURCE_DIR "/data/tinyshakespeare.txt";

class TrainTest : public testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p) << text;
    return p;
  }
  std::string config_error(const std::string& toml,
                           std::vector<std::pair<std::string, std::string>> overrides = {}) {
    try {
      load_config(write("c.toml", toml), overrides);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no error";
  }
  // A small model that trains in well under a second per step.
  std::vector<std::pair<std::string, std::string>> small(std::int64_t steps) {
    return {{"model.dim", "32"},
            {"model.n_layers", "2"},
            {"model.n_heads", "2"},
            {"model.max_seq_len", "32"},
            {"training.seq_len", "32"},
            {"training.batch_size", "4"},
            {"training.steps", std::to_string(steps)},
            {"training.dataset_path", kData},
            {"lr_scheduler.warmup_steps", "2"},
            {"metrics.log_freq", "1"},
            {"metrics.peak_gflops", "100"},
            {"validation.freq", "4"},
            {"validation.steps", "2"},
            {"checkpoint.folder", (dir_ / "ckpt").string()}};
  }

  const test::TempDir tmp_{"weft-train"};
  const fs::path& dir_ = tmp_.path();
};

// A model whose state is larger than the machine (about 825 GB here) is refused with the
// numbers before anything is initialised, where it used to grow until the kernel killed it.
// (Its tensors are mapped but never touched: they cost no memory.)
TEST_F(TrainTest, AModelTooBigForTheMachineIsRefusedBeforeItGrows) {
  if (available_memory_bytes() > (std::int64_t{512} << 30)) GTEST_SKIP() << "a host this large";
  auto overrides = small(1);
  overrides.insert(overrides.end(), {{"model.dim", "8192"}, {"model.n_layers", "64"}});
  std::ostringstream out;
  try {
    Trainer(load_config("", overrides), out);
    ADD_FAILURE() << "a model of 825 GB was built";
  } catch (const std::bad_alloc&) {
    GTEST_SKIP() << "strict overcommit (vm.overcommit_memory = 2): the tensors cannot be mapped";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the model does not fit: a rank holds"));
    EXPECT_THAT(e.what(), HasSubstr("B parameters in all"));
    EXPECT_THAT(e.what(), HasSubstr("model.dim, model.n_layers"));
  }
}

TEST_F(TrainTest, ConfigErrorsNameTheKeyAndWhatIsAllowed) {
  EXPECT_THAT(config_error("[training]\nstepz = 3\n"),
              HasSubstr("unknown key training.stepz; [training] has: batch_size, seq_len, steps"));
  EXPECT_THAT(config_error("[trainig]\nsteps = 3\n"), HasSubstr("unknown section [trainig]"));
  EXPECT_THAT(config_error("[training]\nsteps = \"many\"\n"),
              HasSubstr("training.steps must be an integer, got a string"));
  EXPECT_THAT(config_error("[training]\nsteps = 0\n"),
              HasSubstr("training.steps = 0 is out of range: it must be at least 1"));
  EXPECT_THAT(config_error("[optimizer]\nbeta1 = 1.5\n"),
              HasSubstr("optimizer.beta1 = 1.5 is out of range"));
  EXPECT_THAT(config_error("[lr_scheduler]\ndecay_type = \"exp\"\n"),
              HasSubstr("use one of: cosine, linear, constant"));
  EXPECT_THAT(config_error("[model]\ndim = 30\n"),
              HasSubstr("model: dim 30 is not divisible by n_heads 4"));
  EXPECT_THAT(config_error("[training]\nseq_len = 512\n"), HasSubstr("exceeds model.max_seq_len"));
  EXPECT_THAT(config_error("[parallelism]\ncontext_parallel_degree = 3\n"),
              HasSubstr("does not split into 2 x parallelism.context_parallel_degree = 6 equal"));
  EXPECT_EQ(load_config("", {{"training.seq_len", "31"}}).training.seq_len, 31);  // no CP: any
  EXPECT_THAT(config_error("[training]\ndeterministic_sequence_blocks = 3\nseq_len = 128\n"),
              HasSubstr("deterministic_sequence_blocks = 3 does not divide training.seq_len"));
  auto on_dev_zero = small(1);
  on_dev_zero.push_back({"training.dataset_path", "/dev/zero"});
  std::ostringstream out;
  EXPECT_THAT([&] { Trainer(load_config("", on_dev_zero), out); },
              testing::ThrowsMessage<ConfigError>(HasSubstr("is not a regular file")));
  EXPECT_THAT(config_error("[training\n"), HasSubstr("line 1"));
  EXPECT_THAT(config_error("[training]\nvalidation_fraction = 0.0\n"),
              HasSubstr("validation.enable = true needs a validation split"));
  EXPECT_THAT(config_error("", {{"training.steps", "ten"}}),
              HasSubstr("--training.steps: training.steps must be an integer, got 'ten'"));
  EXPECT_THAT(config_error("", {{"steps", "10"}}), HasSubstr("overrides are --section.key value"));
  EXPECT_EQ(load_config("", {{"training.steps", "7"}, {"optimizer.lr", "1e-3"}}).lr_scheduler.lr,
            1e-3);
}

TEST_F(TrainTest, ParallelismMustFitTheWorld) {
  std::ostringstream log;
  auto o = small(2);
  o.emplace_back("parallelism.data_parallel_replicate_degree", "2");
  try {
    Trainer t(load_config("", o), log);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("must equal the world size 1"));
  }
  o = small(2);
  o.emplace_back("parallelism.tensor_parallel_degree", "2");
  o.emplace_back("parallelism.data_parallel_shard_degree", "3");
  try {
    Trainer t(load_config("", o), log);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("data_parallel_replicate_degree 1 x data_parallel_shard_degree 3 x "
                          "context_parallel_degree 1 x tensor_parallel_degree 2 = 6 must equal "
                          "the world size 1"));
  }
  EXPECT_THAT(config_error("[parallelism]\nfsdp_mode = \"zero4\"\n"),
              HasSubstr("full_shard, zero1, zero2"));
  // The debug model: 4 heads (and key/value heads), feed-forward 704, vocabulary 256.
  EXPECT_THAT(config_error("[parallelism]\ntensor_parallel_degree = 3\n"),
              HasSubstr("parallelism.tensor_parallel_degree 3 does not divide n_heads 4, "
                        "n_kv_heads 4, the feed-forward width 704, vocab_size 256"));
  EXPECT_THAT(config_error("[parallelism]\ntensor_parallel_degree = 8\n"),
              HasSubstr("does not divide n_heads 4, n_kv_heads 4; every rank"));
}

// Every [parallelism] option reaches parallelize: the variants whose losses equal the defaults'
// (zero2, TP without sequence or loss parallelism, CP's all-gather exchange) are checked here,
// where a dropped option shows, rather than by training.
TEST_F(TrainTest, ParallelismOptionsReachParallelize) {
  const Config config =
      load_config("", {{"parallelism.data_parallel_shard_degree", "2"},
                       {"parallelism.tensor_parallel_degree", "2"},
                       {"parallelism.context_parallel_degree", "2"},
                       {"parallelism.fsdp_mode", "zero2"},
                       {"parallelism.enable_sequence_parallel", "false"},
                       {"parallelism.disable_loss_parallel", "true"},
                       {"parallelism.context_parallel_rotate_method", "allgather"},
                       {"parallelism.bucket_size_mb", "2"},
                       {"training.mixed_precision_reduce", "bfloat16"}});
  const parallel::ParallelOptions o = parallel_options(config, 16);
  EXPECT_EQ(o.dims.dp_shard, 2);
  EXPECT_EQ(o.dims.tp, 2);
  EXPECT_EQ(o.dims.cp, 2);
  EXPECT_EQ(o.dims.dp_replicate, 2);  // the rest of the 16 ranks
  EXPECT_EQ(o.fsdp_mode, parallel::ShardingMode::kZero2);
  EXPECT_FALSE(o.sequence_parallel);
  EXPECT_FALSE(o.loss_parallel);
  EXPECT_EQ(o.cp_exchange, nn::KeyValueExchange::kAllGather);
  EXPECT_EQ(o.bucket_bytes, std::size_t{2} << 20);
  EXPECT_EQ(o.reduce_dtype, DType::kBFloat16);
  const parallel::ParallelOptions defaults = parallel_options(load_config("", {}), 1);
  EXPECT_EQ(defaults.fsdp_mode, parallel::ShardingMode::kFullShard);
  EXPECT_TRUE(defaults.sequence_parallel);
  EXPECT_TRUE(defaults.loss_parallel);
  EXPECT_EQ(defaults.cp_exchange, nn::KeyValueExchange::kRing);
  EXPECT_EQ(defaults.reduce_dtype, DType::kFloat32);
}

TEST_F(TrainTest, ConfigRoundTripsThroughToml) {
  Config c = load_config("", {{"model.dim", "64"},
                              {"lr_scheduler.decay_type", "linear"},
                              {"training.dataset_path", "a \"quoted\" path"}});
  const Config back = parse_config(to_toml(c), "round trip");
  EXPECT_EQ(back.model.dim, 64);
  EXPECT_EQ(back.lr_scheduler.decay_type, "linear");
  EXPECT_EQ(back.training.dataset_path, "a \"quoted\" path");
  EXPECT_EQ(to_toml(back), to_toml(c));
}

TEST_F(TrainTest, TokenizerAndLoaderAreDeterministicAndResumable) {
  const data::ByteTokenizer bytes;
  const Dataset data(kData, bytes, 0.1, 16, 256);
  EXPECT_EQ(data.train().size() + data.validation().size(), fs::file_size(kData));
  DataLoader a(data.train(), 3, 16, 5, "train"), b(data.train(), 3, 16, 5, "train");
  const Batch first = a.next();
  EXPECT_EQ(first.tokens, b.next().tokens);
  for (std::size_t i = 0; i + 1 < 16; ++i) EXPECT_EQ(first.targets[i], first.tokens[i + 1]);
  const Batch second = a.next();
  DataLoader c(data.train(), 3, 16, 5, "train");
  c.set_samples_drawn(3);
  EXPECT_EQ(c.next().tokens, second.tokens);
  EXPECT_NE(second.tokens, first.tokens);
  // The cursor counts sequences over all ranks: two ranks' slices of a global batch of 6 are
  // what one loader drawing 3 and 3 gets, and a resumed loader continues from any cursor.
  DataLoader one(data.train(), 3, 16, 5, "train"), two(data.train(), 3, 16, 5, "train");
  const Batch rank0 = two.next(0, 2);
  two.set_samples_drawn(0);
  const Batch rank1 = two.next(1, 2);
  EXPECT_EQ(rank0.tokens, one.next().tokens);
  EXPECT_EQ(rank1.tokens, one.next().tokens);
  EXPECT_EQ(two.samples_drawn(), 6);
  EXPECT_THROW(Dataset((dir_ / "missing.txt").string(), bytes, 0.1, 16, 256), ConfigError);
}

// A run stopped after 4 steps and resumed from its checkpoint gives the losses of the run
// that was never stopped, bitwise.
TEST_F(TrainTest, ResumedRunEqualsUninterruptedRun) {
  std::ostringstream log;
  auto uninterrupted = small(8);
  uninterrupted.emplace_back("checkpoint.enable", "false");
  Trainer whole(load_config("", uninterrupted), log);
  whole.run();

  auto first = small(8);
  first.emplace_back("checkpoint.enable", "true");
  first.emplace_back("checkpoint.interval", "4");
  {
    Trainer part(load_config("", first), log);  // interrupted: it ends (and unlocks the folder)
    part.run_until(4);
  }
  ASSERT_FALSE(complete_checkpoints((dir_ / "ckpt").string()).empty());

  auto second = first;
  second.emplace_back("checkpoint.resume", "true");
  {
    Trainer resumed(load_config("", second), log);
    EXPECT_EQ(resumed.step(), 4);
    resumed.run();
    ASSERT_EQ(resumed.losses().size(), 4u);
    for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(resumed.losses()[i], whole.losses()[4 + i]) << i;
  }
  EXPECT_THAT(log.str(), HasSubstr("resumed from"));
  EXPECT_THAT(log.str(), Not(HasSubstr("nothing to train")));

  // Resumed again at step 8 = training.steps: it says so, and trains nothing.
  std::ostringstream again_log;
  Trainer again(load_config("", second), again_log);
  again.run();
  EXPECT_TRUE(again.losses().empty());
  EXPECT_THAT(again_log.str(),
              HasSubstr("nothing to train: the run is at step 8 and training.steps is 8 (raise "
                        "--training.steps to go on)"));
}

TEST_F(TrainTest, LogsStepsValidationAndJsonLines) {
  std::ostringstream log;
  auto o = small(4);
  o.emplace_back("metrics.jsonl_path", (dir_ / "m.jsonl").string());
  Trainer t(load_config("", o), log);
  t.run();
  EXPECT_THAT(log.str(), HasSubstr("step: 4  loss: "));
  EXPECT_THAT(log.str(), HasSubstr("tps: "));
  EXPECT_THAT(log.str(), HasSubstr("\nworld: 1 rank\n"));
  EXPECT_THAT(log.str(), testing::ContainsRegex("\ndone: steps 1-4 in 0:00:0[0-9], [0-9,]+ "
                                                "tokens/s; final loss [0-9.]+, best validation "
                                                "loss [0-9.]+ at step 4; peak memory [0-9]+ MiB "
                                                "a rank\n"));
  EXPECT_THAT(log.str(), HasSubstr("step: 4  validation loss: "));
  // The program's share is measured: what the process held at start-up plus what a run adds.
  std::smatch m;
  const std::string text = log.str();
  ASSERT_TRUE(
      std::regex_search(text, m, std::regex("program ([0-9.]+)\\); peak resident ([0-9.]+)")));
  EXPECT_GT(std::stod(m[1]), 10.5);
  EXPECT_LT(std::stod(m[1]), std::stod(m[2]));
  std::ifstream in(dir_ / "m.jsonl");
  std::string line;
  int steps = 0, validations = 0, summaries = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    steps += j.contains("loss");
    validations += j.contains("val_loss");
    if (j.contains("summary")) {
      ++summaries;
      EXPECT_EQ(j["summary"]["last_step"], 4);
      EXPECT_EQ(j["summary"]["best_val_step"], 4);
    }
  }
  EXPECT_EQ(steps, 4);
  EXPECT_EQ(validations, 1);
  EXPECT_EQ(summaries, 1);
}

// training.mixed_precision_param = "bfloat16": the start-up line names the bf16 products and
// their peak, and the run's validation loss follows float32's (the debug config's 300 steps are
// compared in docs/PERFORMANCE.md).
TEST_F(TrainTest, MixedPrecisionFollowsFloat32) {
  double loss[2];
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    std::ostringstream log;
    auto o = small(12);
    o.emplace_back("training.mixed_precision_param", bf16 == 1 ? "bfloat16" : "float32");
    o.emplace_back("metrics.peak_gflops", "0");
    o.emplace_back("validation.freq", "12");
    Trainer t(load_config("", o), log);
    t.run();
    EXPECT_THAT(log.str(), HasSubstr(bf16 == 1 ? "(bfloat16 products measured, oneDNN "
                                               : "(float32 products measured, oneDNN "));
    ASSERT_TRUE(t.last_validation_loss().has_value());
    loss[bf16] = *t.last_validation_loss();
  }
  EXPECT_NEAR(loss[1], loss[0], 0.01 * loss[0]);
  EXPECT_THAT(config_error("[training]\nmixed_precision_param = \"float16\"\n"),
              HasSubstr("use one of: float32, bfloat16"));
}

// Checkpoints hold the float32 master weights: a bf16 run resumes bit for bit in bf16, and in
// float32 to within bf16's rounding.
TEST_F(TrainTest, MixedPrecisionRunResumesInEitherDtype) {
  std::ostringstream log;
  auto bf16 = small(8);
  bf16.emplace_back("training.mixed_precision_param", "bfloat16");
  auto whole_run = bf16;
  whole_run.emplace_back("checkpoint.enable", "false");
  Trainer whole(load_config("", whole_run), log);
  whole.run();
  bf16.emplace_back("checkpoint.enable", "true");
  bf16.emplace_back("checkpoint.interval", "4");
  {
    Trainer part(load_config("", bf16), log);
    part.run_until(4);
  }
  for (const char* dtype : {"bfloat16", "float32"}) {
    auto resume = bf16;
    resume.emplace_back("checkpoint.resume", "true");
    resume.emplace_back("checkpoint.interval", "100");
    resume.emplace_back("training.mixed_precision_param", dtype);
    Trainer resumed(load_config("", resume), log);
    ASSERT_EQ(resumed.step(), 4);
    resumed.run();
    ASSERT_EQ(resumed.losses().size(), 4u);
    for (std::size_t i = 0; i < 4; ++i) {
      if (std::string(dtype) == "bfloat16") {
        EXPECT_EQ(resumed.losses()[i], whole.losses()[4 + i]) << i;
      } else {
        EXPECT_NEAR(resumed.losses()[i], whole.losses()[4 + i], 1e-2 * whole.losses()[4 + i]);
      }
    }
    fs::remove_all(dir_ / "ckpt" / "step-00000008");
  }
}

// A short run learns more than byte frequencies: a byte-unigram model's cross-entropy on this
// text is about 3.3 nats and the untrained model's 5.5; the stated threshold is 2.5.
TEST_F(TrainTest, ShortRunLearnsShakespeare) {
  std::ostringstream log;
  Trainer t(load_config("", {{"model.dim", "64"},
                             {"model.n_layers", "2"},
                             {"model.n_heads", "2"},
                             {"model.max_seq_len", "64"},
                             {"training.seq_len", "64"},
                             {"training.batch_size", "16"},
                             {"training.steps", "200"},
                             {"training.dataset_path", kData},
                             {"optimizer.lr", "3e-3"},
                             {"lr_scheduler.warmup_steps", "20"},
                             {"metrics.peak_gflops", "100"},
                             {"metrics.log_freq", "50"},
                             {"validation.freq", "200"}}),
            log);
  t.run();
  ASSERT_TRUE(t.last_validation_loss().has_value());
  EXPECT_LT(*t.last_validation_loss(), 2.5) << log.str();
}

// Two ranks held to one core (taskset): the start-up lines name the backend and say the ranks
// share the core, mfu is measured against that core (so at most 100%), and DDP's line comes
// once.
TEST_F(TrainTest, ToolSaysWhenRanksShareCoresAndMeasuresMfuAgainstThem) {
  std::string args = std::string("/usr/bin/taskset -c 0 ") + WEFT_RUN_TOOL +
                     " --nproc-per-node 2 " + WEFT_TRAIN_TOOL + " --checkpoint.enable false";
  for (const auto& [key, value] : small(3)) {
    if (key != "metrics.peak_gflops") args += " --" + key + " " + value;  // measured
  }
  const test::Finished f =
      test::run(test::words_of(args), {{"WEFT_BACKEND", "shm"}, {"WEFT_JOB_TOKEN", std::nullopt}},
                Seconds(120));
  ASSERT_EQ(f.code, 0) << f.err;
  EXPECT_THAT(f.out, HasSubstr("[0] world: 2 ranks, backend shm; 2 ranks x 1 thread share this "
                               "host's 1 core: mfu is against the cores, not ranks x peak\n"));
  const auto first = f.out.find("gradient buckets");
  ASSERT_NE(first, std::string::npos);
  EXPECT_EQ(f.out.find("gradient buckets", first + 1), std::string::npos) << f.out;
  for (std::size_t at = f.out.find("mfu: "); at != std::string::npos;
       at = f.out.find("mfu: ", at + 1)) {
    EXPECT_LE(std::stod(f.out.substr(at + 5)), 100.0) << f.out;
  }
}

// Under weftrun, rank 0 reports its progress to weftrun, which shows it as a bar when its
// stderr is a terminal (script(1) gives it one) and never relays the reports themselves; in
// a pipe nothing writes a control code.
TEST_F(TrainTest, WeftrunShowsRankZerosProgressOnATerminalOnly) {
  std::string job = std::string(WEFT_RUN_TOOL) + " --nproc-per-node 2 " + WEFT_TRAIN_TOOL +
                    " --checkpoint.enable false";
  for (const auto& [key, value] : small(40)) job += " --" + key + " " + value;
  const test::EnvChanges env{{"WEFT_BACKEND", "shm"}, {"WEFT_JOB_TOKEN", std::nullopt}};
  const test::Finished piped = test::run(test::words_of(job), env, Seconds(120));
  ASSERT_EQ(piped.code, 0) << piped.err;
  EXPECT_EQ((piped.out + piped.err).find_first_of("\x1e\x1b"), std::string::npos) << piped.out;
  EXPECT_THAT(piped.out, HasSubstr("[0] done: steps 1-40 in "));
  const test::Finished tty =
      test::run({"/usr/bin/script", "-qec", job, "/dev/null"}, env, Seconds(120));
  ASSERT_EQ(tty.code, 0) << tty.out;
  EXPECT_EQ(tty.out.find('\x1e'), std::string::npos);
  EXPECT_THAT(tty.out, testing::ContainsRegex("\r\x1b\\[K\\[[=> ]+\\] [0-9]+/40  ETA "
                                              "[0-9]:[0-9][0-9]:[0-9][0-9]  loss [0-9.]+"));
  EXPECT_THAT(tty.out, HasSubstr("[0] done: steps 1-40 in "));
}

// The tool: bad configurations exit 2 with the message and write nothing.
TEST_F(TrainTest, ToolRejectsBadConfigurationsBeforeWritingAnything) {
  const std::string folder = (dir_ / "never").string(), jsonl = (dir_ / "never.jsonl").string();
  const std::string base = std::string(WEFT_TRAIN_TOOL) +
                           " --checkpoint.enable true --checkpoint.folder " + folder +
                           " --metrics.jsonl_path " + jsonl + " ";
  auto run = [&](const std::string& args) {
    const test::Finished f = test::run(test::words_of(base + args));
    return std::pair{f.code, f.out + f.err};
  };
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"--training.bogus 1", "unknown key training.bogus"},
           {"--training.steps x", "must be an integer"},
           {"--optimizer.lr -1", "optimizer.lr = -1 is out of range"},
           {"--training.dataset_path /nonexistent/shakespeare.txt", "cannot be read"},
           {"--config /nonexistent.toml", "config /nonexistent.toml"}}) {
    const auto [code, output] = run(args);
    EXPECT_EQ(code, 2) << args << ": " << output;
    EXPECT_THAT(output, HasSubstr(message)) << args;
  }
  EXPECT_FALSE(fs::exists(folder));
  EXPECT_FALSE(fs::exists(jsonl));
}

}  // namespace
}  // namespace weft::train
