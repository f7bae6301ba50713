// A pipeline schedule's timeline as a picture: an SVG document with one row per rank and one
// box per compute action, placed where a simulation ran it (pipeline_schedule.h's simulate).
// weft-schedule writes it; docs/PARALLELISM.md shows one per schedule.
//
//   const Schedule s = make_schedule(ScheduleKind::k1F1B, 4, 1, 8);
//   std::ofstream("1f1b.svg") << timeline_svg(s, simulate(s), "1F1B, 4 ranks, 8 micro-batches");
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "weft/parallel/pipeline_schedule.h"

namespace weft::parallel {

// Forwards blue, full backwards green, zero bubble's I orange and W purple, each labelled with
// its micro-batch (and its stage when a rank holds several); idle time is left blank. The title
// and the bubble fraction head the picture. InvalidArgument when `simulation` is not of
// `schedule`.
std::string timeline_svg(const Schedule& schedule, const Simulation& simulation,
                         std::string_view title);

// The same picture of a step as it ran: start[r][i] and end[r][i] are when
// schedule.actions[r][i] computed, in seconds on one clock. Drawn from the first start, in
// units of the mean forward (so that it compares with a simulated picture, where a forward
// costs 1), which the title gives in ms; idle shares and bubble computed as simulate() does.
std::string measured_timeline_svg(const Schedule& schedule,
                                  const std::vector<std::vector<double>>& start,
                                  const std::vector<std::vector<double>>& end,
                                  std::string_view title);

}  // namespace weft::parallel
