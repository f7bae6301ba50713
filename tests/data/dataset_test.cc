// Documents from text and JSONL files (plain, .gz, .zst), token shards written and read,
// and corpora tokenized by worker processes: the same shards for any number of workers,
// documents framed and split, and every bad input named with its file and line or offset.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "weft/data/documents.h"
#include "weft/data/sentencepiece_tokenizer.h"
#include "weft/data/token_shards.h"
#include "weft/data/tokenize_corpus.h"
#include "weft/data/tokenizer.h"

namespace weft::data {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return std::move(s).str();
}

std::string gzip(const std::string& bytes) {
  uLongf n = compressBound(static_cast<uLong>(bytes.size())) + 32;
  std::string out(n, '\0');
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);  // +16: gzip framing
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string zstd(const std::string& bytes) {
  std::string out(ZSTD_compressBound(bytes.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), bytes.data(), bytes.size(), 3));
  return out;
}

std::vector<std::string> all_documents(const std::vector<std::string>& inputs) {
  DocumentReader reader(expand_inputs(inputs));
  std::vector<std::string> docs;
  for (std::string d; reader.next(d);) docs.push_back(d);
  return docs;
}

std::string jsonl(const std::vector<std::string>& texts) {
  std::string out;
  for (const auto& t : texts) out += nlohmann::json{{"text", t}, {"meta", 1}}.dump() + "\n\n";
  return out;
}

TEST(DocumentsTest, JsonlPlainGzipAndZstdGiveTheSameDocuments) {
  test::TempDir dir;
  const std::vector<std::string> texts = {"first document\nwith two lines", "",
                                          "\xf0\x9f\x98\x80 second", std::string(300'000, 'x')};
  write(dir.file("a.jsonl"), jsonl(texts));
  write(dir.file("b.jsonl.gz"), gzip(jsonl(texts)));
  write(dir.file("c.jsonl.zst"), zstd(jsonl(texts)));
  for (const char* f : {"a.jsonl", "b.jsonl.gz", "c.jsonl.zst"}) {
    EXPECT_EQ(all_documents({dir.file(f)}), texts) << f;
  }
  // A folder: its files in name order; hidden ones skipped.
  write(dir.file(".hidden.jsonl"), jsonl({"never"}));
  EXPECT_EQ(all_documents({dir.path().string()}).size(), 3 * texts.size());
}

TEST(DocumentsTest, TextFilesAreDocumentsCutAfterANewline) {
  test::TempDir dir;
  write(dir.file("small.txt"), "a whole\nfile\n");
  EXPECT_EQ(all_documents({dir.file("small.txt")}), std::vector<std::string>{"a whole\nfile\n"});
  std::string big;
  while (big.size() <= kMaxTextDocument + 1000) big += "line of text\n  indented line\n";
  write(dir.file("big.txt"), big);
  const auto docs = all_documents({dir.file("big.txt")});
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0] + docs[1], big);
  EXPECT_LE(docs[0].size(), kMaxTextDocument);
  EXPECT_EQ(docs[0].back(), '\n');
  EXPECT_EQ(docs[1][0], 'l');  // not cut before the indented line
}

