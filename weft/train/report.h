// weft-report's reading and drawing: the metrics weft-train writes (metrics.jsonl_path, one
// JSON record a line) as a self-contained HTML page of SVG charts, several runs overlaid.
//
//   auto runs = {read_metrics("a.jsonl"), read_metrics("b.jsonl")};
//   write_report(runs, "report");   // report/index.html, report/loss.svg, ...
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace weft::train {

// One run's records by step (a step logged twice, as a resumed run appends, keeps its last
// value); the summary's and the config's as weft-train wrote them.
struct RunMetrics {
  std::string name;  // the label in the legends: the file's name without .jsonl
  std::map<std::int64_t, double> loss, validation_loss, tokens_per_second, mfu, memory_mib;
  std::vector<std::map<std::int64_t, double>> rank_memory_mib;  // by rank, with several ranks
  std::map<std::int64_t, double> communication_percent;         // rank 0's share of a step
  std::vector<std::pair<std::string, std::string>> summary;     // key, value as printed
  std::string config_toml;                                      // empty when not recorded
  std::string pipeline_svg;  // the latest step's pipeline timeline as it ran; empty: none
};

// Reads a metrics file. Records it does not know are skipped (a newer weft's); a line that is
// not JSON, or a known field of the wrong type, throws weft::InvalidArgument naming the file
// and line; an unreadable file throws weft::SystemError.
RunMetrics read_metrics(const std::string& path);

struct Chart {
  std::string file;  // "loss.svg"
  std::string title, y_label;
  // One series a run: (run name, points by step).
  std::vector<std::pair<std::string, const std::map<std::int64_t, double>*>> series;
};

// The charts a report draws for `runs`: those that have points in some run. They point into
// `runs`, which must outlive them.
std::vector<Chart> charts_of(const std::vector<RunMetrics>& runs);
// A chart as a standalone SVG document: axes with ticks, one polyline a series (its points
// also in data-points="N"), a legend.
std::string render_svg(const Chart& chart);
// The page: a summary table, every chart inline, each run's pipeline timeline (an image, so
// that nothing in a metrics file runs as part of the page), each run's config.
std::string render_html(const std::vector<RunMetrics>& runs);
// index.html and one SVG file a chart into `folder` (made if missing), and the pipeline
// timelines (pipeline.svg, or pipeline-K.svg for the K-th run of several); the page's path.
std::string write_report(const std::vector<RunMetrics>& runs, const std::string& folder);

}  // namespace weft::train
