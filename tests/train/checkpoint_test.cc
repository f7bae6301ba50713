// weft-train's checkpoints as a user meets them: resumed under a different model, damaged,
// written into a folder that cannot take them, saved in the background, and failing on a
// full disk. Resharding across layouts: data_parallel_run_test and parallel tests.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "tests/support/temp_dir.h"
#include "weft/checkpoint/checksum.h"
#include "weft/checkpoint/file_io.h"
#include "weft/train/checkpointing.h"
#include "weft/train/trainer.h"

namespace weft::train {
namespace {

using checkpoint::CheckpointError;
using checkpoint::IncompatibleCheckpoint;
using testing::HasSubstr;
namespace fs = std::filesystem;

const std::string kData = WEFT_SOURCE_DIR "/data/tinyshakespeare.txt";

class CheckpointTest : public testing::Test {
 protected:
  ~CheckpointTest() override { checkpoint::set_file_system_hook(nullptr); }

  // A small model, a checkpoint every 2 steps.
  Config config(std::int64_t steps,
                std::vector<std::pair<std::string, std::string>> overrides = {}) {
    std::vector<std::pair<std::string, std::string>> all = {
        {"model.dim", "32"},
        {"model.n_layers", "2"},
        {"model.n_heads", "2"},
        {"model.max_seq_len", "32"},
        {"training.seq_len", "32"},
        {"training.batch_size", "4"},
        {"training.steps", std::to_string(steps)},
        {"training.dataset_path", kData},
        {"metrics.log_freq", "1"},
        {"metrics.peak_gflops", "100"},
        {"validation.enable", "false"},
        {"checkpoint.enable", "true"},
        {"checkpoint.interval", "2"},
        {"checkpoint.folder", folder()}};
    all.insert(all.end(), overrides.begin(), overrides.end());
    return load_config("", all);
  }
  std::string folder() const { return (tmp_.path() / "ckpt").string(); }
  std::string step_dir(int step) const {
    return (tmp_.path() / "ckpt" / step_directory_name(step)).string();
  }
  std::vector<double> train(const Config& c) {
    Trainer t(c, log_);
    t.run();
    return t.losses();
  }
  // The message of the CheckpointError that resuming with `c` throws.
  template <class E = CheckpointError>
  std::string resume_error(Config c) {
    c.checkpoint.resume = true;
    try {
      Trainer t(c, log_);
      t.run();
    } catch (const E& e) {
      return e.what();
    }
    return "no error";
  }
  static void flip_last_byte(const std::string& file) {
    std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(-1, std::ios::end);
    const char c = static_cast<char>(io.get());
    io.seekp(-1, std::ios::end);
    io.put(static_cast<char>(c ^ 1));
  }

