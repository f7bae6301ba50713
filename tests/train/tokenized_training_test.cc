// weft-train on real tokenizers and token shards: a SentencePiece tokenizer sets the
// vocabulary, validation reports bits per byte, generation goes through the tokenizer; a run
// on shards resumes bitwise; and every mismatch between data, tokenizer and model is refused
// before training, naming what to change.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numbers>
#include <sstream>

#include "tests/support/temp_dir.h"
#include "weft/data/sentencepiece_tokenizer.h"
#include "weft/data/token_shards.h"
#include "weft/data/tokenize_corpus.h"
#include "weft/train/checkpointing.h"
#include "weft/train/generate.h"
#include "weft/train/trainer.h"

namespace weft::train {
namespace {

using testing::HasSubstr;
namespace fs = std::filesystem;

const std::string kData = WEFT_SOURCE_DIR "/data/tinyshakespeare.txt";

class TokenizedTrainingTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("weft-tokenized");
    data::train_sentencepiece(
        {.input = kData, .model_prefix = dir_->file("shk"), .vocab_size = 500, .threads = 1});
    std::ofstream(dir_->file("docs.jsonl")) << "{\"text\": \"First Citizen: speak.\"}\n";
    data::tokenize_corpus({.inputs = {kData},
                           .tokenizer = "bytes",
                           .output = dir_->file("bytes_shards"),
                           .shard_tokens = 300'000,
                           .validation_fraction = 0.0});
  }
  static void TearDownTestSuite() { delete dir_; }

