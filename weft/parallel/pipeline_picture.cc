#include "weft/parallel/pipeline_picture.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

#include "weft/base/error.h"

namespace weft::parallel {
namespace {

constexpr double kUnit = 28;  // pixels per unit of simulated time
constexpr double kRow = 30, kLeft = 64, kTop = 40;

const char* colour(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return "#8fb8de";
    case ActionKind::kFullBackward:
      return "#9fd49a";
    case ActionKind::kBackwardInput:
      return "#f4b183";
    default:
      return "#c3a6de";  // W
  }
}

std::string escaped(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '&') {
      out += "&amp;";
    } else {
      out += c;
    }
  }
  return out;
}

std::string box(const Schedule& schedule, const Action& a, double start, double end, int rank) {
  const double x = kLeft + start * kUnit, width = (end - start) * kUnit;
  const double y = kTop + rank * kRow;
  std::string label = std::string(kind_name(a.kind)) + std::to_string(a.microbatch);
  if (schedule.stages_per_rank > 1) label = std::to_string(a.stage) + label;
  char text[320];
  std::snprintf(text, sizeof(text),
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" "
                "stroke=\"#333\"/><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                x, y, width, kRow - 4, colour(a.kind), x + width / 2, y + kRow / 2 + 1,
                label.c_str());
  return text;
}

}  // namespace

std::string timeline_svg(const Schedule& schedule, const Simulation& simulation,
                         std::string_view title) {
  if (simulation.start.size() != schedule.actions.size())
    throw InvalidArgument("timeline_svg: the simulation is of another schedule");
  // Wide enough for the boxes and for the title (about 7 pixels a character at 13 pixels).
  const double width = std::max(kLeft + simulation.makespan * kUnit + 16,
                                8 + 7.0 * static_cast<double>(title.size() + 16));
  const double height = kTop + schedule.ranks * kRow + 8;
  char head[512];
  std::snprintf(head, sizeof(head),
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "font-family=\"sans-serif\" font-size=\"11\" dominant-baseline=\"middle\">\n"
                "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
                "<text x=\"8\" y=\"16\" font-size=\"13\">",
                width, height);
  std::string svg = head;
  char bubble[64];
  std::snprintf(bubble, sizeof(bubble), " (bubble %.1f%%)", 100 * simulation.bubble_fraction);
  svg += escaped(title) + bubble + "</text>\n";
  for (int r = 0; r < schedule.ranks; ++r) {
    char name[96];
    std::snprintf(name, sizeof(name), "<text x=\"8\" y=\"%.1f\">rank %d</text>\n",
                  kTop + r * kRow + kRow / 2 + 1, r);
    svg += name;
    const auto& actions = schedule.actions[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < actions.size(); ++i) {
      if (!is_compute(actions[i].kind)) continue;
      svg += box(schedule, actions[i], simulation.start[static_cast<std::size_t>(r)][i],
                 simulation.end[static_cast<std::size_t>(r)][i], r);
    }
  }
  return svg + "</svg>\n";
}

std::string measured_timeline_svg(const Schedule& schedule,
                                  const std::vector<std::vector<double>>& start,
                                  const std::vector<std::vector<double>>& end,
                                  std::string_view title) {
  const auto ranks = static_cast<std::size_t>(schedule.ranks);
  if (start.size() != ranks || end.size() != ranks)
    throw InvalidArgument("measured_timeline_svg: times of another schedule");
  double origin = std::numeric_limits<double>::infinity(), forwards = 0, forward_seconds = 0;
  for (std::size_t r = 0; r < ranks; ++r) {
    if (start[r].size() != schedule.actions[r].size() || end[r].size() != start[r].size())
      throw InvalidArgument("measured_timeline_svg: times of another schedule");
    for (std::size_t i = 0; i < start[r].size(); ++i) {
      origin = std::min(origin, start[r][i]);
      if (schedule.actions[r][i].kind != ActionKind::kForward) continue;
      forwards += 1;
      forward_seconds += end[r][i] - start[r][i];
    }
  }
  const double unit = forwards > 0 && forward_seconds > 0 ? forward_seconds / forwards : 1.0;
  Simulation ran{.start = start, .end = end};
  ran.finish.assign(ranks, 0.0);
  ran.busy.assign(ranks, 0.0);
  double busy = 0;
  for (std::size_t r = 0; r < ranks; ++r) {
    for (std::size_t i = 0; i < start[r].size(); ++i) {
      ran.start[r][i] = (start[r][i] - origin) / unit;
      ran.end[r][i] = (end[r][i] - origin) / unit;
      ran.busy[r] += ran.end[r][i] - ran.start[r][i];
      ran.finish[r] = std::max(ran.finish[r], ran.end[r][i]);
    }
    ran.makespan = std::max(ran.makespan, ran.finish[r]);
    busy += ran.busy[r];
  }
  for (std::size_t r = 0; r < ranks; ++r)
    ran.idle_fraction.push_back(ran.makespan > 0 ? 1 - ran.busy[r] / ran.makespan : 0.0);
  ran.bubble_fraction =
      ran.makespan > 0 ? 1 - busy / (static_cast<double>(ranks) * ran.makespan) : 0.0;
  char forward[64];
  std::snprintf(forward, sizeof(forward), "; time in forwards of %.1f ms", 1e3 * unit);
  return timeline_svg(schedule, ran, std::string(title) + forward);
}

}  // namespace weft::parallel
