#include "weft/train/report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "weft/base/error.h"
#include "weft/checkpoint/file_io.h"

namespace weft::train {
namespace {

using nlohmann::json;

std::string fixed(double v, int decimals) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", decimals, v);
  return text;
}

// A number field of a record, or nothing when absent or null (a non-finite value).
std::optional<double> number(const json& record, const char* key, const std::string& where) {
  const auto it = record.find(key);
  if (it == record.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) throw InvalidArgument(where + ": \"" + key + "\" is not a number");
  return it->get<double>();
}

// The summary record's fields as the run's last line prints them.
std::vector<std::pair<std::string, std::string>> summary_of(const json& s,
                                                            const std::string& where) {
  std::vector<std::pair<std::string, std::string>> out;
  auto get = [&](const char* key) { return number(s, key, where); };
  if (auto first = get("first_step"), last = get("last_step"); first && last)
    out.emplace_back("steps", fixed(*first, 0) + "-" + fixed(*last, 0));
  if (auto v = get("wall_s")) out.emplace_back("wall time", fixed(*v, 1) + " s");
  if (auto v = get("tps")) out.emplace_back("tokens/s", fixed(*v, 0));
  if (auto v = get("final_loss")) out.emplace_back("final loss", fixed(*v, 4));
  if (auto v = get("best_val_loss"))
    out.emplace_back("best validation loss",
                     fixed(*v, 4) + " (step " + fixed(get("best_val_step").value_or(0), 0) + ")");
  if (auto v = get("peak_memory_bytes"))
    out.emplace_back("peak memory a rank", fixed(*v / (1 << 20), 0) + " MiB");
  if (auto v = get("communication_share"))
    out.emplace_back("time in communication", fixed(100 * *v, 1) + " %");
  return out;
}

void read_record(const json& r, const std::string& where, RunMetrics& run) {
  if (!r.is_object()) throw InvalidArgument(where + ": not a JSON object");
  if (const auto it = r.find("summary"); it != r.end()) {
    if (!it->is_object()) throw InvalidArgument(where + ": \"summary\" is not an object");
    run.summary = summary_of(*it, where);
    return;
  }
  if (const auto it = r.find("pipeline_timeline_svg"); it != r.end()) {
    if (!it->is_string() || it->get<std::string>().rfind("<svg", 0) != 0)
      throw InvalidArgument(where + ": \"pipeline_timeline_svg\" is not an SVG document");
    run.pipeline_svg = it->get<std::string>();
    return;
  }
  if (const auto it = r.find("config"); it != r.end()) {
    if (!it->is_string()) throw InvalidArgument(where + ": \"config\" is not a string");
    run.config_toml = it->get<std::string>();
    return;
  }
  const auto step = number(r, "step", where);
  if (!step) return;  // a record of a kind this reader does not know
  if (*step < 0 || *step != std::floor(*step))
    throw InvalidArgument(where + ": \"step\" is not a step number");
  const auto s = static_cast<std::int64_t>(*step);
  auto put = [&](const char* key, std::map<std::int64_t, double>& into, double scale) {
    if (const auto v = number(r, key, where); v && std::isfinite(*v)) into[s] = *v * scale;
  };
  put("loss", run.loss, 1);
  put("val_loss", run.validation_loss, 1);
  put("tps", run.tokens_per_second, 1);
  put("mfu", run.mfu, 100);
  put("memory_bytes", run.memory_mib, 1.0 / (1 << 20));
  put("comm_share", run.communication_percent, 100);
  if (const auto it = r.find("rank_memory_bytes"); it != r.end()) {
    if (!it->is_array()) throw InvalidArgument(where + ": \"rank_memory_bytes\" is not a list");
    if (it->size() > 4096) throw InvalidArgument(where + ": more than 4096 ranks' memory");
    if (run.rank_memory_mib.size() < it->size()) run.rank_memory_mib.resize(it->size());
    for (std::size_t rank = 0; rank < it->size(); ++rank) {
      if (!(*it)[rank].is_number())
        throw InvalidArgument(where + ": \"rank_memory_bytes\" holds a non-number");
      run.rank_memory_mib[rank][s] = (*it)[rank].get<double>() / (1 << 20);
    }
  }
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Colours a series each, in the legend's order (Tableau's ten).
const char* colour(std::size_t i) {
  static const char* palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                  "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  return palette[i % 10];
}

// The distance between ticks: about `count` of them over [lo, hi], 1, 2 or 5 times a power of
// ten apart, at least min_step (1 for steps: no tick between two steps).
double tick_step(double lo, double hi, int count, double min_step) {
  const double raw = (hi - lo) / count, power = std::pow(10, std::floor(std::log10(raw)));
  const double step = raw / power < 1.5 ? power : raw / power < 3.5 ? 2 * power : 5 * power;
  return std::max(step, min_step);
}

std::vector<double> ticks(double lo, double hi, double step) {
  std::vector<double> out;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push_back(v);
  return out;
}

// v with as many decimals as ticks `step` apart need to differ (thousands as "k" from 10,000).
std::string tick_label(double v, double step) {
  const auto decimals = [](double unit) {
    return std::clamp(static_cast<int>(-std::floor(std::log10(unit) + 1e-9)), 0, 6);
  };
  if (std::abs(v) >= 10000) return fixed(v / 1000, decimals(step / 1000)) + "k";
  return fixed(v, decimals(step));
}

// One legend entry at x on the title's line; where the next one goes.
double legend(std::string& svg, double x, const std::string& name, const char* colour) {
  svg += "<rect x=\"" + fixed(x, 0) + "\" y=\"16\" width=\"14\" height=\"3\" fill=\"" + colour +
         "\"/><text x=\"" + fixed(x + 18, 0) + "\" y=\"21\">" + escape(name) + "</text>\n";
  return x + 18 + 7 * double(name.size()) + 16;
}

}  // namespace

