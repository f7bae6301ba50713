// Cuts one worker stream's bytes into whole lines and prefixes each with "[rank] ", so
// that lines from different workers can be written to one stream without tearing.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace weft::launch::internal {

// A line longer than this is cut: the launcher's memory per stream stays bounded.
inline constexpr std::size_t kMaxLineBytes = 64 * 1024;

class LinePrefixer {
 public:
  explicit LinePrefixer(std::string prefix, std::size_t max_line = kMaxLineBytes)
      : prefix_(std::move(prefix)), max_line_(max_line) {}

  // Takes the next bytes of the stream; returns the lines they complete, each prefixed
  // and ending in '\n' (empty if none). An unterminated line reaching max_line bytes is
  // returned in max_line pieces, each given its own prefix and '\n'.
  std::string feed(std::string_view data);
  // The unterminated rest of the stream, prefixed and given a '\n'; empty if none.
  std::string finish();

 private:
  void emit(std::string& out, std::string_view line) const;

  std::string prefix_;
  std::size_t max_line_;
  std::string partial_;  // bytes of the line not yet complete
};

}  // namespace weft::launch::internal
