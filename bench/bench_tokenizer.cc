// Encoding throughput of weft's tokenizers on the tokenizer tests' corpus (2 MB of mixed
// text), 1 and 2 threads, each thread encoding the whole corpus (independent documents, as
// a dataset is tokenized). Reads the files tests/data/reference/setup.sh makes (ctest -R
// data.tokenizer makes them in the build tree); bench/data/tokenizers.sh runs this beside the
// references.
//   bench_tokenizer [--benchmark_filter=...] (WEFT_TOKENIZER_FILES: that folder)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "weft/data/tokenizer.h"

namespace {

std::string files() {
  const char* dir = std::getenv("WEFT_TOKENIZER_FILES");
  return dir != nullptr ? dir : WEFT_DEFAULT_TOKENIZER_FILES;
}

const std::string& corpus() {
  static const std::string text = [] {
    std::ifstream in(files() + "/corpus.txt", std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return std::move(s).str();
  }();
  return text;
}

void BM_Encode(benchmark::State& state, const char* tokenizer) {
  static std::unique_ptr<weft::data::Tokenizer> tok;
  static std::string loaded;
  if (state.thread_index() == 0 && loaded != tokenizer) {
    tok = weft::data::load_tokenizer(files() + "/" + tokenizer);
    loaded = tokenizer;
  }
  if (corpus().empty()) {
    state.SkipWithError("no corpus: run ctest -R data.tokenizer first");
    return;
  }
  std::vector<std::int32_t> ids;
  for (auto _ : state) {
    ids.clear();
    tok->encode(corpus(), ids);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * corpus().size()));
}

BENCHMARK_CAPTURE(BM_Encode, cl100k_base, "cl100k_base.tiktoken")
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, o200k_base, "o200k_base.tiktoken")
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, r50k_base, "r50k_base.tiktoken")
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, llama3_json, "llama3/tokenizer.json")
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, spm_bpe, "spm_bpe.model")->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, spm_unigram, "spm_unigram.model")
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
