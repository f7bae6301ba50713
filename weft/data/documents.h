// Documents from files, one at a time, never a whole corpus in memory:
//   - text (any file not named below): the file is one document; one larger than
//     kMaxTextDocument is cut, after a newline followed by a non-space byte, into documents
//     of about that size;
//   - JSONL (*.jsonl, *.jsonl.gz, *.jsonl.zst, also *.json.gz, *.json.zst): each line an
//     object whose `text_field` string is a document (blank lines skipped);
//   - .gz through zlib and .zst through libzstd, streamed.
// A folder stands for its regular files, recursively, in name order (hidden ones skipped).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/base/error.h"

namespace weft::data {

// Input that cannot be used: a missing or unreadable file, a corrupt .gz or .zst, a JSONL line
// that is not an object with the text field, a token file of the wrong size. what() names the
// file and the line or byte offset.
class DataError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

inline constexpr std::size_t kMaxTextDocument = 64 << 20;

// The regular files `paths` name (files, or folders expanded), in order. Throws DataError for
// a path that does not exist or is not a regular file or folder (a device such as /dev/zero).
std::vector<std::string> expand_inputs(const std::vector<std::string>& paths);

class DocumentReader {
 public:
  DocumentReader(std::vector<std::string> files, std::string text_field = "text");
  ~DocumentReader();
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;

  // The next document into `text`; false when every file is done. Throws DataError.
  bool next(std::string& text);
  // Bytes of the input files consumed so far, and in all (as stored, compressed or not).
  std::int64_t bytes_consumed() const;
  std::int64_t bytes_total() const { return bytes_total_; }

  class Source;  // one file's documents (documents.cc)

 private:
  bool open_next_file();

  std::vector<std::string> files_;
  std::string field_;
  std::size_t next_file_ = 0;
  std::unique_ptr<Source> source_;
  std::int64_t bytes_done_ = 0;  // of the files before the current one
  std::int64_t bytes_total_ = 0;
};

}  // namespace weft::data
