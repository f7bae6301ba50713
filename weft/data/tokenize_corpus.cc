#include "weft/data/tokenize_corpus.h"

#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "weft/data/documents.h"
#include "weft/data/token_shards.h"
#include "weft/data/tokenizer.h"
#include "weft/exec/process_pool.h"

namespace weft::data {

namespace fs = std::filesystem;

namespace {

// Runs in a worker process (or this one): the tokenizer is loaded once per process.
std::vector<std::int32_t> encode_documents(std::string spec, std::string encoding,
                                           std::vector<std::string> documents) {
  static std::string loaded;
  static std::unique_ptr<Tokenizer> tok;
  if (!tok || loaded != spec + '\n' + encoding) {
    tok = load_tokenizer(spec, encoding);
    loaded = spec + '\n' + encoding;
  }
  std::vector<std::int32_t> ids;
  for (const std::string& doc : documents) {
    if (auto bos = tok->bos_id()) ids.push_back(*bos);
    tok->encode(doc, ids);
    if (auto eos = tok->eos_id()) ids.push_back(*eos);
  }
  return ids;
}

// One split's shards: <name>_000000.bin, ... of at most `shard_tokens` each.
class SplitWriter {
 public:
  SplitWriter(std::string folder, std::string name, std::int64_t shard_tokens, TokenDtype dtype)
      : folder_(std::move(folder)),
        name_(std::move(name)),
        shard_tokens_(shard_tokens),
        dtype_(dtype) {}
  void append(const std::vector<std::int32_t>& ids, std::int64_t text_bytes) {
    std::size_t at = 0;
    while (at < ids.size()) {
      if (!shard_) open();
      const auto room = static_cast<std::size_t>(shard_tokens_ - shard_->tokens());
      const std::size_t take = std::min(room, ids.size() - at);
      shard_->append(ids.data() + at, take);
      at += take;
      if (shard_->tokens() == shard_tokens_) close();
    }
    tokens_ += static_cast<std::int64_t>(ids.size());
    text_bytes_ += text_bytes;
  }
  nlohmann::json finish() {
    close();
    return {{"files", files_}, {"tokens", tokens_}, {"text_bytes", text_bytes_}};
  }

 private:
  void open() {
    char name[64];
    std::snprintf(name, sizeof(name), "%s_%06zu.bin", name_.c_str(), files_.size());
    files_.push_back(name);
    shard_ = std::make_unique<ShardWriter>((fs::path(folder_) / name).string(), dtype_);
  }
  void close() {
    if (shard_) shard_->close();
    shard_.reset();
  }
  std::string folder_, name_;
  std::int64_t shard_tokens_;
  TokenDtype dtype_;
  std::unique_ptr<ShardWriter> shard_;
  std::vector<std::string> files_;
  std::int64_t tokens_ = 0, text_bytes_ = 0;
};

struct Batch {
  bool validation = false;
  std::vector<std::string> documents;
  std::int64_t text_bytes = 0;
};

}  // namespace

TokenizeProgress tokenize_corpus(const TokenizeOptions& o,
                                 const std::function<void(const TokenizeProgress&)>& progress) {
  if (o.shard_tokens < 1) throw DataError("shard_tokens must be at least 1");
  if (!(o.validation_fraction >= 0 && o.validation_fraction < 1)) {
    throw DataError("validation_fraction must be in [0, 1)");
  }
  const auto tok = load_tokenizer(o.tokenizer, o.encoding);  // refuse a bad one before working
  DocumentReader reader(expand_inputs(o.inputs), o.text_field);
  std::error_code ec;
  fs::create_directories(o.output, ec);
  if (ec) throw SystemError("creating " + o.output, ec.value());
  const TokenDtype dtype = token_dtype_for(tok->vocab_size());
  SplitWriter train(o.output, "train", o.shard_tokens, dtype);
  SplitWriter validation(o.output, "validation", o.shard_tokens, dtype);

  std::optional<ProcessPoolExecutor> pool;
  if (o.workers > 0) pool.emplace(static_cast<std::size_t>(o.workers));
  struct InFlight {
    Batch batch;
    std::optional<Future<std::vector<std::int32_t>>> ids;
  };
  std::deque<InFlight> queue;
  TokenizeProgress p;
  p.bytes_total = reader.bytes_total();
  auto drain_one = [&] {
    InFlight f = std::move(queue.front());
    queue.pop_front();
    const std::vector<std::int32_t> ids =
        f.ids ? f.ids->get() : encode_documents(o.tokenizer, o.encoding, f.batch.documents);
    (f.batch.validation ? validation : train).append(ids, f.batch.text_bytes);
    p.tokens += static_cast<std::int64_t>(ids.size());
    p.text_bytes += f.batch.text_bytes;
    p.bytes_consumed = reader.bytes_consumed();
    if (progress) progress(p);
  };
  auto submit = [&](Batch&& b) {
    InFlight f{std::move(b), std::nullopt};
    if (pool) f.ids = pool->submit(encode_documents, o.tokenizer, o.encoding, f.batch.documents);
    queue.push_back(std::move(f));
    while (queue.size() > (pool ? 2 * static_cast<std::size_t>(o.workers) : 0)) drain_one();
  };
  Batch batches[2];  // [0] train, [1] validation
  batches[1].validation = true;
  std::string doc;
  for (std::int64_t d = 0; reader.next(doc); ++d) {
    const double f = o.validation_fraction;
    const bool to_validation =
        std::floor(static_cast<double>(d + 1) * f) > std::floor(static_cast<double>(d) * f);
    Batch& b = batches[to_validation ? 1 : 0];
    b.text_bytes += static_cast<std::int64_t>(doc.size());
    b.documents.push_back(std::move(doc));
    ++p.documents;
    if (static_cast<std::size_t>(b.text_bytes) >= o.batch_bytes) {
      submit(std::exchange(b, Batch{to_validation, {}, 0}));
    }
  }
  for (Batch& b : batches) {
    if (!b.documents.empty()) submit(std::move(b));
  }
  while (!queue.empty()) drain_one();

  const nlohmann::json index = {{"format", "weft token shards 1"},
                                {"tokenizer", o.tokenizer},
                                {"tokenizer_description", tok->describe()},
                                {"encoding", o.encoding},
                                {"vocab_size", tok->vocab_size()},
                                {"dtype", dtype == TokenDtype::kUint16 ? "uint16" : "uint32"},
                                {"documents", p.documents},
                                {"train", train.finish()},
                                {"validation", validation.finish()}};
  const std::string path = (fs::path(o.output) / "dataset.json").string();
  std::ofstream(path + ".partial") << index.dump(1) << "\n";
  fs::rename(path + ".partial", path, ec);
  if (ec) throw SystemError("writing " + path, ec.value());
  return p;
}

}  // namespace weft::data
