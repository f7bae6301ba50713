#include "weft/train/metrics.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numbers>
#include <vector>

#include "weft/base/error.h"
#include "weft/estimate/machine.h"

namespace weft::train {
namespace {

std::string with_commas(double value) {
  const std::string digits = std::to_string(static_cast<long long>(value + 0.5));
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string clock(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  char text[32];
  std::snprintf(text, sizeof(text), "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return text;
}

}  // namespace

double measure_peak_gflops(DType dtype) {
  // About half a second: enough for the clock to ramp up and for a representative best.
  return estimate::measure_product_gflops(dtype, std::chrono::milliseconds(500));
}

MetricsLogger::MetricsLogger(std::ostream& out, Progress progress, const std::string& jsonl_path,
                             std::int64_t total_steps)
    : out_(out), progress_(progress), total_steps_(total_steps) {
  if (!jsonl_path.empty()) {
    const auto folder = std::filesystem::path(jsonl_path).parent_path();
    std::error_code error;
    if (!folder.empty()) std::filesystem::create_directories(folder, error);
    jsonl_.open(jsonl_path, std::ios::app);
    if (!jsonl_) throw SystemError("open metrics file " + jsonl_path, errno);
  }
}

void MetricsLogger::log_config(const std::string& toml) {
  if (jsonl_.is_open()) jsonl_ << nlohmann::json{{"config", toml}}.dump() << std::endl;
}

void MetricsLogger::clear_bar() {
  if (bar_shown_) out_ << "\r\033[K";
  bar_shown_ = false;
}

void MetricsLogger::log_step(const StepMetrics& m) {
  clear_bar();
  last_tokens_per_second_ = m.tokens_per_second;
  char line[256];
  std::snprintf(
      line, sizeof(line),
      "step: %lld  loss: %.4f  grad_norm: %.4f  lr: %.2e  tps: %s  mfu: %.1f%%  memory: %.0f MiB",
      static_cast<long long>(m.step), m.loss, m.grad_norm, m.lr,
      with_commas(m.tokens_per_second).c_str(), 100.0 * m.mfu,
      static_cast<double>(m.memory_bytes) / (1 << 20));
  out_ << line << std::endl;
  if (jsonl_.is_open()) {
    nlohmann::json record{{"step", m.step},
                          {"loss", m.loss},
                          {"grad_norm", m.grad_norm},
                          {"lr", m.lr},
                          {"tps", m.tokens_per_second},
                          {"mfu", m.mfu},
                          {"memory_bytes", m.memory_bytes},
                          {"time_s", m.seconds}};
    if (!m.rank_memory_bytes.empty()) record["rank_memory_bytes"] = m.rank_memory_bytes;
    if (m.communication_share) record["comm_share"] = *m.communication_share;
    jsonl_ << record.dump() << std::endl;
  }
}

void MetricsLogger::log_validation(std::int64_t step, double loss, double bytes_per_token) {
  clear_bar();
  char line[128];
  std::snprintf(line, sizeof(line), "step: %lld  validation loss: %.4f",
                static_cast<long long>(step), loss);
  nlohmann::json record{{"step", step}, {"val_loss", loss}};
  std::string text = line;
  if (bytes_per_token > 0) {  // unknown for token files made elsewhere
    const double bpb = loss / std::numbers::ln2 / bytes_per_token;
    std::snprintf(line, sizeof(line), "  bpb: %.4f", bpb);
    text += line;
    record["val_bpb"] = bpb;
  }
  out_ << text << std::endl;
  if (jsonl_.is_open()) jsonl_ << record.dump() << std::endl;
}

void MetricsLogger::log_line(const std::string& line) {
  clear_bar();
  out_ << line << std::endl;
}

void MetricsLogger::progress(std::int64_t steps_done, double seconds_per_step, double loss) {
  const double eta = seconds_per_step * static_cast<double>(total_steps_ - steps_done);
  if (progress_ == Progress::kRelay) {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_record_ && steps_done < total_steps_) return;
    next_record_ = now + std::chrono::milliseconds(250);
    char record[160];
    std::snprintf(record, sizeof(record), "\x1eweft-progress %lld %lld %.1f %.0f %.4f",
                  static_cast<long long>(steps_done), static_cast<long long>(total_steps_), eta,
                  last_tokens_per_second_, loss);
    out_ << record << std::endl;
    return;
  }
  if (progress_ != Progress::kBar) return;
  constexpr int kWidth = 30;
  const double done = static_cast<double>(steps_done) / static_cast<double>(total_steps_);
  const int filled = static_cast<int>(done * kWidth);
  std::string bar(static_cast<std::size_t>(filled), '=');
  if (filled < kWidth) bar += '>';
  bar.resize(kWidth, ' ');
  out_ << "\r\033[K[" << bar << "] " << steps_done << "/" << total_steps_ << "  ETA " << clock(eta)
       << std::flush;
  bar_shown_ = true;
}

void MetricsLogger::log_pipeline_timeline(const std::string& svg) {
  if (jsonl_.is_open())
    jsonl_ << nlohmann::json{{"pipeline_timeline_svg", svg}}.dump() << std::endl;
}

void MetricsLogger::log_summary(const RunSummary& s) {
  clear_bar();
  char text[160];
  std::snprintf(text, sizeof(text), "done: steps %lld-%lld in %s, %s tokens/s; final loss %.4f",
                static_cast<long long>(s.first_step), static_cast<long long>(s.last_step),
                clock(s.wall_seconds).c_str(), with_commas(s.tokens_per_second).c_str(),
                s.final_loss);
  std::string line = text;
  nlohmann::json record{{"first_step", s.first_step}, {"last_step", s.last_step},
                        {"wall_s", s.wall_seconds},   {"tps", s.tokens_per_second},
                        {"final_loss", s.final_loss}, {"peak_memory_bytes", s.peak_memory_bytes}};
  if (s.best_validation) {
    std::snprintf(text, sizeof(text), ", best validation loss %.4f at step %lld",
                  *s.best_validation, static_cast<long long>(s.best_validation_step));
    line += text;
    record["best_val_loss"] = *s.best_validation;
    record["best_val_step"] = s.best_validation_step;
  }
  std::snprintf(text, sizeof(text), "; peak memory %.0f MiB a rank",
                static_cast<double>(s.peak_memory_bytes) / (1 << 20));
  line += text;
  if (s.communication_share) {
    std::snprintf(text, sizeof(text), "; %.1f%% of the steps' time in communication",
                  100 * *s.communication_share);
    line += text;
    record["communication_share"] = *s.communication_share;
  }
  out_ << line << std::endl;
  if (jsonl_.is_open()) jsonl_ << nlohmann::json{{"summary", record}}.dump() << std::endl;
}

void MetricsLogger::finish() { clear_bar(); }

}  // namespace weft::train
