#include "weft/train/data.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "weft/base/system.h"
#include "weft/data/token_shards.h"
#include "weft/tensor/random.h"
#include "weft/train/config.h"

namespace weft::train {

namespace fs = std::filesystem;

namespace {

std::string key_is(const std::string& path) { return "training.dataset_path = '" + path + "'"; }

// A split held in memory: a text file's tokens.
class MemoryTokens final : public TokenSource {
 public:
  MemoryTokens(std::vector<std::int32_t> ids, std::int64_t text_bytes) : ids_(std::move(ids)) {
    bytes_per_token_ =
        ids_.empty() ? 1 : static_cast<double>(text_bytes) / static_cast<double>(ids_.size());
  }
  std::int64_t size() const override { return static_cast<std::int64_t>(ids_.size()); }
  void read(std::int64_t start, std::int64_t n, std::int32_t* out) const override {
    std::memcpy(out, ids_.data() + start, static_cast<std::size_t>(n) * sizeof(std::int32_t));
  }

 private:
  std::vector<std::int32_t> ids_;
};

// A split of token shards, memory-mapped.
class ShardTokens final : public TokenSource {
 public:
  ShardTokens(const std::vector<std::string>& files, std::int64_t text_bytes, std::int64_t vocab)
      : stream_(files, data::TokenDtype::kUint16), vocab_(vocab) {
    bytes_per_token_ = stream_.size() == 0
                           ? 1
                           : static_cast<double>(text_bytes) / static_cast<double>(stream_.size());
  }
  std::int64_t size() const override { return stream_.size(); }
  void read(std::int64_t start, std::int64_t n, std::int32_t* out) const override {
    try {
      stream_.read(start, n, out, vocab_);
    } catch (const data::DataError& e) {
      throw ConfigError(e.what());
    }
  }

 private:
  data::TokenStream stream_;
  std::int64_t vocab_;
};

// The whole text file is read and held with its tokens (at most 4 bytes each per byte of
// text, and the two splits' copies): a device such as /dev/zero, or a file larger than
// memory, would grow the process until the kernel killed it. Larger corpora go through
// weft-data tokenize.
constexpr std::int64_t kBytesHeldPerByte = 1 + 2 * sizeof(std::int32_t);

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  const auto size = static_cast<std::int64_t>(fs::file_size(path, ec));
  const std::int64_t available = available_memory_bytes();
  if (!ec && available >= 0 && size * kBytesHeldPerByte > available) {
    throw ConfigError(key_is(path) + " has " + std::to_string(size) + " bytes; weft-train holds " +
                      std::to_string(kBytesHeldPerByte) +
                      " bytes per byte of a text file and this "
                      "host has " +
                      std::to_string(available) +
                      " bytes available: tokenize it "
                      "into shards with weft-data tokenize and give their folder");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError(key_is(path) + " cannot be read: " + std::strerror(errno) +
                      " (run from the project's root, or give the path)");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return std::move(text).str();
}

std::vector<std::int32_t> checked_encode(const data::Tokenizer& tok, std::string_view text,
                                         std::int64_t vocab, const std::string& path) {
  std::vector<std::int32_t> ids = tok.encode(text);
  for (std::int32_t id : ids) {
    if (id >= vocab) {
      throw ConfigError(key_is(path) + ": the tokenizer gives id " + std::to_string(id) +
                        ", beyond model.vocab_size = " + std::to_string(vocab));
    }
  }
  return ids;
}

nlohmann::json read_index(const std::string& folder) {
  const std::string path = (fs::path(folder) / "dataset.json").string();
  std::ifstream in(path);
  if (!in) {
    throw ConfigError(key_is(folder) +
                      " is a folder without dataset.json: give a text file, or "
                      "a folder that weft-data tokenize wrote");
  }
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path + " is not valid JSON: " + e.what());
  }
}

}  // namespace

