// Tokenizers on small vocabularies made here: the BPE rule against a plain loop, pieces and
// special tokens, SentencePiece training, and every bad file named. The byte-exact checks
// against reference implementations on a large corpus are tokenizer_reference_test.cc.
#include "weft/data/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "weft/data/bpe_tokenizer.h"
#include "weft/data/internal/bpe_merges.h"
#include "weft/data/sentencepiece_tokenizer.h"

namespace weft::data {
namespace {

using ::testing::HasSubstr;

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Hugging Face's ByteLevel code point of each byte (GPT-2's bytes_to_unicode), as UTF-8.
std::string byte_level(const std::string& bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    int next = 256, cp = -1;
    for (int c = 0; c < 256; ++c) {
      const bool printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174;
      const int mapped = printable ? c : next++;
      if (c == b) cp = mapped;
    }
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

// A GPT-2 style tokenizer.json: the 256 bytes, then the merges given (each makes a token).
nlohmann::json gpt2_style(const std::vector<std::pair<std::string, std::string>>& merges) {
  nlohmann::json vocab = nlohmann::json::object(), merge_list = nlohmann::json::array();
  for (int b = 0; b < 256; ++b) vocab[byte_level(std::string(1, static_cast<char>(b)))] = b;
  int next = 256;
  for (const auto& [a, b] : merges) {
    merge_list.push_back(byte_level(a) + " " + byte_level(b));
    if (!vocab.contains(byte_level(a + b))) vocab[byte_level(a + b)] = next++;
  }
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
          {"added_tokens", {{{"id", next}, {"content", "<|endoftext|>"}, {"special", true}}}},
          {"normalizer", nullptr},
          {"decoder", {{"type", "ByteLevel"}}}};
}

std::unique_ptr<Tokenizer> load_json(const test::TempDir& dir, const nlohmann::json& j) {
  write(dir.file("tokenizer.json"), j.dump());
  return load_tokenizer(dir.file("tokenizer.json"));
}

std::string base64(const std::string& bytes) {
  static const char* kDigits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 3; ++k) {
      v = (v << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    }
    for (std::size_t k = 0; k < 4; ++k) out += k <= n ? kDigits[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

std::string decode_text(const Tokenizer& tok, const std::vector<std::int32_t>& ids) {
  return tok.decode(ids);
}

TEST(ByteTokenizerTest, TokensAreBytes) {
  auto tok = load_tokenizer("bytes");
  const std::string text("a\0\xff\n", 4);
  EXPECT_EQ(tok->encode(text), (std::vector<std::int32_t>{97, 0, 255, 10}));
  EXPECT_EQ(decode_text(*tok, tok->encode(text)), text);
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_THAT([&] { tok->decode(std::vector<std::int32_t>{256}); },
              ::testing::ThrowsMessage<TokenizerError>(HasSubstr("256")));
}

TEST(BpeTokenizerTest, MergesLowestRankFirst) {
  test::TempDir dir;
  // "he" before "ll", "hell" only from "he" + "ll"; " w" and "wo" compete in " wo".
  auto tok = load_json(
      dir, gpt2_style({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"o", "r"}, {" ", "w"}, {"w", "o"}}));
  auto id = [&](const std::string& s) { return tok->encode(s).at(0); };
  EXPECT_EQ(tok->encode("hello"), (std::vector<std::int32_t>{id("hell"), 'o'}));
  // GPT-2's pattern keeps the space with the word: " world" -> " w", "or", "l", "d".
  EXPECT_EQ(tok->encode(" world"), (std::vector<std::int32_t>{id(" w"), id("or"), 'l', 'd'}));
  EXPECT_EQ(tok->decode(tok->encode("hello world")), "hello world");
  EXPECT_EQ(tok->eos_id(), tok->special_id("<|endoftext|>"));
  EXPECT_EQ(tok->bos_id(), std::nullopt);
}

TEST(BpeTokenizerTest, SpecialTokensParsedOnlyWhenAsked) {
  test::TempDir dir;
  auto tok = load_json(dir, gpt2_style({{"h", "i"}}));
  const std::int32_t eot = *tok->special_id("<|endoftext|>");
  const auto parsed = tok->encode("hi<|endoftext|>hi", Specials::kParse);
  EXPECT_EQ(parsed, (std::vector<std::int32_t>{256, eot, 256}));
  const auto as_text = tok->encode("hi<|endoftext|>hi");
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), eot), 0);
  EXPECT_EQ(tok->decode(as_text), "hi<|endoftext|>hi");
  EXPECT_EQ(tok->decode(parsed), "hi<|endoftext|>hi");
  EXPECT_EQ(tok->encode("<|endoftext|", Specials::kParse).size(), 12u);  // not a whole special
}

