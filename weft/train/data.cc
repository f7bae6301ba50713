#include "weft/train/data.h"

#include <algorithm>
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
        ids_.empty() ? 0 : static_cast<double>(text_bytes) / static_cast<double>(ids_.size());
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
    bytes_per_token_ = stream_.size() == 0 || text_bytes <= 0
                           ? 0
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

nlohmann::json read_index(const std::string& path) {
  std::ifstream in(path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path + " is not valid JSON: " + e.what());
  }
}

std::unique_ptr<ShardTokens> shard_split(const std::string& folder,
                                         const std::vector<std::string>& files,
                                         std::int64_t text_bytes, std::int64_t vocab) {
  try {
    return std::make_unique<ShardTokens>(files, text_bytes, vocab);
  } catch (const data::DataError& e) {
    throw ConfigError(key_is(folder) + ": " + e.what());
  }
}

// A folder of token files without dataset.json, as llm.c (fineweb_train_000001.bin, with its
// header) and nanoGPT (train.bin, val.bin: raw uint16) write them: the files whose names say
// "train" and "val". The bytes of text are unknown: no bits per byte.
std::pair<std::vector<std::string>, std::vector<std::string>> splits_by_name(
    const std::string& folder) {
  std::vector<std::string> train, validation;
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !name.ends_with(".bin")) continue;
    (name.find("val") != std::string::npos ? validation : train).push_back(entry.path().string());
  }
  std::erase_if(train, [](const std::string& f) {
    return fs::path(f).filename().string().find("train") == std::string::npos;
  });
  if (train.empty()) {
    throw ConfigError(key_is(folder) +
                      " has neither dataset.json nor token files named *train*.bin: give a text "
                      "file, a folder weft-data tokenize wrote, or llm.c's or nanoGPT's shards");
  }
  std::sort(train.begin(), train.end());
  std::sort(validation.begin(), validation.end());
  return {train, validation};
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
  if (fs::is_directory(status) && fs::exists(fs::path(path) / "dataset.json")) {
    const nlohmann::json index = read_index((fs::path(path) / "dataset.json").string());
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
      return shard_split(path, files, index[name].value("text_bytes", std::int64_t{0}), vocab_size);
    };
    train_ = split("train");
    validation_ = split("validation");
    description_ = path + ": token shards, " + std::to_string(train_->size()) + " train and " +
                   std::to_string(validation_->size()) + " validation tokens";
  } else if (fs::is_directory(status)) {
    const auto [train, validation] = splits_by_name(path);
    train_ = shard_split(path, train, 0, vocab_size);
    validation_ = shard_split(path, validation, 0, vocab_size);
    description_ = path + ": token files, " + std::to_string(train_->size()) + " train and " +
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
  Batch b = at(rank);
  skip(ranks);
  return b;
}

Batch DataLoader::at(std::int64_t slot) const {
  Batch b{batch_, seq_len_, {}, {}};
  b.tokens.resize(static_cast<std::size_t>(batch_ * seq_len_));
  b.targets.resize(b.tokens.size());
  const PhiloxKey key = philox_key(seed_, name_);
  const auto starts = static_cast<double>(tokens_.size() - seq_len_);
  std::vector<std::int32_t> window(static_cast<std::size_t>(seq_len_ + 1));
  for (std::int64_t i = 0; i < batch_; ++i) {
    const auto sample = static_cast<std::uint64_t>(samples_ + slot * batch_ + i);
    const auto start = static_cast<std::int64_t>(philox_uniform(key, sample) * starts);
    tokens_.read(start, seq_len_ + 1, window.data());
    std::copy(window.begin(), window.end() - 1, b.tokens.begin() + i * seq_len_);
    std::copy(window.begin() + 1, window.end(), b.targets.begin() + i * seq_len_);
  }
  return b;
}

}  // namespace weft::train
