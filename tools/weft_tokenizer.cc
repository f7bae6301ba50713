// weft-tokenizer: trains, inspects and runs tokenizers (docs/DATA.md).
//
//   weft-tokenizer train --input corpus.txt --vocab-size 8000 --model-type bpe --output tok
//   weft-tokenizer info --tokenizer tokenizer.json
//   weft-tokenizer encode --tokenizer tok.model --input text.txt [--output ids.txt] [--stats]
//   weft-tokenizer decode --tokenizer tok.model --input ids.txt
//
// A tokenizer is "bytes", a tokenizer.json (or a folder holding one), a SentencePiece .model
// or a tiktoken rank file (--encoding names its pattern when the rank count does not).
// Exit codes: 0 done; 2 a bad command line or tokenizer file; 1 anything else.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "weft/data/sentencepiece_tokenizer.h"
#include "weft/data/tokenizer.h"

namespace {

namespace data = weft::data;

std::string read_input(const std::string& path) {
  std::ostringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw weft::InvalidArgument("cannot read " + path);
    text << in.rdbuf();
  }
  return std::move(text).str();
}

void write_output(const std::string& path, const std::string& bytes) {
  if (path == "-") {
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    return;
  }
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw weft::SystemError("writing " + path, errno);
}

void info(const data::Tokenizer& tok) {
  std::printf("%s\n", tok.describe().c_str());
  auto id = [](std::optional<std::int32_t> v) { return v ? std::to_string(*v) : "none"; };
  std::printf("vocabulary %d, bos %s, eos %s\n", tok.vocab_size(), id(tok.bos_id()).c_str(),
              id(tok.eos_id()).c_str());
}

void encode(const data::Tokenizer& tok, const std::string& input, const std::string& output,
            bool parse_specials, bool stats) {
  const std::string text = read_input(input);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::int32_t> ids =
      tok.encode(text, parse_specials ? data::Specials::kParse : data::Specials::kAsText);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string line;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    line += (i == 0 ? "" : " ") + std::to_string(ids[i]);
  }
  write_output(output, line + "\n");
  if (stats) {
    const double mb = static_cast<double>(text.size()) / 1e6;
    std::fprintf(stderr,
                 "encoded %.2f MB into %zu tokens (%.2f bytes/token) in %.3f s: %.2f MB/s\n", mb,
                 ids.size(), static_cast<double>(text.size()) / static_cast<double>(ids.size()),
                 seconds, mb / seconds);
  }
}

void decode(const data::Tokenizer& tok, const std::string& input, const std::string& output) {
  std::istringstream in(read_input(input));
  std::vector<std::int32_t> ids;
  std::string word;
  while (in >> word) {
    std::size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || id < INT32_MIN || id > INT32_MAX) {
      throw weft::InvalidArgument(input + ": \"" + word + "\" is not a token id");
    }
    ids.push_back(static_cast<std::int32_t>(id));
  }
  write_output(output, tok.decode(ids));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("weft-tokenizer: trains, inspects and runs tokenizers (docs/DATA.md)",
               "weft-tokenizer");
  app.option_defaults()->always_capture_default();
  app.require_subcommand(1);
  std::string spec = "bytes", encoding, input = "-", output = "-";
  bool parse_specials = false, stats = false;
  data::SentencePieceTraining training;
  auto add_tokenizer = [&](CLI::App* cmd) {
    cmd->add_option("--tokenizer", spec,
                    "bytes, tokenizer.json (or its folder), a SentencePiece .model or a tiktoken "
                    "rank file");
    cmd->add_option("--encoding", encoding,
                    "a tiktoken rank file's encoding: llama3, cl100k_base, o200k_base, r50k_base "
                    "(default: by its rank count)");
  };
  auto* train_cmd =
      app.add_subcommand("train", "trains a SentencePiece model on a text file (one line each)");
  train_cmd->add_option("--input", training.input, "the corpus")->required();
  train_cmd->add_option("--output", training.model_prefix, "writes <output>.model and .vocab")
      ->required();
  train_cmd->add_option("--vocab-size", training.vocab_size)->check(CLI::Range(16, 1 << 20));
  train_cmd->add_option("--model-type", training.model_type)
      ->check(CLI::IsMember({"bpe", "unigram", "char", "word"}));
  train_cmd->add_option("--character-coverage", training.character_coverage)
      ->check(CLI::Range(0.5, 1.0));
  train_cmd->add_option("--input-sentence-size", training.input_sentence_size,
                        "lines sampled from the corpus; 0: all");
  train_cmd->add_option("--threads", training.threads, "0: every CPU")->check(CLI::Range(0, 1024));
  auto* info_cmd = app.add_subcommand("info", "the tokenizer's kind, vocabulary, BOS and EOS");
  add_tokenizer(info_cmd);
  auto* encode_cmd = app.add_subcommand("encode", "text to token ids (one line of them)");
  add_tokenizer(encode_cmd);
  encode_cmd->add_option("--input", input, "a file, or - for standard input");
  encode_cmd->add_option("--output", output, "a file, or - for standard output");
  encode_cmd->add_flag("--specials", parse_specials,
                       "special tokens' text becomes the special token (as chat templates want)");
  encode_cmd->add_flag("--stats", stats, "prints bytes, tokens and MB/s to standard error");
  auto* decode_cmd = app.add_subcommand("decode", "token ids (separated by spaces) to text");
  add_tokenizer(decode_cmd);
  decode_cmd->add_option("--input", input, "a file, or - for standard input");
  decode_cmd->add_option("--output", output, "a file, or - for standard output");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (*train_cmd) {
      data::train_sentencepiece(training);
      std::printf("wrote %s.model and %s.vocab\n", training.model_prefix.c_str(),
                  training.model_prefix.c_str());
      return 0;
    }
    const auto tok = data::load_tokenizer(spec, encoding);
    if (*info_cmd) info(*tok);
    if (*encode_cmd) encode(*tok, input, output, parse_specials, stats);
    if (*decode_cmd) decode(*tok, input, output);
  } catch (const weft::InvalidArgument& e) {
    std::fprintf(stderr, "weft-tokenizer: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft-tokenizer: %s\n", e.what());
    return 1;
  }
  return 0;
}
