// weft-tokenizer and weft-data as docs/DATA.md shows them: train a SentencePiece model on a
// corpus, look at it, encode and decode a file back to the same bytes, tokenize JSONL into
// shards and inspect them; and the tools' errors and exit codes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace weft {
namespace {

using testing::HasSubstr;

test::Finished tool(const char* path, const std::vector<std::string>& args) {
  std::vector<std::string> argv{path};
  argv.insert(argv.end(), args.begin(), args.end());
  return test::run(argv, {}, Seconds(60));
}
test::Finished tokenizer(const std::vector<std::string>& args) {
  return tool(WEFT_TOKENIZER_TOOL, args);
}
test::Finished data(const std::vector<std::string>& args) { return tool(WEFT_DATA_TOOL, args); }

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return std::move(s).str();
}

TEST(WeftTokenizerTest, TrainInfoEncodeDecode) {
  test::TempDir dir;
  const std::string corpus = WEFT_SOURCE_DIR "/data/tinyshakespeare.txt";
  auto trained = tokenizer({"train", "--input", corpus, "--vocab-size", "1000", "--model-type",
                            "bpe", "--output", dir.file("shakespeare")});
  ASSERT_EQ(trained.code, 0) << trained.err;
  EXPECT_THAT(trained.out, HasSubstr("shakespeare.model"));
  auto info = tokenizer({"info", "--tokenizer", dir.file("shakespeare.model")});
  ASSERT_EQ(info.code, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr("vocabulary 1000, bos 1, eos 2"));

  auto encoded = tokenizer({"encode", "--tokenizer", dir.file("shakespeare.model"), "--input",
                            corpus, "--output", dir.file("ids.txt"), "--stats"});
  ASSERT_EQ(encoded.code, 0) << encoded.err;
  EXPECT_THAT(encoded.err, HasSubstr("MB/s"));
  auto decoded = tokenizer({"decode", "--tokenizer", dir.file("shakespeare.model"), "--input",
                            dir.file("ids.txt"), "--output", dir.file("back.txt")});
  ASSERT_EQ(decoded.code, 0) << decoded.err;
  EXPECT_EQ(read(dir.file("back.txt")), read(corpus));
  EXPECT_LT(read(dir.file("ids.txt")).size(), read(corpus).size() * 2);
}

TEST(WeftTokenizerTest, ErrorsSayWhatIsWrong) {
  test::TempDir dir;
  auto missing = tokenizer({"info", "--tokenizer", dir.file("nope.json")});
  EXPECT_EQ(missing.code, 2);
  EXPECT_THAT(missing.err, HasSubstr("does not exist"));
  std::ofstream(dir.file("ids.txt")) << "104 105 300\n";
  auto beyond = tokenizer({"decode", "--input", dir.file("ids.txt")});  // bytes: 0-255
  EXPECT_EQ(beyond.code, 2);
  EXPECT_THAT(beyond.err, HasSubstr("300"));
  std::ofstream(dir.file("words.txt")) << "104 hi\n";
  auto word = tokenizer({"decode", "--input", dir.file("words.txt")});
  EXPECT_EQ(word.code, 2);
  EXPECT_THAT(word.err, HasSubstr("\"hi\" is not a token id"));
  EXPECT_EQ(tokenizer({"train", "--input", "x"}).code, 2);  // --output is required
}

TEST(WeftDataTest, TokenizeAndInspect) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("corpus"));
  {
    std::ofstream a(dir.file("corpus/part-0.jsonl"));
    for (int i = 0; i < 50; ++i) a << "{\"text\": \"ROMEO: line " << i << "\"}\n";
  }
  auto made = data({"tokenize", "--input", dir.file("corpus"), "--output", dir.file("shards"),
                    "--validation-fraction", "0.1", "--workers", "2"});
  ASSERT_EQ(made.code, 0) << made.err;
  EXPECT_THAT(made.out, HasSubstr("50 documents"));
  auto shown = data({"inspect", dir.file("shards")});
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("validation: 1 file"));
  EXPECT_THAT(shown.out, HasSubstr("begins: ROMEO: line 0ROMEO: line"));  // bytes: no EOS

  std::ofstream(dir.file("corpus/part-1.jsonl")) << "{\"text\": \"ok\"}\n{\"txt\": \"no\"}\n";
  auto bad = data({"tokenize", "--input", dir.file("corpus"), "--output", dir.file("bad")});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("part-1.jsonl, line 2: no \"text\" string field"));
  auto zero = data({"tokenize", "--input", "/dev/zero", "--output", dir.file("zero")});
  EXPECT_EQ(zero.code, 2);
  EXPECT_THAT(zero.err, HasSubstr("not a regular file"));
}

// configs/shakespeare_bpe.toml as its comment says to run it: the tokenizer trained on the
// corpus, then the model (two steps here), its vocabulary the tokenizer's.
TEST(WeftDataTest, SmallRealConfigurationRunsAsDocumented) {
  test::TempDir dir;
  const std::string corpus = WEFT_SOURCE_DIR "/data/tinyshakespeare.txt";
  auto trained = tokenizer({"train", "--input", corpus, "--vocab-size", "8000", "--model-type",
                            "bpe", "--output", dir.file("shakespeare_bpe8k")});
  ASSERT_EQ(trained.code, 0) << trained.err;
  auto run = tool(WEFT_TRAIN_TOOL,
                  {"--config", WEFT_SOURCE_DIR "/configs/shakespeare_bpe.toml", "--tokenizer.path",
                   dir.file("shakespeare_bpe8k.model"), "--training.dataset_path", corpus,
                   "--training.steps", "2", "--validation.freq", "2", "--checkpoint.folder",
                   dir.file("ckpt"), "--metrics.peak_gflops", "100"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("model: 31.79M parameters"));  // with 8,000 tokens
  EXPECT_THAT(run.out, HasSubstr("step: 2  validation loss: "));
  auto sample = tool(WEFT_GENERATE_TOOL, {"--checkpoint", dir.file("ckpt"), "--prompt",
                                          "ROMEO:", "--max-new-tokens", "5"});
  ASSERT_EQ(sample.code, 0) << sample.err;
  EXPECT_THAT(sample.out, testing::StartsWith("ROMEO:"));
}

}  // namespace
}  // namespace weft