// Any bytes at all, valid UTF-8 or not, come back as they were.
TEST(BpeTokenizerTest, LosslessOnArbitraryBytes) {
  test::TempDir dir;
  auto tok = load_json(dir, gpt2_style({{"a", "b"}, {"ab", "c"}, {" ", "a"}, {"\xc3", "\xa9"}}));
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text(rng() % 64, '\0');
    for (char& c : text) c = "abc \n\t\xc3\xa9\xff\x80Z9'"[rng() % 14];
    EXPECT_EQ(tok->decode(tok->encode(text)), text) << "trial " << trial;
  }
}

// The rule on long pieces (the heap) and short ones (the scan) against the plain loop:
// merge the lowest-ranked adjacent pair, the leftmost among equals, until none is left.
TEST(MergeTableTest, HeapAndScanFollowThePlainRule) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    internal::MergeTable table;
    std::vector<std::array<std::int32_t, 4>> merges;  // left, right, rank, merged
    for (int m = 0; m < 40; ++m) {
      const auto a = static_cast<std::int32_t>(rng() % 12),
                 b = static_cast<std::int32_t>(rng() % 12);
      const auto rank = static_cast<std::int32_t>(rng() % 20);
      const std::int32_t merged = static_cast<std::int32_t>(rng() % 12);
      if (table.find(a, b) == nullptr) {
        table.add(a, b, {rank, merged});
        merges.push_back({a, b, rank, merged});
      }
    }
    auto plain = [&](std::vector<std::int32_t> s) {
      for (int guard = 0; guard < 100000; ++guard) {
        int best = -1, best_rank = 0, merged = 0;
        for (std::size_t i = 0; i + 1 < s.size(); ++i) {
          for (const auto& m : merges) {
            if (m[0] == s[i] && m[1] == s[i + 1] && (best < 0 || m[2] < best_rank)) {
              best = static_cast<int>(i);
              best_rank = m[2];
              merged = m[3];
            }
          }
        }
        if (best < 0) break;
        s[static_cast<std::size_t>(best)] = merged;
        s.erase(s.begin() + best + 1);
      }
      return s;
    };
    for (std::size_t n : {0u, 1u, 2u, 7u, 48u, 49u, 200u}) {
      std::vector<std::int32_t> s(n);
      for (auto& v : s) v = static_cast<std::int32_t>(rng() % 12);
      std::vector<std::int32_t> fast = s;
      table.apply(fast);
      EXPECT_EQ(fast, plain(s)) << "trial " << trial << ", length " << n;
    }
  }
}

TEST(BpeTokenizerTest, LongPieceIsQuick) {
  test::TempDir dir;
  auto tok = load_json(dir, gpt2_style({{"a", "a"}, {"aa", "aa"}, {"aaaa", "aaaa"}}));
  const std::string run(1 << 20, 'a');  // one piece of a megabyte: quadratic would take hours
  const auto ids = tok->encode(run);
  EXPECT_EQ(ids.size(), (1u << 20) / 8);
  EXPECT_EQ(tok->decode(ids), run);
}