RunMetrics read_metrics(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw SystemError("open metrics file " + path, errno);
  RunMetrics run;
  run.name = std::filesystem::path(path).stem().string();
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(n);
    json record;
    try {
      record = json::parse(line);
    } catch (const json::exception& e) {
      throw InvalidArgument(where + ": not JSON (" + e.what() + "); is it weft-train's " +
                            "metrics.jsonl_path file?");
    }
    read_record(record, where, run);
  }
  return run;
}

std::vector<Chart> charts_of(const std::vector<RunMetrics>& runs) {
  struct Kind {
    const char* file;
    const char* title;
    const char* y_label;
    std::map<std::int64_t, double> RunMetrics::*points;
  };
  static const Kind kinds[] = {
      {"loss.svg", "Training loss", "loss", &RunMetrics::loss},
      {"validation.svg", "Validation loss", "loss", &RunMetrics::validation_loss},
      {"throughput.svg", "Throughput", "tokens/s", &RunMetrics::tokens_per_second},
      {"mfu.svg", "Model FLOPs utilisation", "%", &RunMetrics::mfu},
      {"memory.svg", "Peak memory of the largest rank", "MiB", &RunMetrics::memory_mib},
  };
  std::vector<Chart> charts;
  for (const Kind& k : kinds) {
    Chart c{k.file, k.title, k.y_label, {}};
    for (const RunMetrics& r : runs)
      if (!(r.*k.points).empty()) c.series.emplace_back(r.name, &(r.*k.points));
    if (!c.series.empty()) charts.push_back(std::move(c));
  }
  Chart ranks{"memory_ranks.svg", "Peak memory per rank", "MiB", {}};
  for (const RunMetrics& r : runs) {
    for (std::size_t rank = 0; rank < r.rank_memory_mib.size(); ++rank) {
      const std::string name =
          (runs.size() > 1 ? r.name + " " : "") + "rank " + std::to_string(rank);
      ranks.series.emplace_back(name, &r.rank_memory_mib[rank]);
    }
  }
  if (!ranks.series.empty()) charts.push_back(std::move(ranks));
  Chart comm{"communication.svg", "Step time blocked in communication (rank 0)", "%", {}};
  for (const RunMetrics& r : runs)
    if (!r.communication_percent.empty())
      comm.series.emplace_back(r.name, &r.communication_percent);
  if (!comm.series.empty()) charts.push_back(std::move(comm));
  return charts;
}

