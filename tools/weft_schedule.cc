// weft-schedule: a pipeline schedule as weft-train would run it, printed as a timeline of its
// simulation (text), with each rank's idle share, and drawn as a picture (SVG).
//
//   weft-schedule --schedule 1F1B --ranks 4 --microbatches 8 --svg 1f1b.svg
//   weft-schedule --csv schedule.csv --backward-input 1.5      (costs in units of a forward)
//
// Exit codes: 0 printed (and wrote the picture); 2 bad arguments or an invalid schedule, with
// the validator's message naming the first bad action.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "weft/base/error.h"
#include "weft/parallel/pipeline_picture.h"
#include "weft/parallel/pipeline_schedule.h"

namespace {

using weft::parallel::Schedule;

Schedule read_or_make(const std::string& csv, const std::string& name, int ranks,
                      int stages_per_rank, int microbatches) {
  if (!csv.empty()) {
    std::ifstream in(csv, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in) throw weft::InvalidArgument("cannot read " + csv);
    return weft::parallel::read_schedule_csv(text.str());
  }
  const auto kind = weft::parallel::parse_schedule_kind(name);
  if (stages_per_rank == 0) {
    const bool single =
        kind == weft::parallel::ScheduleKind::kGPipe || kind == weft::parallel::ScheduleKind::k1F1B;
    stages_per_rank = single ? 1 : 2;
  }
  return weft::parallel::make_schedule(kind, ranks, stages_per_rank, microbatches);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("weft-schedule: a pipeline schedule's simulated timeline, as text and SVG",
               "weft-schedule");
  std::string name = "1F1B", csv, svg;
  int ranks = 2, stages_per_rank = 0, microbatches = 8;
  weft::parallel::ActionCosts costs;
  double full_backward = 0;
  app.option_defaults()->always_capture_default();
  app.add_option("--schedule", name,
                 "GPipe, 1F1B, Interleaved1F1B, InterleavedZeroBubble or ZBVZeroBubble");
  app.add_option("--csv", csv, "a schedule in PyTorch's CSV format instead (one row per rank)");
  app.add_option("--ranks", ranks, "pipeline ranks")->check(CLI::PositiveNumber);
  app.add_option("--stages-per-rank", stages_per_rank, "0: 1 for GPipe and 1F1B, 2 for the others")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--microbatches", microbatches, "micro-batches per step")
      ->check(CLI::PositiveNumber);
  app.add_option("--forward", costs.forward, "time of an F");
  app.add_option("--backward-input", costs.backward_input, "time of an I");
  app.add_option("--backward-weight", costs.backward_weight, "time of a W");
  app.add_option("--full-backward", full_backward, "time of a B; 0: an I and a W");
  app.add_option("--svg", svg, "also draw the timeline into this file");
  CLI11_PARSE(app, argc, argv);
  try {
    const Schedule s = read_or_make(csv, name, ranks, stages_per_rank, microbatches);
    if (full_backward > 0) costs.full_backward = full_backward;
    const weft::parallel::Simulation sim = weft::parallel::simulate(s, costs);
    const std::string title = (csv.empty() ? name : csv) + ", " + std::to_string(s.ranks) +
                              " ranks, " + std::to_string(s.num_stages()) + " stages, " +
                              std::to_string(s.microbatches) + " micro-batches";
    std::printf("%s: bubble %.1f%%\n", title.c_str(), 100 * sim.bubble_fraction);
    for (int r = 0; r < s.ranks; ++r)
      std::printf("rank %d idle %.1f%%\n", r, 100 * sim.idle_fraction[static_cast<std::size_t>(r)]);
    double unit = std::min(costs.forward, std::min(costs.backward_input, costs.backward_weight));
    if (costs.full_backward) unit = std::min(unit, *costs.full_backward);
    std::cout << weft::parallel::format_timeline(s, sim, unit);
    if (!svg.empty()) {
      std::ofstream out(svg);
      out << weft::parallel::timeline_svg(s, sim, title);
      if (!out.flush()) throw weft::InvalidArgument("cannot write " + svg);
    }
  } catch (const weft::InvalidArgument& e) {
    std::fprintf(stderr, "weft-schedule: %s\n", e.what());
    return 2;
  }
  return 0;
}
