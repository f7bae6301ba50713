// Training data: a dataset's train and validation splits as streams of tokens, and batches
// drawn from a counter-based generator so that batch k is a pure function of (seed, split,
// k): the loader's whole state is the number of sequences drawn over all data-parallel ranks
// (the global sample cursor), which a checkpoint records and a resumed run restores, under
// any data-parallel degree.
//
// A dataset is a text file, tokenized at start-up with the run's tokenizer (the last
// validation_fraction of its bytes held out), or a folder of token shards, memory-mapped, any
// size, with its own validation split: one weft-data tokenize wrote (dataset.json), or
// llm.c's or nanoGPT's (*train*.bin and *val*.bin). docs/DATA.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/data/tokenizer.h"

namespace weft::train {

// A split's tokens, and the bytes of text each stands for on average (for bits per byte; 0
// when unknown: token files made elsewhere).
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual std::int64_t size() const = 0;
  // Tokens [start, start + n); throws ConfigError for an id outside the model's vocabulary.
  virtual void read(std::int64_t start, std::int64_t n, std::int32_t* out) const = 0;
  double bytes_per_token() const { return bytes_per_token_; }

 protected:
  double bytes_per_token_ = 0;
};

class Dataset {
 public:
  // `path`: a text file, or a folder holding dataset.json. Throws ConfigError naming
  // training.dataset_path: unreadable, not a file or folder (a device), too big to hold,
  // made with another vocabulary than the tokenizer's, a split too short for `seq_len`.
  Dataset(const std::string& path, const data::Tokenizer& tokenizer, double validation_fraction,
          std::int64_t seq_len, std::int64_t vocab_size);
  ~Dataset();
  const TokenSource& train() const { return *train_; }
  const TokenSource& validation() const { return *validation_; }
  const std::string& describe() const { return description_; }

 private:
  std::unique_ptr<TokenSource> train_, validation_;
  std::string description_;
};

struct Batch {
  std::int64_t batch = 0, seq = 0;
  std::vector<std::int32_t> tokens;   // [batch, seq]
  std::vector<std::int32_t> targets;  // tokens shifted by one: the next token
};

class DataLoader {
 public:
  // Batches of `batch` windows of seq_len + 1 tokens from `tokens`, each window's start drawn
  // uniformly from Philox(seed, name, sample index).
  DataLoader(const TokenSource& tokens, std::int64_t batch, std::int64_t seq_len,
             std::uint64_t seed, std::string name);
  // The next batch; with `ranks` data-parallel ranks, this rank's slice of a global batch of
  // ranks x batch sequences: rank r gets sequences r x batch .. (r + 1) x batch - 1, which
  // are the ones a single process drawing batches of ranks x batch gets there.
  // Sequence i of rank r's slice is sample samples_drawn() + r x batch + i of the stream; the
  // cursor then moves past the whole global batch.
  Batch next(int rank = 0, int ranks = 1);
  // Slot `slot` of the global batch, without moving the cursor: its sequence i is sample
  // samples_drawn() + slot x batch + i (what next(r, ranks) gives rank r is slot r).
  Batch at(std::int64_t slot) const;
  void skip(std::int64_t slots) { samples_ += slots * batch_; }  // past a global batch
  std::int64_t samples_drawn() const { return samples_; }
  void set_samples_drawn(std::int64_t n) { samples_ = n; }  // restoring a checkpoint

 private:
  const TokenSource& tokens_;
  std::int64_t batch_, seq_len_;
  std::uint64_t seed_;
  std::string name_;
  std::int64_t samples_ = 0;
};

}  // namespace weft::train