// The pattern splits pieces as tiktoken's do (a rank file with the cl100k_base pattern).
TEST(BpeTokenizerTest, TiktokenRankFile) {
  test::TempDir dir;
  std::string ranks;
  for (int b = 0; b < 256; ++b) {
    ranks += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  }
  int rank = 256;
  for (const char* t : {" t", "he", " the", "\n\n", " y", "  "}) {
    ranks += base64(t) + " " + std::to_string(rank++) + "\n";
  }
  write(dir.file("tiny.tiktoken"), ranks);
  auto tok = load_tokenizer(dir.file("tiny.tiktoken"), "cl100k_base");
  EXPECT_EQ(tok->encode(" the"), (std::vector<std::int32_t>{258}));
  EXPECT_EQ(tok->encode(" then"), (std::vector<std::int32_t>{258, 'n'}));  // " t", "he", " the"
  // Pieces "x", "\n\n", " ", " y": the spaces before a word leave it its own.
  EXPECT_EQ(tok->encode("x\n\n  y"), (std::vector<std::int32_t>{'x', 259, ' ', 260}));
  EXPECT_EQ(tok->eos_id(), 100257);
  EXPECT_THAT([&] { load_tokenizer(dir.file("tiny.tiktoken")); },
              ::testing::ThrowsMessage<TokenizerError>(HasSubstr("262 ranks")));
  EXPECT_THAT([&] { load_tokenizer(dir.file("tiny.tiktoken"), "cl99k"); },
              ::testing::ThrowsMessage<TokenizerError>(HasSubstr("cl99k")));
}

TEST(SentencePieceTest, TrainsEncodesAndDecodesLosslessly) {
  test::TempDir dir;
  std::ifstream in(WEFT_SOURCE_DIR "/data/tinyshakespeare.txt");
  std::string text(200'000, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  write(dir.file("corpus.txt"), text);
  train_sentencepiece({.input = dir.file("corpus.txt"),
                       .model_prefix = dir.file("tok"),
                       .vocab_size = 500,
                       .threads = 1});
  auto tok = load_tokenizer(dir.file("tok.model"));
  EXPECT_EQ(tok->vocab_size(), 500);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  const std::string sample = "ROMEO:\n  Wherefore art thou, 1234 \xf0\x9f\x98\x80 caf\xc3\xa9?\n\n";
  const auto ids = tok->encode(sample);
  EXPECT_LT(ids.size(), sample.size());
  EXPECT_EQ(tok->decode(ids), sample);  // identity normalization and byte fallback
  EXPECT_THAT([&] { tok->decode(std::vector<std::int32_t>{500}); },
              ::testing::ThrowsMessage<TokenizerError>(HasSubstr("500")));
}

// Every bad tokenizer file gives an error that names the file and what is wrong with it.
TEST(TokenizerErrorsTest, BadFilesAreNamed) {
  test::TempDir dir;
  auto fails_with = [&](const std::string& spec, const std::string& text, const std::string& what) {
    EXPECT_THAT([&] { load_tokenizer(spec); },
                ::testing::ThrowsMessage<TokenizerError>(
                    ::testing::AllOf(HasSubstr(spec), HasSubstr(what))))
        << text;
  };
  fails_with(dir.file("missing.json"), "", "does not exist");
  fails_with(dir.path().string(), "", "no tokenizer.json");
  const std::string json = dir.file("tokenizer.json");
  auto with = [&](const std::string& text, const std::string& what) {
    write(json, text);
    fails_with(json, text, what);
  };
  with("{\"model\": ", "not valid JSON");
  with("{}", "no \"model\"");
  nlohmann::json j = gpt2_style({{"a", "b"}});
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  with(j.dump(), "pre-tokenizer");
  j = gpt2_style({{"a", "b"}});
  j["model"]["merges"].push_back("q zz");
  with(j.dump(), "merge 1");
  j = gpt2_style({});
  j["model"]["vocab"].erase(byte_level("x"));
  with(j.dump(), "byte 120 is not a token");
  j = gpt2_style({});
  j["normalizer"] = {{"type", "NFC"}};
  with(j.dump(), "normalizer");
  j = gpt2_style({});
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"Regex", "(unclosed"}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  with(j.dump(), "does not compile");

  const std::string ranks = dir.file("bad.tiktoken");
  write(ranks, "IQ== 0\nIg== x1\n");
  fails_with(ranks, "", "line 2");
  write(ranks, "IQ== 0\nIg== 0\n");
  fails_with(ranks, "", "appears twice");
  const std::string model = dir.file("not.model");
  write(model, "\x01\x02 not a model");
  fails_with(model, "", "not a SentencePiece model");
}

}  // namespace
}  // namespace weft::data