std::string render_svg(const Chart& chart) {
  constexpr double kWidth = 720, kHeight = 320, kLeft = 70, kRight = 20, kTop = 40, kBottom = 50;
  double x_lo = 1e300, x_hi = -1e300, y_lo = 1e300, y_hi = -1e300;
  for (const auto& [name, points] : chart.series) {
    for (const auto& [step, v] : *points) {
      x_lo = std::min(x_lo, double(step)), x_hi = std::max(x_hi, double(step));
      y_lo = std::min(y_lo, v), y_hi = std::max(y_hi, v);
    }
  }
  if (x_hi <= x_lo) x_lo -= 1, x_hi += 1;
  const double pad = y_hi > y_lo ? (y_hi - y_lo) * 0.05 : std::max(1e-3, std::abs(y_hi) * 0.05);
  y_lo -= pad, y_hi += pad;
  auto x_at = [&](double x) {
    return kLeft + (x - x_lo) / (x_hi - x_lo) * (kWidth - kLeft - kRight);
  };
  auto y_at = [&](double y) {
    return kHeight - kBottom - (y - y_lo) / (y_hi - y_lo) * (kHeight - kTop - kBottom);
  };
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fixed(kWidth, 0) +
                  "\" height=\"" + fixed(kHeight, 0) + "\" viewBox=\"0 0 " + fixed(kWidth, 0) +
                  " " + fixed(kHeight, 0) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + fixed(kLeft, 0) + "\" y=\"22\" font-size=\"15\" font-weight=\"bold\">" +
       escape(chart.title) + "</text>\n";
  const double y_step = tick_step(y_lo, y_hi, 5, 0), x_step = tick_step(x_lo, x_hi, 6, 1);
  for (double t : ticks(y_lo, y_hi, y_step)) {
    const std::string y = fixed(y_at(t), 1);
    s += "<line x1=\"" + fixed(kLeft, 0) + "\" x2=\"" + fixed(kWidth - kRight, 0) + "\" y1=\"" + y +
         "\" y2=\"" + y + "\" stroke=\"#ddd\"/><text x=\"" + fixed(kLeft - 6, 0) + "\" y=\"" + y +
         "\" dy=\"4\" text-anchor=\"end\">" + tick_label(t, y_step) + "</text>\n";
  }
  for (double t : ticks(x_lo, x_hi, x_step)) {
    const std::string x = fixed(x_at(t), 1);
    s += "<line x1=\"" + x + "\" x2=\"" + x + "\" y1=\"" + fixed(kHeight - kBottom, 0) +
         "\" y2=\"" + fixed(kHeight - kBottom + 5, 0) + "\" stroke=\"#555\"/><text x=\"" + x +
         "\" y=\"" + fixed(kHeight - kBottom + 18, 0) + "\" text-anchor=\"middle\">" +
         tick_label(t, x_step) + "</text>\n";
  }
  s += "<text x=\"" + fixed((kLeft + kWidth - kRight) / 2, 0) + "\" y=\"" + fixed(kHeight - 12, 0) +
       "\" text-anchor=\"middle\">step</text>\n<text transform=\"translate(16," +
       fixed((kTop + kHeight - kBottom) / 2, 0) + ") rotate(-90)\" text-anchor=\"middle\">" +
       escape(chart.y_label) + "</text>\n";
  double legend_x = kLeft + 8 * double(chart.title.size()) + 30;  // after the title
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const auto& [name, points] = chart.series[i];
    std::string xy;
    for (const auto& [step, v] : *points) {
      if (!xy.empty()) xy += ' ';
      xy += fixed(x_at(double(step)), 1);
      xy += ',';
      xy += fixed(y_at(v), 1);
    }
    s += "<polyline class=\"series\" data-run=\"" + escape(name) + "\" data-points=\"" +
         std::to_string(points->size()) + "\" fill=\"none\" stroke=\"" + colour(i) +
         "\" stroke-width=\"2\" points=\"" + xy + "\"/>\n";
    if (points->size() <= 30) {  // few points (validation): marked, or one would not show
      for (const auto& [step, v] : *points)
        s += "<circle cx=\"" + fixed(x_at(double(step)), 1) + "\" cy=\"" + fixed(y_at(v), 1) +
             "\" r=\"3\" fill=\"" + colour(i) + "\"/>\n";
    }
    legend_x = legend(s, legend_x, name, colour(i));
  }
  return s + "</svg>\n";
}

