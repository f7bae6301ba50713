// The job's progress as rank 0's trainer reports it: weftrun tells its workers to report
// (WEFT_PROGRESS_RELAY=1), and weft-train's rank 0 then writes records among its output
// lines, "\x1eweft-progress STEP TOTAL ETA_SECONDS TOKENS_PER_SECOND LOSS", a few a second.
// weftrun takes them out of what it relays and shows the newest: as a bar on the last line of
// its terminal (stderr), kept below the workers' lines, or, where stderr is not a terminal, as
// a plain line at most once a minute. Nothing writes control codes into a file or pipe.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace weft::launch::internal {

// What the record a trainer writes starts with.
inline constexpr std::string_view kProgressRecord = "\x1eweft-progress ";

class ProgressLine {
 public:
  // Draws on `fd`; `terminal`: a bar, else plain lines.
  ProgressLine(int fd, bool terminal);

  // Takes the progress records out of `text` (lines a worker wrote to its stdout, as
  // weftrun prefixed them) and returns the rest.
  std::string take_records(std::string text);
  // Before other output reaches the terminal: the bar goes, so that lines never mix with it.
  void clear();
  // After it: the bar again, or a plain line when one is due.
  void show();

 private:
  struct Record {
    long long step = 0, total = 0;
    double eta_seconds = 0, tokens_per_second = 0, loss = 0;
  };
  std::string text() const;

  int fd_;
  bool terminal_;
  std::optional<Record> newest_;
  bool shown_ = false;    // a bar is on the terminal
  bool changed_ = false;  // a record came since it was last shown
  std::chrono::steady_clock::time_point next_plain_;
};

}  // namespace weft::launch::internal
