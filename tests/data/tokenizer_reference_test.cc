// weft's tokenizers byte-exact against reference implementations on a 2 MB corpus of mixed
// text (tests/data/reference/make_corpus.py): npm's js-tiktoken and tiktoken (OpenAI's Rust
// code compiled to WebAssembly) for cl100k_base, o200k_base and r50k_base,
// llama3-tokenizer-js (Llama 3, as tokenizer.json and as a rank file), and
// SentencePiece's Python module (BPE and unigram models it trained). The set-up
// (tests/data/reference/setup.sh) wrote the tokenizer files and the references' ids.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "weft/data/tokenizer.h"

namespace weft::data {
namespace {

const std::string kDir = WEFT_REFERENCE_DIR;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return std::move(text).str();
}

std::vector<std::int32_t> read_ids(const std::string& path) {
  std::istringstream in(read(path));
  std::vector<std::int32_t> ids;
  for (std::int32_t id = 0; in >> id;) ids.push_back(id);
  return ids;
}

void expect_same_ids(const std::string& tokenizer, const std::string& expected_file,
                     Specials specials) {
  const std::string corpus = read(kDir + "/corpus.txt");
  ASSERT_GT(corpus.size(), 1u << 20);
  const auto tok = load_tokenizer(kDir + "/" + tokenizer);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::int32_t> ids = tok->encode(corpus, specials);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::vector<std::int32_t> expected = read_ids(kDir + "/" + expected_file);
  ASSERT_FALSE(expected.empty()) << expected_file;
  std::size_t first = 0;
  while (first < ids.size() && first < expected.size() && ids[first] == expected[first]) ++first;
  if (first < ids.size() || first < expected.size()) {
    const std::size_t from = first < 8 ? 0 : first - 8;
    auto around = [&](const std::vector<std::int32_t>& v) {
      std::vector<std::int32_t> part(
          v.begin() + static_cast<std::ptrdiff_t>(std::min(from, v.size())),
          v.begin() + static_cast<std::ptrdiff_t>(std::min(first + 8, v.size())));
      return tok->decode(part);
    };
    FAIL() << tokenizer << " differs from " << expected_file << " at token " << first << " of "
           << expected.size() << ": weft gives \"" << around(ids) << "\", the reference \""
           << around(expected) << "\"";
  }
  EXPECT_EQ(tok->decode(ids), corpus);
  std::printf("%s: %zu tokens, %.2f MB/s\n", tokenizer.c_str(), ids.size(),
              static_cast<double>(corpus.size()) / 1e6 / s);
}

TEST(TokenizerReferenceTest, Cl100kLikeTiktoken) {
  expect_same_ids("cl100k_base.tiktoken", "cl100k_base-text.ids", Specials::kAsText);
  expect_same_ids("cl100k_base.tiktoken", "cl100k_base-wasm.ids", Specials::kAsText);
  expect_same_ids("cl100k_base.tiktoken", "cl100k_base-specials.ids", Specials::kParse);
}

TEST(TokenizerReferenceTest, O200kLikeTiktoken) {
  expect_same_ids("o200k_base.tiktoken", "o200k_base-text.ids", Specials::kAsText);
  expect_same_ids("o200k_base.tiktoken", "o200k_base-wasm.ids", Specials::kAsText);
}

TEST(TokenizerReferenceTest, R50kLikeTiktoken) {
  expect_same_ids("r50k_base.tiktoken", "r50k_base-text.ids", Specials::kAsText);
  expect_same_ids("r50k_base.tiktoken", "r50k_base-wasm.ids", Specials::kAsText);
}

TEST(TokenizerReferenceTest, Llama3TokenizerJsonLikeLlama3TokenizerJs) {
  expect_same_ids("llama3/tokenizer.json", "llama3-text.ids", Specials::kAsText);
  expect_same_ids("llama3/tokenizer.json", "llama3-specials.ids", Specials::kParse);
}

TEST(TokenizerReferenceTest, Llama3RankFileLikeLlama3TokenizerJs) {
  expect_same_ids("llama3.tiktoken", "llama3-text.ids", Specials::kAsText);
  expect_same_ids("llama3.tiktoken", "llama3-specials.ids", Specials::kParse);
}

TEST(TokenizerReferenceTest, SentencePieceLikeItsPythonModule) {
  expect_same_ids("spm_bpe.model", "spm_bpe.ids", Specials::kAsText);
  expect_same_ids("spm_unigram.model", "spm_unigram.ids", Specials::kAsText);
}

}  // namespace
}  // namespace weft::data
