#include "weft/launch/internal/progress_line.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <sstream>

namespace weft::launch::internal {
namespace {

constexpr auto kPlainEvery = std::chrono::seconds(60);
constexpr int kBarWidth = 24;

void write_all(int fd, const std::string& text) {
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the terminal is gone: the job goes on without its bar
    done += static_cast<std::size_t>(n);
  }
}

std::string clock_text(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  char text[32];
  std::snprintf(text, sizeof(text), "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return text;
}

}  // namespace

ProgressLine::ProgressLine(int fd, bool terminal)
    : fd_(fd), terminal_(terminal), next_plain_(std::chrono::steady_clock::now() + kPlainEvery) {}

std::string ProgressLine::take_records(std::string text) {
  std::string rest;
  rest.reserve(text.size());
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = text.find('\n', at);
    const std::size_t next = end == std::string::npos ? text.size() : end + 1;
    const std::string_view line(text.data() + at, next - at);
    const std::size_t record = line.find(kProgressRecord);
    Record r;
    if (record != std::string_view::npos &&
        std::istringstream(std::string(line.substr(record + kProgressRecord.size()))) >> r.step >>
            r.total >> r.eta_seconds >> r.tokens_per_second >> r.loss) {
      newest_ = r;
      changed_ = true;
    } else {
      rest += line;
    }
    at = next;
  }
  return rest;
}

std::string ProgressLine::text() const {
  const Record& r = *newest_;
  char part[128];
  std::snprintf(part, sizeof(part), "%lld/%lld  ETA %s  loss %.4f", r.step, r.total,
                clock_text(r.eta_seconds).c_str(), r.loss);
  std::string tail = part;
  if (r.tokens_per_second > 0) {  // known from the first step line on
    std::snprintf(part, sizeof(part), "  %.0f tokens/s", r.tokens_per_second);
    tail += part;
  }
  if (!terminal_) return "weftrun: step " + tail + "\n";
  const double done = r.total > 0 ? static_cast<double>(r.step) / static_cast<double>(r.total) : 0;
  const int filled = static_cast<int>(done * kBarWidth);
  std::string bar(static_cast<std::size_t>(std::min(filled, kBarWidth)), '=');
  if (filled < kBarWidth) bar += '>';
  bar.resize(kBarWidth, ' ');
  return "\r\033[K[" + bar + "] " + tail;
}

void ProgressLine::clear() {
  if (!shown_) return;
  write_all(fd_, "\r\033[K");
  shown_ = false;
}

void ProgressLine::show() {
  // The last step's record comes with the run's closing lines: no bar after them.
  if (!newest_ || newest_->step >= newest_->total) return;
  if (terminal_) {
    if (shown_ && !changed_) return;
    write_all(fd_, text());
    shown_ = true;
    changed_ = false;
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!changed_ || now < next_plain_) return;
  write_all(fd_, text());
  changed_ = false;
  next_plain_ = now + kPlainEvery;
}

}  // namespace weft::launch::internal
