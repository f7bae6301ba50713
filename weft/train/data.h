// Training data: a byte-level tokenizer (vocabulary 256: token = byte) over a text file, a
// train/validation split, and batches drawn from a counter-based generator so that batch k
// is a pure function of (seed, split, k): the loader's whole state is the number of sequences
// drawn over all data-parallel ranks (the global sample cursor), which a checkpoint records
// and a resumed run restores, under any data-parallel degree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weft::train {

std::vector<std::int32_t> encode(std::string_view text);
std::string decode(const std::vector<std::int32_t>& tokens);  // ids outside 0..255 become '?'

struct Batch {
  std::int64_t batch = 0, seq = 0;
  std::vector<std::int32_t> tokens;   // [batch, seq]
  std::vector<std::int32_t> targets;  // tokens shifted by one: the next byte
};

class TextDataset {
 public:
  // Reads `path` whole. The last `validation_fraction` of it is the validation split. Throws
  // ConfigError (from config.h) when the file cannot be read or a split is too short for
  // sequences of `seq_len`.
  TextDataset(const std::string& path, double validation_fraction, std::int64_t seq_len);
  const std::vector<std::int32_t>& train() const { return train_; }
  const std::vector<std::int32_t>& validation() const { return validation_; }

 private:
  std::vector<std::int32_t> train_, validation_;
};

class DataLoader {
 public:
  // Batches of `batch` windows of seq_len + 1 tokens from `tokens`, each window's start drawn
  // uniformly from Philox(seed, name, sample index).
  DataLoader(const std::vector<std::int32_t>& tokens, std::int64_t batch, std::int64_t seq_len,
             std::uint64_t seed, std::string name);
  // The next batch; with `ranks` data-parallel ranks, this rank's slice of a global batch of
  // ranks x batch sequences: rank r gets sequences r x batch .. (r + 1) x batch - 1, which
  // are the ones a single process drawing batches of ranks x batch gets there.
  // Sequence i of rank r's slice is sample samples_drawn() + r x batch + i of the stream; the
  // cursor then moves past the whole global batch.
  Batch next(int rank = 0, int ranks = 1);
  std::int64_t samples_drawn() const { return samples_; }
  void set_samples_drawn(std::int64_t n) { samples_ = n; }  // restoring a checkpoint

 private:
  const std::vector<std::int32_t>& tokens_;
  std::int64_t batch_, seq_len_;
  std::uint64_t seed_;
  std::string name_;
  std::int64_t samples_ = 0;
};

}  // namespace weft::train