namespace {

// Where run i's pipeline timeline goes beside the page.
std::string pipeline_file(const std::vector<RunMetrics>& runs, std::size_t i) {
  return runs.size() == 1 ? "pipeline.svg" : "pipeline-" + std::to_string(i + 1) + ".svg";
}

// RFC 4648 base64, for a data: URI.
std::string base64(const std::string& bytes) {
  static constexpr char kDigits[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 3; ++k)
      v = (v << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k) out += k <= n ? kDigits[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

}  // namespace

std::string render_html(const std::vector<RunMetrics>& runs) {
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>weft run "
      "report</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:800px}"
      "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;"
      "text-align:left}pre{background:#f6f6f6;padding:8px;overflow:auto}</style></head>\n"
      "<body><h1>weft run report</h1>\n";
  std::vector<std::string> keys;
  for (const RunMetrics& r : runs)
    for (const auto& [k, v] : r.summary)
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  h += "<table id=\"summary\"><tr><th>run</th>";
  for (const std::string& k : keys) h += "<th>" + escape(k) + "</th>";
  h += "</tr>\n";
  for (const RunMetrics& r : runs) {
    h += "<tr><td>" + escape(r.name) + "</td>";
    for (const std::string& k : keys) {
      const auto it = std::find_if(r.summary.begin(), r.summary.end(),
                                   [&](const auto& kv) { return kv.first == k; });
      h += "<td>" + (it == r.summary.end() ? std::string("-") : escape(it->second)) + "</td>";
    }
    h += "</tr>\n";
  }
  h += "</table>\n";
  for (const Chart& c : charts_of(runs))
    h += "<figure id=\"" + c.file.substr(0, c.file.size() - 4) + "\">" + render_svg(c) +
         "</figure>\n";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].pipeline_svg.empty()) continue;
    h += "<figure id=\"" + pipeline_file(runs, i).substr(0, pipeline_file(runs, i).size() - 4) +
         "\"><figcaption>pipeline timeline of " + escape(runs[i].name) +
         " (its last step, as it ran)</figcaption><img style=\"max-width:100%\" alt=\"pipeline "
         "timeline\" src=\"data:image/svg+xml;base64," +
         base64(runs[i].pipeline_svg) + "\"></figure>\n";
  }
  for (const RunMetrics& r : runs) {
    if (r.config_toml.empty()) continue;
    h += "<details><summary>config of " + escape(r.name) + "</summary><pre>" +
         escape(r.config_toml) + "</pre></details>\n";
  }
  return h + "</body></html>\n";
}

std::string write_report(const std::vector<RunMetrics>& runs, const std::string& folder) {
  checkpoint::make_directories(folder);
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = (std::filesystem::path(folder) / name).string();
    checkpoint::write_text_file(path, text);
    return path;
  };
  for (const Chart& c : charts_of(runs)) write(c.file, render_svg(c));
  for (std::size_t i = 0; i < runs.size(); ++i)
    if (!runs[i].pipeline_svg.empty()) write(pipeline_file(runs, i), runs[i].pipeline_svg);
  return write("index.html", render_html(runs));
}

}  // namespace weft::train