TEST(DocumentsTest, BadInputsAreNamed) {
  test::TempDir dir;
  auto fails = [&](const std::vector<std::string>& inputs, const std::string& what) {
    EXPECT_THAT([&] { all_documents(inputs); }, ThrowsMessage<DataError>(HasSubstr(what))) << what;
  };
  fails({dir.file("missing.jsonl")}, "does not exist");
  fails({"/dev/zero"}, "not a regular file or a folder");
  write(dir.file("field.jsonl"), "{\"text\": \"ok\"}\n{\"body\": \"no text\"}\n");
  fails({dir.file("field.jsonl")}, "field.jsonl, line 2: no \"text\" string field");
  write(dir.file("json.jsonl"), "{\"text\": \"ok\"}\n\n{\"text\": broken\n");
  fails({dir.file("json.jsonl")}, "json.jsonl, line 3: not JSON");
  std::string z = zstd(jsonl({std::string(100'000, 'q')}));
  write(dir.file("truncated.jsonl.zst"), z.substr(0, z.size() / 2));
  fails({dir.file("truncated.jsonl.zst")}, "ends in the middle of a frame");
  for (std::size_t i = 20; i < z.size(); i += 7) z[i] = static_cast<char>(z[i] ^ 0x5a);
  write(dir.file("corrupt.jsonl.zst"), z);
  fails({dir.file("corrupt.jsonl.zst")}, "corrupt zstd data");
  std::string g = gzip(jsonl({std::string(100'000, 'q')}));
  for (std::size_t i = 30; i < g.size(); i += 5) g[i] = static_cast<char>(g[i] ^ 0x5a);
  write(dir.file("corrupt.jsonl.gz"), g);
  fails({dir.file("corrupt.jsonl.gz")}, "corrupt gzip data");
}

TEST(TokenShardsTest, WrittenShardsReadBackAcrossFiles) {
  test::TempDir dir;
  for (TokenDtype dtype : {TokenDtype::kUint16, TokenDtype::kUint32}) {
    const std::int32_t big = dtype == TokenDtype::kUint16 ? 65535 : 1 << 20;
    std::vector<std::string> files;
    std::vector<std::int32_t> all;
    for (int f = 0; f < 3; ++f) {
      files.push_back(dir.file("s" + std::to_string(f) + ".bin"));
      ShardWriter w(files.back(), dtype);
      std::vector<std::int32_t> ids = {f, 7, big, 0, 3 * f};
      w.append(ids.data(), ids.size());
      w.close();
      all.insert(all.end(), ids.begin(), ids.end());
    }
    EXPECT_FALSE(std::filesystem::exists(files[0] + ".partial"));
    const TokenStream stream(files, TokenDtype::kUint16);
    ASSERT_EQ(stream.size(), 15);
    std::vector<std::int32_t> got(9);
    stream.read(3, 9, got.data(), big + 1);  // across all three files
    EXPECT_EQ(got, std::vector<std::int32_t>(all.begin() + 3, all.begin() + 12));
    EXPECT_THAT([&] { stream.read(0, 5, got.data(), big); },
                ThrowsMessage<DataError>(
                    AllOf(HasSubstr("s0.bin, token 2"), HasSubstr("beyond the vocabulary"))));
  }
  ShardWriter w(dir.file("small.bin"), TokenDtype::kUint16);
  const std::int32_t too_big = 70000;
  EXPECT_THROW(w.append(&too_big, 1), DataError);
}

TEST(TokenShardsTest, RawFilesAndDamagedShards) {
  test::TempDir dir;
  write(dir.file("raw.bin"), std::string("\x01\x00\x02\x00\x03\x00", 6));  // nanoGPT: uint16
  TokenFile raw(dir.file("raw.bin"), TokenDtype::kUint16);
  std::vector<std::int32_t> got(3);
  raw.read(0, 3, got.data());
  EXPECT_EQ(got, (std::vector<std::int32_t>{1, 2, 3}));
  write(dir.file("odd.bin"), std::string(7, '\x01'));
  EXPECT_THAT(
      [&] { TokenFile(dir.file("odd.bin"), TokenDtype::kUint32); },
      ThrowsMessage<DataError>(AllOf(HasSubstr("odd.bin"), HasSubstr("not a whole number"))));
  {
    ShardWriter w(dir.file("cut.bin"), TokenDtype::kUint16);
    std::vector<std::int32_t> ids(100, 5);
    w.append(ids.data(), ids.size());
    w.close();
  }
  const std::string whole = read(dir.file("cut.bin"));
  write(dir.file("cut.bin"), whole.substr(0, whole.size() - 10));
  EXPECT_THAT(
      [&] { TokenFile(dir.file("cut.bin"), TokenDtype::kUint16); },
      ThrowsMessage<DataError>(AllOf(HasSubstr("cut.bin"), HasSubstr("counts 100 tokens"))));
}

TEST(TokenizeCorpusTest, SameShardsForAnyWorkersFramedAndSplit) {
  test::TempDir dir;
  std::vector<std::string> texts;
  for (int i = 0; i < 400; ++i) texts.push_back("document " + std::to_string(i) + " says hello\n");
  write(dir.file("in.jsonl.zst"), zstd(jsonl(texts)));
  std::ifstream shakespeare(WEFT_SOURCE_DIR "/data/tinyshakespeare.txt");
  std::string text(100'000, '\0');
  shakespeare.read(text.data(), static_cast<std::streamsize>(text.size()));
  write(dir.file("corpus.txt"), text);
  train_sentencepiece({.input = dir.file("corpus.txt"),
                       .model_prefix = dir.file("tok"),
                       .vocab_size = 400,
                       .threads = 1});
  TokenizeOptions o{.inputs = {dir.file("in.jsonl.zst")},
                    .tokenizer = dir.file("tok.model"),
                    .output = dir.file("w0"),
                    .shard_tokens = 1000,
                    .validation_fraction = 0.1,
                    .workers = 0,
                    .batch_bytes = 500};
  const TokenizeProgress p0 = tokenize_corpus(o);
  o.output = dir.file("w2");
  o.workers = 2;
  const TokenizeProgress p2 = tokenize_corpus(o);
  EXPECT_EQ(p0.documents, 400);
  EXPECT_EQ(p0.tokens, p2.tokens);
  const auto index = nlohmann::json::parse(read(dir.file("w0/dataset.json")));
  for (const auto& f : std::filesystem::directory_iterator(dir.file("w0"))) {
    EXPECT_EQ(read(f.path().string()), read(dir.file("w2/" + f.path().filename().string())))
        << f.path().filename();
  }
  // Every 10th document is validation's; each is BOS, its ids, EOS.
  auto tok = load_tokenizer(dir.file("tok.model"));
  std::vector<std::string> files;
  for (const auto& f : index["validation"]["files"])
    files.push_back(dir.file("w0/" + f.get<std::string>()));
  const TokenStream validation(files, TokenDtype::kUint16);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(validation.size()));
  validation.read(0, validation.size(), ids.data(), tok->vocab_size());
  EXPECT_EQ(index["validation"]["tokens"], validation.size());
  std::vector<std::int32_t> expected;
  for (int i = 9; i < 400; i += 10) {
    expected.push_back(1);
    tok->encode(texts[static_cast<std::size_t>(i)], expected);
    expected.push_back(2);
  }
  EXPECT_EQ(ids, expected);
  EXPECT_GT(index["train"]["files"].size(), 1u);  // 1,000 tokens a shard
}

}  // namespace
}  // namespace weft::data
