#include "weft/launch/internal/line_prefixer.h"

namespace weft::launch::internal {

void LinePrefixer::emit(std::string& out, std::string_view line) const {
  out += prefix_;
  out += line;
  if (line.empty() || line.back() != '\n') out += '\n';
}

std::string LinePrefixer::feed(std::string_view data) {
  std::string out;
  while (!data.empty()) {
    const std::size_t newline = data.find('\n');
    if (newline == std::string_view::npos) {
      partial_ += data;
      break;
    }
    // Most lines arrive whole within one read: emit them without copying into partial_.
    const std::string_view line = data.substr(0, newline + 1);
    if (partial_.empty()) {
      emit(out, line);
    } else {
      partial_ += line;
      emit(out, partial_);
      partial_.clear();
    }
    data.remove_prefix(newline + 1);
  }
  std::size_t cut = 0;
  while (partial_.size() - cut >= max_line_) {
    emit(out, std::string_view(partial_).substr(cut, max_line_));
    cut += max_line_;
  }
  partial_.erase(0, cut);
  return out;
}

std::string LinePrefixer::finish() {
  std::string out;
  if (!partial_.empty()) emit(out, partial_);
  partial_.clear();
  return out;
}

}  // namespace weft::launch::internal
