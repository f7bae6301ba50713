// weft-report: a run's metrics (weft-train's metrics.jsonl_path file) as a page to open or
// share: loss, validation loss, throughput, MFU and memory charts, the summary and the config;
// several files overlaid to compare runs.
//
//   weft-report out/run/metrics.jsonl                    (writes report/index.html)
//   weft-report -o cmp runs/bf16.jsonl runs/fp32.jsonl   (the two runs overlaid)
//   weft-report --png out/run/metrics.jsonl              (and a PNG of each chart: Chromium)
//
// Exit codes: 0 written; 1 a file cannot be read or is not a metrics file; 2 bad arguments.
// See docs/TRAINING.md.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "png_export.h"
#include "weft/base/error.h"
#include "weft/train/report.h"

int main(int argc, char** argv) {
  CLI::App app{"weft-report: a self-contained HTML page (and SVG charts) of weft-train runs"};
  std::vector<std::string> files;
  std::string folder = "report";
  app.add_option("files", files, "metrics files (weft-train's metrics.jsonl_path)")->required();
  app.add_option("-o,--output", folder, "folder for index.html and the SVG charts");
  bool png = false;
  app.add_flag("--png", png, "also a PNG of each chart, drawn by headless Chromium (chromium)");
  CLI11_PARSE(app, argc, argv);
  try {
    std::vector<weft::train::RunMetrics> runs;
    for (const std::string& f : files) runs.push_back(weft::train::read_metrics(f));
    const std::string page = weft::train::write_report(runs, folder);
    std::printf("report: %s (%zu run%s)\n", page.c_str(), runs.size(), runs.size() == 1 ? "" : "s");
    if (png) {
      std::vector<std::string> svgs;
      for (const auto& entry : std::filesystem::directory_iterator(folder))
        if (entry.path().extension() == ".svg") svgs.push_back(entry.path().string());
      std::printf("png: %zu figures beside the SVGs\n", weft::tools::write_pngs(svgs).size());
    }
  } catch (const weft::Error& e) {
    std::fprintf(stderr, "weft-report: %s\n", e.what());
    return 1;
  }
  return 0;
}