  test::TempDir tmp_{"weft-ckpt"};
  std::ostringstream log_;
};

TEST_F(CheckpointTest, AnotherModelIsRefusedAndNothingIsDeleted) {
  train(config(4, {{"checkpoint.keep_latest", "1"}}));
  ASSERT_EQ(complete_checkpoints(folder()).size(), 1u);
  EXPECT_THAT(resume_error<IncompatibleCheckpoint>(config(8, {{"model.n_layers", "1"}})),
              HasSubstr("the checkpoint has model.layers.1."));
  EXPECT_THAT(resume_error<IncompatibleCheckpoint>(config(8, {{"model.tie_embeddings", "true"}})),
              HasSubstr("the checkpoint has model.output.weight, which the model lacks"));
  EXPECT_THAT(resume_error<IncompatibleCheckpoint>(config(8, {{"model.dim", "64"}})),
              HasSubstr("is [256, 32] in the checkpoint and [256, 64] in the model"));
  EXPECT_EQ(complete_checkpoints(folder()), std::vector<std::string>{step_dir(4)});
}

TEST_F(CheckpointTest, DamagedCheckpointFallsBackToTheOneBefore) {
  const std::vector<double> whole = train(config(6, {{"checkpoint.enable", "false"}}));
  Trainer(config(6), log_).run_until(4);  // the same schedule, interrupted
  flip_last_byte(step_dir(4) + "/rank-00000.safetensors");
  Config c = config(6);
  c.checkpoint.resume = true;
  Trainer resumed(c, log_);
  resumed.run();
  EXPECT_THAT(log_.str(), HasSubstr("rank-00000.safetensors is damaged"));
  EXPECT_THAT(log_.str(), HasSubstr("falling back to the one before it"));
  EXPECT_THAT(log_.str(), HasSubstr("resumed from " + step_dir(2) + " at step 2"));
  ASSERT_EQ(resumed.losses().size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(resumed.losses()[i], whole[i + 2]) << i;
}

// A run that fell back from a damaged newest checkpoint saves steps below it: pruning counts
// only the checkpoints that load, so keep_latest 1 keeps the run's last save (and the
// damaged one, untouched), and the next resume finds it.
TEST_F(CheckpointTest, PruningPassesByACheckpointThatCannotLoad) {
  train(config(6, {{"checkpoint.keep_latest", "3"}}));
  flip_last_byte(step_dir(6) + "/rank-00000.safetensors");
  Config c = config(5, {{"checkpoint.keep_latest", "1"}, {"checkpoint.resume", "true"}});
  Trainer(c, log_).run();
  EXPECT_THAT(log_.str(), HasSubstr("resumed from " + step_dir(4)));
  EXPECT_EQ(complete_checkpoints(folder()), (std::vector<std::string>{step_dir(5), step_dir(6)}));
  // The next run falls back to step 5 again; saved again, step 6 is good and counted.
  log_.str("");
  Trainer(config(6, {{"checkpoint.keep_latest", "1"}, {"checkpoint.resume", "true"}}), log_).run();
  EXPECT_THAT(log_.str(), HasSubstr("resumed from " + step_dir(5) + " at step 5"));
  EXPECT_EQ(complete_checkpoints(folder()), std::vector<std::string>{step_dir(6)});
  EXPECT_NO_THROW(read_manifest(step_dir(6)));
}

// A new run in a folder holding an earlier run's checkpoints says so, and its pruning passes
// over the earlier ones above the step it saved: it never deletes what it just saved.
TEST_F(CheckpointTest, ANewRunNeverPrunesWhatItJustSaved) {
  train(config(6, {{"checkpoint.keep_latest", "3"}}));  // an earlier run: steps 2, 4, 6
  log_.str("");
  train(config(2, {{"checkpoint.keep_latest", "1"}}));  // a new one: saves step 2 again
  EXPECT_THAT(log_.str(), HasSubstr("holds an earlier run's checkpoints (step-00000002, "
                                    "step-00000004, step-00000006): this run prunes none above "
                                    "the step it saves"));
  EXPECT_THAT(log_.str(), HasSubstr("saved checkpoint " + step_dir(2)));
  EXPECT_EQ(complete_checkpoints(folder()),
            (std::vector<std::string>{step_dir(2), step_dir(4), step_dir(6)}));
  train(config(6, {{"checkpoint.keep_latest", "1"}}));  // reaching them, it prunes as usual
  EXPECT_EQ(complete_checkpoints(folder()), std::vector<std::string>{step_dir(6)});
}

TEST_F(CheckpointTest, NoUsableCheckpointIsAnError) {
  train(config(4));
  flip_last_byte(step_dir(2) + "/rank-00000.safetensors");
  fs::rename(step_dir(4), step_dir(9));  // its manifest says step 4
  const std::string error = resume_error(config(8));
  EXPECT_THAT(error, HasSubstr("none of the 2 checkpoints"));
  EXPECT_THAT(error, HasSubstr("says step 4 in a directory of step 9"));
  EXPECT_THAT(error, HasSubstr("move them away"));
}

TEST_F(CheckpointTest, FolderProblemsAreFoundBeforeTraining) {
  std::ofstream(folder()) << "a file where the folder should be";
  EXPECT_THROW(Trainer(config(2), log_), CheckpointError);
  EXPECT_THAT(log_.str(), testing::Not(HasSubstr("step: 1")));
  fs::remove(folder());
  Trainer first(config(2), log_);
  try {
    Trainer second(config(2), log_);
    FAIL() << "two runs share a checkpoint folder";
  } catch (const CheckpointError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is in use by another run (pid "));
  }
}

TEST_F(CheckpointTest, LeftoversAreRemovedAndAMissingFolderIsSaid) {
  Config c = config(2, {{"checkpoint.enable", "false"}, {"checkpoint.resume", "true"}});
  Trainer(c, log_).run();
  EXPECT_THAT(log_.str(), HasSubstr("(the folder does not exist); starting from step 1"));
  fs::create_directories(step_dir(7));                               // a removal's remains
  fs::create_directories(folder() + "/.step-00000008.saving/rank");  // a crashed save's
  Trainer(config(2), log_).run();
  EXPECT_FALSE(fs::exists(step_dir(7)));
  EXPECT_FALSE(fs::exists(folder() + "/.step-00000008.saving"));
  EXPECT_EQ(complete_checkpoints(folder()), std::vector<std::string>{step_dir(2)});
}

// The background save writes what the synchronous one writes (the same chunks, bit for bit)
// and training does not change.
TEST_F(CheckpointTest, AsyncSaveEqualsSyncSave) {
  const std::vector<double> sync = train(config(6));
  const checkpoint::Manifest a = read_manifest(step_dir(6));
  fs::remove_all(folder());
  const std::vector<double> async = train(config(6, {{"checkpoint.async_mode", "async"}}));
  EXPECT_EQ(async, sync);
  const checkpoint::Manifest b = read_manifest(step_dir(6));
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, t] : a.tensors) {
    ASSERT_EQ(t.chunks.size(), 1u);
    EXPECT_EQ(t.chunks[0].checksum, b.tensors.at(name).chunks.at(0).checksum) << name;
  }
  EXPECT_THAT(log_.str(), HasSubstr("writing in the background"));
}

// A full disk, a read-only file system or a failed fsync while saving step 4: the error names
// the file and the cause, and step 2 stays the newest complete checkpoint, in both modes.
TEST_F(CheckpointTest, FailedSaveLeavesThePreviousCheckpoint) {
  struct Failure {
    const char* call;
    int error;
    const char* says;
  };
  for (const Failure& f : {Failure{"write", ENOSPC, "No space left on device"},
                           Failure{"create", EROFS, "Read-only file system"},
                           Failure{"fsync", EIO, "Input/output error"}}) {
    for (const char* mode : {"disabled", "async"}) {
      const std::string what = std::string(f.call) + " " + mode;
      fs::remove_all(folder());
      checkpoint::set_file_system_hook([f](const char* call, const std::string& path) {
        if (std::string(call) == f.call && path.find("00000004") != std::string::npos)
          throw SystemError(std::string(call) + " " + path, f.error);
      });
      try {
        train(config(8, {{"checkpoint.async_mode", mode}}));
        ADD_FAILURE() << what << ": no error";
      } catch (const CheckpointError& e) {
        EXPECT_THAT(e.what(), HasSubstr(".step-00000004.saving/rank-00000.safetensors")) << what;
        EXPECT_THAT(e.what(), HasSubstr(f.says)) << what;
        EXPECT_THAT(e.what(), HasSubstr("the previous checkpoints are intact")) << what;
      }
      checkpoint::set_file_system_hook(nullptr);
      EXPECT_EQ(complete_checkpoints(folder()), std::vector<std::string>{step_dir(2)}) << what;
      EXPECT_NO_THROW(read_manifest(step_dir(2))) << what;
    }
  }
}

// Writes NaN into the first element of `tensor` in the checkpoint in `dir` and makes its
// checksum agree: a run that saved NaN weights, which no checksum can catch.
void plant_nan(const std::string& dir, const std::string& tensor) {
  checkpoint::Manifest m = read_manifest(dir);
  checkpoint::ChunkEntry& c = m.tensors.at(tensor).chunks.at(0);
  const std::string file = dir + "/" + m.files.at(static_cast<std::size_t>(c.file)).name;
  std::string bytes(c.end - c.begin, '\0');
  {
    std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(static_cast<std::streamoff>(c.begin));
    io.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(bytes.data(), &nan, sizeof(nan));
    io.seekp(static_cast<std::streamoff>(c.begin));
    io.write(bytes.data(), sizeof(nan));
  }
  c.checksum = checkpoint::checksum(bytes.data(), bytes.size());
  fs::remove(dir + "/manifest.json");
  checkpoint::write_text_file(dir + "/manifest.json", checkpoint::to_json(m));
}

// A checkpoint holding a NaN (its checksums made to agree, as a diverged run's would) is
// refused at load like a damaged one: resume falls back to the one before and trains on.
TEST_F(CheckpointTest, NonFiniteCheckpointFallsBack) {
  train(config(4, {{"checkpoint.keep_latest", "2"}}));
  plant_nan(step_dir(4), "optim.exp_avg_sq.layers.0.attention.wo.weight");
  Config c = config(6, {{"checkpoint.keep_latest", "1"}, {"checkpoint.resume", "true"}});
  Trainer(c, log_).run();
  EXPECT_THAT(log_.str(), HasSubstr("optim.exp_avg_sq.layers.0.attention.wo.weight holds nan"));
  EXPECT_THAT(log_.str(), HasSubstr("the run that saved it had diverged"));
  EXPECT_THAT(log_.str(), HasSubstr("resumed from " + step_dir(2) + " at step 2"));
  EXPECT_EQ(complete_checkpoints(folder()), (std::vector<std::string>{step_dir(6)}));
}

// A state that turned non-finite while the loss stayed finite (here a NaN in a row of the
// token embedding that no batch reads) is not saved: training stops naming it, and the
// checkpoint before it is kept.
TEST_F(CheckpointTest, NonFiniteStateIsNotSaved) {
  Trainer t(config(6, {{"checkpoint.keep_latest", "1"}}), log_);
  t.run_until(2);
  t.model().parameters().at("tok_embeddings.weight").value.data<float>()[0] =
      std::numeric_limits<float>::quiet_NaN();  // token 0 (NUL) is not in the text
  try {
    t.run();
    ADD_FAILURE() << "saved a NaN";
  } catch (const NonFiniteError& e) {
    EXPECT_THAT(e.what(), HasSubstr("step 4: rank 0's model.tok_embeddings.weight holds nan"));
    EXPECT_THAT(e.what(), HasSubstr("step 4 was not saved"));
  }
  EXPECT_EQ(complete_checkpoints(folder()), std::vector<std::string>{step_dir(2)});
}

// NaN weights make a NaN loss: training stops naming it, before the optimizer step, and saves
// and prunes nothing; with on_nonfinite = "skip" it goes on.
TEST_F(CheckpointTest, NonFiniteLossStopsBeforeAnythingIsSaved) {
  auto poisoned = [&](const Config& c) {
    auto t = std::make_unique<Trainer>(c, log_);
    t->run_until(2);
    t->model().parameters().at("norm.weight").value.data<float>()[0] =
        std::numeric_limits<float>::quiet_NaN();
    return t;
  };
  try {
    poisoned(config(6, {{"checkpoint.keep_latest", "1"}}))->run();
    ADD_FAILURE() << "trained on NaN weights";
  } catch (const NonFiniteError& e) {
    EXPECT_THAT(e.what(), HasSubstr("step 3: loss nan"));
    EXPECT_THAT(e.what(), HasSubstr("saved nothing"));
  }
  EXPECT_EQ(complete_checkpoints(folder()), std::vector<std::string>{step_dir(2)});
  poisoned(config(4, {{"checkpoint.enable", "false"}, {"training.on_nonfinite", "skip"}}))->run();
  EXPECT_THAT(log_.str(), HasSubstr("step 4: loss nan, gradient norm nan: not finite; the "
                                    "optimizer step is skipped"));
}

}  // namespace
}  // namespace weft::train