  std::vector<std::pair<std::string, std::string>> small(std::int64_t steps) {
    return {{"model.dim", "32"},
            {"model.n_layers", "2"},
            {"model.n_heads", "2"},
            {"model.max_seq_len", "32"},
            {"training.seq_len", "32"},
            {"training.batch_size", "4"},
            {"training.steps", std::to_string(steps)},
            {"training.dataset_path", kData},
            {"metrics.peak_gflops", "100"},
            {"validation.freq", "4"},
            {"validation.steps", "2"},
            {"checkpoint.folder", tmp_.file("ckpt")}};
  }
  std::string error_of(std::vector<std::pair<std::string, std::string>> more) {
    auto o = small(2);
    o.insert(o.end(), more.begin(), more.end());
    std::ostringstream log;
    try {
      Trainer(load_config("", o), log);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no error";
  }

  static test::TempDir* dir_;
  test::TempDir tmp_{"weft-tokenized-run"};
};
test::TempDir* TokenizedTrainingTest::dir_ = nullptr;

TEST_F(TokenizedTrainingTest, SentencePieceSetsTheVocabularyAndBitsPerByte) {
  auto o = small(4);
  o.insert(o.end(), {{"tokenizer.path", dir_->file("shk.model")},
                     {"model.vocab_size", "0"},
                     {"checkpoint.enable", "true"}});
  std::ostringstream log;
  Trainer t(load_config("", o), log);
  EXPECT_EQ(t.model().config().vocab_size, 500);
  t.run();
  EXPECT_THAT(log.str(), HasSubstr("step: 4  validation loss: "));
  EXPECT_THAT(log.str(), HasSubstr("bpb: "));
  // bits per byte = loss / ln 2 / bytes per token, of the validation split (the file's last
  // tenth, tokenized on its own).
  const std::string line = log.str().substr(log.str().find("validation loss: "));
  const double loss = std::stod(line.substr(17));
  const double bpb = std::stod(line.substr(line.find("bpb: ") + 5));
  std::ifstream in(kData, std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto cut = static_cast<std::size_t>(static_cast<double>(all.size()) * 0.9);
  const auto ids = data::load_tokenizer(dir_->file("shk.model"))->encode(all.substr(cut));
  const double bytes_per_token =
      static_cast<double>(all.size() - cut) / static_cast<double>(ids.size());
  EXPECT_GT(bytes_per_token, 1.5);
  EXPECT_NEAR(bpb, loss / std::numbers::ln2 / bytes_per_token, 2e-4);
  // The checkpoint's configuration has the vocabulary and the tokenizer; generation decodes.
  const std::string ckpt = checkpoint_directory(tmp_.file("ckpt"));
  const Config saved = parse_config(read_manifest(ckpt).config, "manifest");
  EXPECT_EQ(saved.model.vocab_size, 500);
  EXPECT_EQ(saved.tokenizer.path, dir_->file("shk.model"));
  nn::Llama model(saved.model);
  load_model(ckpt, model);
  const auto tok = data::load_tokenizer(saved.tokenizer.path);
  const std::string text = generate(model, *tok, "ROMEO:", {.max_new_tokens = 10, .seed = 1});
  EXPECT_THAT(text, testing::StartsWith("ROMEO:"));
  EXPECT_GT(text.size(), 6u);
}

// Shards give the batches a text file gives (the byte tokenizer's ids are the bytes), so the
// losses are equal bitwise; a run stopped and resumed on shards continues exactly.
TEST_F(TokenizedTrainingTest, ShardsTrainLikeTheTextAndResumeBitwise) {
  auto text = small(4), shards = small(4);
  for (auto* o : {&text, &shards}) o->emplace_back("validation.enable", "false");
  text.emplace_back("training.validation_fraction", "0");
  shards.emplace_back("training.dataset_path", dir_->file("bytes_shards"));
  std::ostringstream log;
  Trainer a(load_config("", text), log), b(load_config("", shards), log);
  a.run();
  b.run();
  EXPECT_EQ(a.losses(), b.losses());

  shards.emplace_back("checkpoint.enable", "true");
  shards.emplace_back("checkpoint.interval", "2");
  Trainer(load_config("", shards), log).run_until(2);
  shards.emplace_back("checkpoint.resume", "true");
  Trainer resumed(load_config("", shards), log);
  resumed.run();
  ASSERT_EQ(resumed.losses().size(), 2u);
  EXPECT_EQ(resumed.losses()[0], b.losses()[2]);
  EXPECT_EQ(resumed.losses()[1], b.losses()[3]);
}

// nanoGPT's train.bin and val.bin (raw uint16, no header, no dataset.json) train like the text
// they hold; their bytes of text are unknown, so validation prints no bits per byte.
TEST_F(TokenizedTrainingTest, NanoGptTokenFilesTrainLikeTheText) {
  std::ifstream in(kData, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto cut = static_cast<std::size_t>(static_cast<double>(text.size()) * 0.9);
  fs::create_directories(tmp_.file("nanogpt"));
  auto write_u16 = [&](const std::string& name, std::string_view bytes) {
    std::string raw;
    for (char c : bytes) raw += {c, '\0'};
    std::ofstream(tmp_.file("nanogpt/" + name), std::ios::binary) << raw;
  };
  write_u16("train.bin", std::string_view(text).substr(0, cut));
  write_u16("val.bin", std::string_view(text).substr(cut));
  auto files = small(4), plain = small(4);
  files.emplace_back("training.dataset_path", tmp_.file("nanogpt"));
  std::ostringstream log_files, log_text;
  Trainer a(load_config("", files), log_files), b(load_config("", plain), log_text);
  a.run();
  b.run();
  EXPECT_EQ(a.losses(), b.losses());
  EXPECT_EQ(a.last_validation_loss(), b.last_validation_loss());
  EXPECT_THAT(log_files.str(), HasSubstr("step: 4  validation loss: "));
  EXPECT_THAT(log_files.str(), testing::Not(HasSubstr("bpb")));
}

TEST_F(TokenizedTrainingTest, MismatchesAreRefusedBeforeTraining) {
  EXPECT_THAT(error_of({{"tokenizer.path", dir_->file("shk.model")}}),
              HasSubstr("model.vocab_size = 256 is smaller than the tokenizer's vocabulary"));
  EXPECT_THAT(error_of({{"tokenizer.path", dir_->file("missing.model")}}),
              HasSubstr("tokenizer.path = '" + dir_->file("missing.model") + "'"));
  EXPECT_THAT(error_of({{"tokenizer.path", dir_->file("shk.model")},
                        {"model.vocab_size", "0"},
                        {"training.dataset_path", dir_->file("bytes_shards")}}),
              HasSubstr("not the run's tokenizer"));
  EXPECT_THAT(error_of({{"training.dataset_path", dir_->file("bytes_shards")}}),
              HasSubstr("0 validation tokens"));
  EXPECT_THAT(error_of({{"training.dataset_path", "/dev/zero"}}),
              HasSubstr("not a regular file or a folder"));
  EXPECT_THAT(error_of({{"training.dataset_path", dir_->path().string()}}),
              HasSubstr("neither dataset.json nor token files named *train*.bin"));
  // A shard holding an id beyond the vocabulary: named with its file and offset.
  fs::copy(dir_->file("bytes_shards"), tmp_.file("bad"));
  {
    data::ShardWriter w(tmp_.file("bad/train_000000.bin"), data::TokenDtype::kUint16);
    std::vector<std::int32_t> ids(100'000, 300);
    w.append(ids.data(), ids.size());
    w.close();
  }
  auto o = small(1);
  o.insert(o.end(), {{"training.dataset_path", tmp_.file("bad")}, {"validation.enable", "false"}});
  std::ostringstream log;
  try {
    Trainer(load_config("", o), log).run();
    ADD_FAILURE() << "trained on ids beyond the vocabulary";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("train_000000.bin, token "));
    EXPECT_THAT(e.what(), HasSubstr("beyond the vocabulary"));
  }
}

}  // namespace
}  // namespace weft::train
