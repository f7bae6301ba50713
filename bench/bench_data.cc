// The data loader's cost per batch (weft-train's DataLoader::next, one rank's slice of a
// 2-rank global batch of 8 x 256 tokens), from a text file held in memory and from token
// shards memory-mapped, tokenized with bytes and with a SentencePiece model of 8,000 tokens:
// what a training step pays for its data (docs/PERFORMANCE.md, "Data loading").
//   bench_data   (run from the repository root: it reads data/tinyshakespeare.txt)
#include <benchmark/benchmark.h>

#include <filesystem>
#include <memory>

#include "weft/data/sentencepiece_tokenizer.h"
#include "weft/data/tokenize_corpus.h"
#include "weft/train/data.h"

namespace {

namespace fs = std::filesystem;
const std::string kText = "data/tinyshakespeare.txt";

// Shards and a tokenizer made once, in a folder removed at exit.
struct Files {
  fs::path dir = fs::temp_directory_path() / "weft-bench-data";
  Files() {
    fs::create_directories(dir);
    weft::data::train_sentencepiece(
        {.input = kText, .model_prefix = (dir / "bpe8k").string(), .vocab_size = 8000});
    for (const char* tok : {"bytes", "bpe8k"}) {
      weft::data::tokenize_corpus(
          {.inputs = {kText},
           .tokenizer = std::string(tok) == "bytes" ? "bytes" : (dir / "bpe8k.model").string(),
           .output = (dir / tok).string()});
    }
  }
  ~Files() { fs::remove_all(dir); }
};
Files& files() {
  static Files f;
  return f;
}

void BM_LoaderNext(benchmark::State& state, bool shards, bool bpe) {
  const auto tok = bpe ? weft::data::load_tokenizer((files().dir / "bpe8k.model").string())
                       : weft::data::load_tokenizer("bytes");
  const std::string path = shards ? (files().dir / (bpe ? "bpe8k" : "bytes")).string() : kText;
  const weft::train::Dataset data(path, *tok, shards ? 0.0 : 0.1, 256, tok->vocab_size());
  weft::train::DataLoader loader(data.train(), 8, 256, 0, "train");
  for (auto _ : state) benchmark::DoNotOptimize(loader.next(0, 2).tokens.data());
}

BENCHMARK_CAPTURE(BM_LoaderNext, text_bytes, false, false);
BENCHMARK_CAPTURE(BM_LoaderNext, shards_bytes, true, false);
BENCHMARK_CAPTURE(BM_LoaderNext, text_bpe8k, false, true);
BENCHMARK_CAPTURE(BM_LoaderNext, shards_bpe8k, true, true);

}  // namespace

BENCHMARK_MAIN();
