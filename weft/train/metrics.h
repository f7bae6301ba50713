// What a training run reports: TorchTitan-style step lines, a progress bar with ETA on a
// terminal or progress records for weftrun's bar, a JSON-lines file, and the figures behind
// MFU.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "weft/base/dtype.h"

namespace weft::train {

// Model FLOPs utilisation = flops_per_token * tokens_per_second / peak. The peak is that of
// the products training runs: Linear's forward (kernels/matmul.h) in `dtype` (kFloat32 or
// kBFloat16), on the threads kernels::threads() gives, over 1024 rows per thread of 1024 x 1024
// (best of about half a second of runs), in GFLOP/s. In bfloat16 it runs on a bf16 weight that
// oneDNN packs per block, not on the float32 weight packed once a call that training's Linear
// uses: at 1024 rows a call the once-a-call packing would weigh several % on the measure, and
// the products themselves differ by a few % (docs/PERFORMANCE.md, BM_LinearBF16).
double measure_peak_gflops(DType dtype);

struct StepMetrics {
  std::int64_t step;  // 1-based, as printed
  double loss, grad_norm, lr, tokens_per_second, mfu, seconds;
  std::int64_t memory_bytes;  // the largest rank's peak
  // With several ranks: each rank's peak, and the share of this step's time rank 0 spent
  // blocked in communication (the JSON lines have them; the printed line does not).
  std::vector<std::int64_t> rank_memory_bytes = {};
  std::optional<double> communication_share = std::nullopt;
};

// What a run's last line says: the steps it trained, their wall time and throughput, the last
// loss, the best validation loss, the largest rank's peak memory and the share of the
// training steps' time ranks spent blocked in communication.
struct RunSummary {
  std::int64_t first_step = 0, last_step = 0;  // 1-based, as printed
  double wall_seconds = 0, tokens_per_second = 0, final_loss = 0;
  std::optional<double> best_validation;
  std::int64_t best_validation_step = 0;
  std::int64_t peak_memory_bytes = 0;
  std::optional<double> communication_share;  // none in one process
};

// Where a run's progress goes between its step lines: nowhere; a bar on this process's
// terminal; or records among the lines for weftrun to show ("\x1eweft-progress STEP TOTAL
// ETA_SECONDS TOKENS_PER_SECOND LOSS", weft/launch/internal/progress_line.h).
enum class Progress { kNone, kBar, kRelay };

class MetricsLogger {
 public:
  // Opens `jsonl_path` (if not empty) for appending, making its folder if missing.
  MetricsLogger(std::ostream& out, Progress progress, const std::string& jsonl_path,
                std::int64_t total_steps);
  // The run's config (to_toml) as a {"config": "..."} record in the JSON lines (weft-report
  // shows it); nothing on the terminal.
  void log_config(const std::string& toml);
  void log_step(const StepMetrics& m);
  // The loss (nats per token) and bits per byte of text, which runs with different tokenizers
  // compare by: loss / ln 2 / bytes_per_token (left out when bytes_per_token is 0: unknown).
  void log_validation(std::int64_t step, double loss, double bytes_per_token);
  void log_line(const std::string& line);  // a message between steps
  // After each step: the bar, or a record (at most a few a second, and the last step's).
  void progress(std::int64_t steps_done, double seconds_per_step, double loss);
  // "done: steps 1-300 in 0:06:12, ...", and a {"summary": {...}} record in the JSON lines.
  void log_summary(const RunSummary& s);
  // The latest step's pipeline timeline (an SVG document), for weft-report: the JSON lines only.
  void log_pipeline_timeline(const std::string& svg);
  void finish();

 private:
  void clear_bar();

  std::ostream& out_;
  Progress progress_;
  double last_tokens_per_second_ = 0;                    // the last step line's
  std::chrono::steady_clock::time_point next_record_{};  // kRelay: the next record's time
  std::ofstream jsonl_;
  std::int64_t total_steps_;
  bool bar_shown_ = false;
};

}  // namespace weft::train
