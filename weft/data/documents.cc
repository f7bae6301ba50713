#include "weft/data/documents.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "weft/data/internal/byte_stream.h"

namespace weft::data {

namespace fs = std::filesystem;
using internal::ByteStream;
using internal::LineReader;

namespace {

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

bool is_jsonl(const std::string& path) {
  for (const char* end : {".jsonl", ".jsonl.gz", ".jsonl.zst", ".json.gz", ".json.zst"}) {
    if (ends_with(path, end)) return true;
  }
  return false;
}

bool hidden(const fs::path& p) { return p.filename().string().starts_with("."); }

}  // namespace

std::vector<std::string> expand_inputs(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code ec;
    const auto status = fs::status(path, ec);
    if (ec || !fs::exists(status)) throw DataError("the input " + path + " does not exist");
    if (fs::is_regular_file(status)) {
      files.push_back(path);
    } else if (fs::is_directory(status)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::end(it);
           it.increment(ec)) {
        if (hidden(it->path())) {
          if (it->is_directory()) it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file()) found.push_back(it->path().string());
      }
      if (ec) throw DataError("listing the folder " + path + " failed: " + ec.message());
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      throw DataError("the input " + path +
                      " is not a regular file or a folder (a device, a pipe or a socket): give "
                      "text, JSONL or token files");
    }
  }
  return files;
}

class DocumentReader::Source {
 public:
  virtual ~Source() = default;
  virtual bool next(std::string& text) = 0;
  virtual std::int64_t consumed() const = 0;
};

namespace {

// A text file: one document, or pieces of about kMaxTextDocument cut after a newline that a
// non-space byte follows (where byte-level BPE's patterns start a new piece anyway).
class TextSource final : public DocumentReader::Source {
 public:
  explicit TextSource(const std::string& path) : stream_(internal::open_byte_stream(path)) {}
  bool next(std::string& text) override {
    while (!done_ && pending_.size() <= kMaxTextDocument) {
      const std::size_t had = pending_.size();
      pending_.resize(had + (1 << 20));
      const std::size_t got = stream_->read(pending_.data() + had, 1 << 20);
      pending_.resize(had + got);
      done_ = got == 0;
    }
    if (pending_.empty()) return false;
    std::size_t cut = pending_.size();
    if (pending_.size() > kMaxTextDocument) {  // then pending_[cut] exists below
      cut = kMaxTextDocument;
      while (cut > 1 && !(pending_[cut - 1] == '\n' &&
                          !std::isspace(static_cast<unsigned char>(pending_[cut])))) {
        --cut;
      }
      if (cut <= 1) cut = kMaxTextDocument;  // no such newline
    }
    text.assign(pending_, 0, cut);
    pending_.erase(0, cut);
    return true;
  }
  std::int64_t consumed() const override { return stream_->consumed(); }

 private:
  std::unique_ptr<ByteStream> stream_;
  std::string pending_;
  bool done_ = false;
};

class JsonlSource final : public DocumentReader::Source {
 public:
  JsonlSource(const std::string& path, std::string field)
      : path_(path),
        field_(std::move(field)),
        lines_(internal::open_byte_stream(path), path, std::size_t{1} << 30) {}
  bool next(std::string& text) override {
    std::string line;
    while (lines_.next(line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw DataError(where() + ": not JSON (" + e.what() + ")");
      }
      if (!j.is_object() || !j.contains(field_) || !j[field_].is_string()) {
        throw DataError(where() + ": no \"" + field_ + "\" string field in " + line.substr(0, 80) +
                        (line.size() > 80 ? "..." : ""));
      }
      text = j[field_].get<std::string>();
      return true;
    }
    return false;
  }
  std::int64_t consumed() const override { return lines_.stream().consumed(); }

 private:
  std::string where() const { return path_ + ", line " + std::to_string(lines_.line_number()); }
  std::string path_, field_;
  LineReader lines_;
};

}  // namespace

DocumentReader::DocumentReader(std::vector<std::string> files, std::string text_field)
    : files_(std::move(files)), field_(std::move(text_field)) {
  for (const std::string& f : files_) {
    std::error_code ec;
    bytes_total_ += static_cast<std::int64_t>(fs::file_size(f, ec));
  }
}

DocumentReader::~DocumentReader() = default;

bool DocumentReader::open_next_file() {
  if (source_) bytes_done_ += source_->consumed();
  source_.reset();
  if (next_file_ == files_.size()) return false;
  const std::string& path = files_[next_file_++];
  if (is_jsonl(path)) {
    source_ = std::make_unique<JsonlSource>(path, field_);
  } else {
    source_ = std::make_unique<TextSource>(path);
  }
  return true;
}

bool DocumentReader::next(std::string& text) {
  while (source_ == nullptr || !source_->next(text)) {
    if (!open_next_file()) return false;
  }
  return true;
}

std::int64_t DocumentReader::bytes_consumed() const {
  return bytes_done_ + (source_ ? source_->consumed() : 0);
}

}  // namespace weft::data
