// weft-data: prepares training data (docs/DATA.md).
//
//   weft-data tokenize --input corpus/ --tokenizer tok.model --output data/shards
//       [--validation-fraction 0.01] [--shard-tokens 100000000] [--workers 2] [--text-field text]
//   weft-data inspect data/shards          splits, files, tokens and the first text decoded
//
// Inputs are text files, JSONL (.jsonl, .gz, .zst) and folders of them. Exit codes: 0 done;
// 2 a bad command line, input or tokenizer; 1 anything else.

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "progress_line.h"
#include "weft/data/token_shards.h"
#include "weft/data/tokenize_corpus.h"
#include "weft/data/tokenizer.h"

namespace {

namespace data = weft::data;
using Clock = std::chrono::steady_clock;

// The tokenizer's progress as the progress line's text.
std::string describe(const data::TokenizeProgress& p, double seconds) {
  char text[160];
  std::snprintf(
      text, sizeof(text), "tokenized %.1f of %.1f MB, %lld documents, %lld tokens, %.1f MB/s",
      static_cast<double>(p.bytes_consumed) / 1e6, static_cast<double>(p.bytes_total) / 1e6,
      static_cast<long long>(p.documents), static_cast<long long>(p.tokens),
      static_cast<double>(p.text_bytes) / 1e6 / std::max(seconds, 1e-9));
  return text;
}

void inspect(const std::string& folder) {
  const std::string path = (std::filesystem::path(folder) / "dataset.json").string();
  std::ifstream in(path);
  if (!in)
    throw weft::InvalidArgument(folder + " has no dataset.json (weft-data tokenize writes it)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw weft::InvalidArgument(path + ": not valid JSON: " + e.what());
  }
  std::printf("%s: %s, vocabulary %lld, %s tokens, %lld documents\n", folder.c_str(),
              j.value("tokenizer_description", "?").c_str(), j.value("vocab_size", 0LL),
              j.value("dtype", "?").c_str(), j.value("documents", 0LL));
  const auto tok = data::load_tokenizer(j.value("tokenizer", "bytes"), j.value("encoding", ""));
  for (const char* split : {"train", "validation"}) {
    const auto& s = j[split];
    std::vector<std::string> files;
    for (const auto& f : s["files"])
      files.push_back((std::filesystem::path(folder) / f.get<std::string>()).string());
    const data::TokenStream stream(files, data::TokenDtype::kUint16);
    const auto tokens = s.value("tokens", 0LL), bytes = s.value("text_bytes", 0LL);
    std::printf("%s: %zu file%s, %lld tokens (%.2f bytes of text each)\n", split, files.size(),
                files.size() == 1 ? "" : "s", static_cast<long long>(stream.size()),
                tokens > 0 ? static_cast<double>(bytes) / static_cast<double>(tokens) : 0.0);
    if (stream.size() != tokens) {
      throw weft::InvalidArgument(folder + ": the " + std::string(split) + " files hold " +
                                  std::to_string(stream.size()) + " tokens, dataset.json says " +
                                  std::to_string(tokens));
    }
    std::vector<std::int32_t> head(
        static_cast<std::size_t>(std::min<std::int64_t>(stream.size(), 24)));
    stream.read(0, static_cast<std::int64_t>(head.size()), head.data(), tok->vocab_size());
    std::string text = tok->decode(head);
    for (char& c : text) c = c == '\n' ? ' ' : c;
    if (!head.empty()) std::printf("  begins: %s\n", text.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("weft-data: prepares training data (docs/DATA.md)", "weft-data");
  app.option_defaults()->always_capture_default();
  app.require_subcommand(1);
  data::TokenizeOptions o;
  o.workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto* tokenize_cmd = app.add_subcommand(
      "tokenize", "tokenizes text, JSONL (.gz, .zst) files and folders into token shards");
  tokenize_cmd->add_option("--input", o.inputs, "files and folders")->required();
  tokenize_cmd->add_option("--output", o.output, "the folder for the shards and dataset.json")
      ->required();
  tokenize_cmd->add_option("--tokenizer", o.tokenizer,
                           "bytes, tokenizer.json, a SentencePiece .model or a tiktoken rank file");
  tokenize_cmd->add_option("--encoding", o.encoding, "a tiktoken rank file's encoding");
  tokenize_cmd->add_option("--text-field", o.text_field, "JSONL's field with the text");
  tokenize_cmd
      ->add_option("--validation-fraction", o.validation_fraction,
                   "the share of documents kept for validation (every k-th)")
      ->check(CLI::Range(0.0, 0.5));
  tokenize_cmd->add_option("--shard-tokens", o.shard_tokens, "tokens per shard file")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{2'000'000'000}));
  tokenize_cmd->add_option("--workers", o.workers, "worker processes (0: this process alone)")
      ->check(CLI::Range(0, 1024));
  std::string folder;
  auto* inspect_cmd =
      app.add_subcommand("inspect", "a folder of shards: splits, sizes, first text");
  inspect_cmd->add_option("folder", folder)->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (*tokenize_cmd) {
      weft::tools::ProgressLine line;
      const auto start = Clock::now();
      const data::TokenizeProgress p =
          data::tokenize_corpus(o, [&](const data::TokenizeProgress& now) {
            const double s = std::chrono::duration<double>(Clock::now() - start).count();
            line.update(static_cast<double>(now.bytes_consumed),
                        static_cast<double>(now.bytes_total), describe(now, s));
          });
      line.finish();
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      std::printf("wrote %s: %lld documents, %lld tokens from %.1f MB of text in %.1f s\n",
                  o.output.c_str(), static_cast<long long>(p.documents),
                  static_cast<long long>(p.tokens), static_cast<double>(p.text_bytes) / 1e6, s);
    }
    if (*inspect_cmd) inspect(folder);
  } catch (const weft::InvalidArgument& e) {
    std::fprintf(stderr, "weft-data: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft-data: %s\n", e.what());
    return 1;
  }
  return 0;
}
