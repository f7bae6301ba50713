#include "weft/train/data.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "weft/base/system.h"
#include "weft/tensor/random.h"
#include "weft/train/config.h"

namespace weft::train {

std::vector<std::int32_t> encode(std::string_view text) {
  std::vector<std::int32_t> tokens;
  tokens.reserve(text.size());
  for (char c : text) tokens.push_back(static_cast<unsigned char>(c));
  return tokens;
}

std::string decode(const std::vector<std::int32_t>& tokens) {
  std::string text;
  for (std::int32_t t : tokens) text += t >= 0 && t < 256 ? static_cast<char>(t) : '?';
  return text;
}

namespace {

// The whole file is read and held as tokens (the bytes, their int32 tokens and the two splits'
// copies): a device such as /dev/zero, or a file larger than memory, would grow the process
// until the kernel killed it.
constexpr std::int64_t kBytesHeldPerByte = 1 + 2 * sizeof(std::int32_t);

void check_readable_whole(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec) return;  // the open below says why
  if (!std::filesystem::is_regular_file(status)) {
    throw ConfigError("training.dataset_path = '" + path +
                      "' is not a regular file (a device, a pipe or a directory): weft-train "
                      "reads the whole dataset into memory; give a text file");
  }
  const auto size = static_cast<std::int64_t>(std::filesystem::file_size(path, ec));
  const std::int64_t available = available_memory_bytes();
  if (!ec && available >= 0 && size * kBytesHeldPerByte > available) {
    throw ConfigError("training.dataset_path = '" + path + "' has " + std::to_string(size) +
                      " bytes; weft-train holds " + std::to_string(kBytesHeldPerByte) +
                      " bytes per byte of text and this host has " + std::to_string(available) +
                      " bytes available: give a smaller file");
  }
}

}  // namespace

TextDataset::TextDataset(const std::string& path, double validation_fraction,
                         std::int64_t seq_len) {
  check_readable_whole(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError("training.dataset_path = '" + path + "' cannot be read: " +
                      std::strerror(errno) + " (run from the project's root, or give the path)");
  }
  std::ostringstream text;
  text << in.rdbuf();
  const std::vector<std::int32_t> all = encode(text.str());
  const auto split =
      static_cast<std::size_t>(static_cast<double>(all.size()) * (1.0 - validation_fraction));
  train_.assign(all.begin(), all.begin() + static_cast<long>(split));
  validation_.assign(all.begin() + static_cast<long>(split), all.end());
  const auto need = static_cast<std::size_t>(seq_len + 1);
  if (train_.size() < need || (validation_fraction > 0 && validation_.size() < need)) {
    throw ConfigError("training.dataset_path = '" + path + "' has " + std::to_string(all.size()) +
                      " bytes: too few for sequences of " + std::to_string(seq_len) +
                      " in both the train and the validation split");
  }
}

DataLoader::DataLoader(const std::vector<std::int32_t>& tokens, std::int64_t batch,
                       std::int64_t seq_len, std::uint64_t seed, std::string name)
    : tokens_(tokens), batch_(batch), seq_len_(seq_len), seed_(seed), name_(std::move(name)) {
  if (static_cast<std::int64_t>(tokens_.size()) <= seq_len_) {
    throw ConfigError("the " + name_ + " split has " + std::to_string(tokens_.size()) +
                      " tokens: too few for sequences of " + std::to_string(seq_len_));
  }
}

Batch DataLoader::next(int rank, int ranks) {
  Batch b{batch_, seq_len_, {}, {}};
  b.tokens.resize(static_cast<std::size_t>(batch_ * seq_len_));
  b.targets.resize(b.tokens.size());
  const PhiloxKey key = philox_key(seed_, name_);
  const auto starts = static_cast<double>(tokens_.size() - static_cast<std::size_t>(seq_len_));
  for (std::int64_t i = 0; i < batch_; ++i) {
    const auto sample = static_cast<std::uint64_t>(samples_ + rank * batch_ + i);
    const auto start = static_cast<std::size_t>(philox_uniform(key, sample) * starts);
    for (std::int64_t t = 0; t < seq_len_; ++t) {
      b.tokens[static_cast<std::size_t>(i * seq_len_ + t)] =
          tokens_[start + static_cast<std::size_t>(t)];
      b.targets[static_cast<std::size_t>(i * seq_len_ + t)] =
          tokens_[start + static_cast<std::size_t>(t) + 1];
    }
  }
  samples_ += ranks * batch_;
  return b;
}

}  // namespace weft::train