Dataset::Dataset(const std::string& path, const data::Tokenizer& tokenizer,
                 double validation_fraction, std::int64_t seq_len, std::int64_t vocab_size) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    throw ConfigError(key_is(path) +
                      " cannot be read: it does not exist (run from the project's "
                      "root, or give the path)");
  }
  if (fs::is_directory(status)) {
    const nlohmann::json index = read_index(path);
    const std::int64_t made_with = index.value("vocab_size", std::int64_t{0});
    if (made_with != tokenizer.vocab_size()) {
      throw ConfigError(key_is(path) + " was tokenized with " +
                        index.value("tokenizer_description", std::string("?")) +
                        ", not the run's tokenizer (" + tokenizer.describe() +
                        "): set tokenizer.path to " + index.value("tokenizer", std::string("?")));
    }
    auto split = [&](const char* name) {
      std::vector<std::string> files;
      for (const auto& f : index[name]["files"])
        files.push_back((fs::path(path) / f.get<std::string>()).string());
      try {
        return std::make_unique<ShardTokens>(
            files, index[name].value("text_bytes", std::int64_t{0}), vocab_size);
      } catch (const data::DataError& e) {
        throw ConfigError(key_is(path) + ": " + e.what());
      }
    };
    train_ = split("train");
    validation_ = split("validation");
    description_ = path + ": token shards, " + std::to_string(train_->size()) + " train and " +
                   std::to_string(validation_->size()) + " validation tokens";
  } else if (fs::is_regular_file(status)) {
    const std::string text = read_text_file(path);
    const auto cut =
        static_cast<std::size_t>(static_cast<double>(text.size()) * (1.0 - validation_fraction));
    const std::string_view all(text);
    train_ = std::make_unique<MemoryTokens>(
        checked_encode(tokenizer, all.substr(0, cut), vocab_size, path),
        static_cast<std::int64_t>(cut));
    validation_ =
        std::make_unique<MemoryTokens>(checked_encode(tokenizer, all.substr(cut), vocab_size, path),
                                       static_cast<std::int64_t>(text.size() - cut));
    description_ = path + ": " + std::to_string(text.size()) + " bytes, " +
                   std::to_string(train_->size() + validation_->size()) + " tokens";
    if (validation_fraction == 0)
      validation_ = std::make_unique<MemoryTokens>(std::vector<std::int32_t>{}, 0);
  } else {
    throw ConfigError(key_is(path) +
                      " is not a regular file or a folder (a device, a pipe or a "
                      "socket): give a text file, or a folder of token shards");
  }
  const std::int64_t need = seq_len + 1;
  if (train_->size() < need ||
      (validation_fraction > 0 && validation_->size() < need && !fs::is_directory(status))) {
    throw ConfigError(key_is(path) + " has " + std::to_string(train_->size()) + " train and " +
                      std::to_string(validation_->size()) + " validation tokens: too few for " +
                      "sequences of " + std::to_string(seq_len) + " in both splits");
  }
}

Dataset::~Dataset() = default;

DataLoader::DataLoader(const TokenSource& tokens, std::int64_t batch, std::int64_t seq_len,
                       std::uint64_t seed, std::string name)
    : tokens_(tokens), batch_(batch), seq_len_(seq_len), seed_(seed), name_(std::move(name)) {
  if (tokens_.size() <= seq_len_) {
    throw ConfigError("the " + name_ + " split has " + std::to_string(tokens_.size()) +
                      " tokens: too few for sequences of " + std::to_string(seq_len_));
  }
}

Batch DataLoader::next(int rank, int ranks) {
  Batch b{batch_, seq_len_, {}, {}};
  b.tokens.resize(static_cast<std::size_t>(batch_ * seq_len_));
  b.targets.resize(b.tokens.size());
  const PhiloxKey key = philox_key(seed_, name_);
  const auto starts = static_cast<double>(tokens_.size() - seq_len_);
  std::vector<std::int32_t> window(static_cast<std::size_t>(seq_len_ + 1));
  for (std::int64_t i = 0; i < batch_; ++i) {
    const auto sample = static_cast<std::uint64_t>(samples_ + rank * batch_ + i);
    const auto start = static_cast<std::int64_t>(philox_uniform(key, sample) * starts);
    tokens_.read(start, seq_len_ + 1, window.data());
    std::copy(window.begin(), window.end() - 1, b.tokens.begin() + i * seq_len_);
    std::copy(window.begin() + 1, window.end(), b.targets.begin() + i * seq_len_);
  }
  samples_ += ranks * batch_;
  return b;
}

}  // namespace weft::train
