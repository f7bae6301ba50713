// A corpus tokenized into token shards, in parallel on weft's ProcessPoolExecutor: what
// `weft-data tokenize` runs. Each document is framed as TorchTitan frames them (BOS, its ids,
// EOS; what the tokenizer has of the two) and packed one after another into shards of
// `shard_tokens`; every k-th document goes to the validation split. The output is the same
// for any number of workers (results are written in document order).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace weft::data {

struct TokenizeOptions {
  std::vector<std::string> inputs;  // files and folders (documents.h)
  std::string tokenizer = "bytes";  // as load_tokenizer() takes it
  std::string encoding;             // a tiktoken rank file's
  std::string text_field = "text";  // JSONL's
  std::string output;               // the folder: *.bin shards and dataset.json
  std::int64_t shard_tokens = 100'000'000;
  double validation_fraction = 0.0;   // of the documents, spread evenly
  int workers = 0;                    // worker processes; 0: tokenize in this process
  std::size_t batch_bytes = 1 << 20;  // documents' text sent to a worker at a time
};

struct TokenizeProgress {
  std::int64_t bytes_consumed = 0, bytes_total = 0;  // of the input files, as stored
  std::int64_t documents = 0, tokens = 0;
  std::int64_t text_bytes = 0;  // of the documents' text
};

// Writes the shards and dataset.json into options.output (created; shards already there are
// replaced). Calls `progress` after each batch. Throws DataError, TokenizerError, SystemError.
TokenizeProgress tokenize_corpus(const TokenizeOptions& options,
                                 const std::function<void(const TokenizeProgress&)>& progress = {});

}  // namespace weft::data
