#include "weft/parallel/pipeline_report.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "weft/parallel/pipeline_picture.h"

namespace weft::parallel {
namespace {

// Whether world ranks a and b are stages of one pipeline (coordinates equal but for pp).
bool same_pipeline(const DeviceMesh& mesh, std::size_t a, std::size_t b) {
  std::vector<int> ca = mesh.coordinates_of(static_cast<int>(a));
  std::vector<int> cb = mesh.coordinates_of(static_cast<int>(b));
  ca[0] = cb[0] = 0;  // pp comes first in the mesh
  return ca == cb;
}

// Per pipeline rank, the mean of the measured costs of the world ranks at that pp
// coordinate (rows of `n` values: pp rank, F, I, W, full B or -1, ...).
std::vector<ActionCosts> stage_costs(const PipelineRuntime& pipeline,
                                     const std::vector<double>& all, std::size_t n) {
  std::vector<ActionCosts> costs(static_cast<std::size_t>(pipeline.schedule().ranks),
                                 ActionCosts{0, 0, 0});
  std::vector<double> full(costs.size()), replicas(costs.size());
  for (std::size_t r = 0; r * n < all.size(); ++r) {
    const double* v = &all[r * n];
    const auto p = static_cast<std::size_t>(v[0]);
    costs[p].forward += v[1];
    costs[p].backward_input += v[2];
    costs[p].backward_weight += v[3];
    full[p] += v[4];
    replicas[p] += 1;
  }
  for (std::size_t p = 0; p < costs.size(); ++p) {
    costs[p].forward /= replicas[p];
    costs[p].backward_input /= replicas[p];
    costs[p].backward_weight /= replicas[p];
    if (full[p] >= 0) costs[p].full_backward = full[p] / replicas[p];
  }
  return costs;
}

}  // namespace

std::string describe_pipeline_stages(const PipelineRuntime& pipeline) {
  const Schedule& s = pipeline.schedule();
  std::string line = "pipeline parallel " + std::to_string(s.ranks) + ": " +
                     std::to_string(s.num_stages()) + " stages, " + std::to_string(s.microbatches) +
                     " micro-batches; layers";
  for (int stage = 0; stage < s.num_stages(); ++stage) {
    const nn::LayerRange r = pipeline.stage_layers()[static_cast<std::size_t>(stage)];
    char part[64];
    std::snprintf(part, sizeof(part), " %d-%d (rank %d)", r.first, r.last - 1,
                  s.stage_to_rank[static_cast<std::size_t>(stage)]);
    line += part;
  }
  // The timeline with a backward taking two forwards' time, one column per forward.
  const Simulation simulation =
      simulate(s, {.forward = 1, .backward_input = 1, .backward_weight = 1});
  char bubble[96];
  std::snprintf(bubble, sizeof(bubble), "; simulated bubble %.1f%% (backward = 2 forwards):\n",
                100 * simulation.bubble_fraction);
  std::string timeline = format_timeline(s, simulation);
  if (!timeline.empty() && timeline.back() == '\n') timeline.pop_back();
  return line + bubble + timeline;
}

std::string describe_pipeline_idle(const PipelineRuntime& pipeline, const DeviceMesh& mesh) {
  const ActionCosts c = pipeline.measured_costs();
  std::vector<double> mine{static_cast<double>(mesh.coordinate("pp")), c.forward, c.backward_input,
                           c.backward_weight, c.full_backward.value_or(-1)};
  constexpr std::size_t kHead = 5;
  for (const PipelineRuntime::StepTimes& t : pipeline.step_times())
    mine.insert(mine.end(), {t.start, t.end, t.busy});
  const std::size_t n = mine.size(), steps = (n - kHead) / 3;
  const auto world = static_cast<std::size_t>(mesh.world().size());
  std::vector<double> all(n * world);
  mesh.world().all_gather(all, mine);
  const Simulation simulated = simulate(pipeline.schedule(), stage_costs(pipeline, all, n));
  std::string text =
      "pipeline idle per rank (1 - its compute time / the steps' makespan over its pipeline), "
      "and simulated with each stage's measured forward and backward times";
  for (std::size_t r = 0; r < world; ++r) {
    const double* v = &all[r * n];
    double busy = 0, makespan = 0;  // summed over the steps
    for (std::size_t step = 0; step < steps; ++step) {
      busy += v[kHead + 3 * step + 2];
      double first = v[kHead + 3 * step], last = v[kHead + 3 * step + 1];
      for (std::size_t peer = 0; peer < world; ++peer) {
        if (!same_pipeline(mesh, r, peer)) continue;
        first = std::min(first, all[peer * n + kHead + 3 * step]);
        last = std::max(last, all[peer * n + kHead + 3 * step + 1]);
      }
      makespan += last - first;
    }
    char line[128];
    std::snprintf(line, sizeof(line),
                  "\n  rank %zu (pp rank %d): idle %.1f%% (computed %.2f of %.2f s), simulated "
                  "%.1f%%",
                  r, static_cast<int>(v[0]), makespan > 0 ? 100 * (1 - busy / makespan) : 0.0, busy,
                  makespan, 100 * simulated.idle_fraction[static_cast<std::size_t>(v[0])]);
    text += line;
  }
  return text;
}

std::string pipeline_timeline_svg(const PipelineRuntime& pipeline, const DeviceMesh& mesh,
                                  const std::string& schedule_name) {
  const auto& times = pipeline.last_step_actions();
  // Rows of equal length for the gather: pp rank, action count, then (start, end) pairs.
  std::vector<std::int64_t> longest{static_cast<std::int64_t>(times.size())};
  mesh.world().all_reduce(longest, dist::ReduceOp::kMax);
  const std::size_t n = 2 + 2 * static_cast<std::size_t>(longest[0]);
  std::vector<double> mine(n, 0.0), all(n * static_cast<std::size_t>(mesh.world().size()));
  mine[0] = mesh.coordinate("pp");
  mine[1] = static_cast<double>(times.size());
  for (std::size_t i = 0; i < times.size(); ++i) {
    mine[2 + 2 * i] = times[i].start;
    mine[3 + 2 * i] = times[i].end;
  }
  mesh.world().all_gather(all, mine);
  const Schedule& schedule = pipeline.schedule();
  std::vector<std::vector<double>> start(static_cast<std::size_t>(schedule.ranks)),
      end(start.size());
  for (std::size_t r = 0; r * n < all.size(); ++r) {
    if (!same_pipeline(mesh, 0, r)) continue;
    const double* v = &all[r * n];
    const auto p = static_cast<std::size_t>(v[0]);
    const auto count = static_cast<std::size_t>(v[1]);
    if (count != schedule.actions[p].size()) return "";  // no step run yet
    for (std::size_t i = 0; i < count; ++i) {
      start[p].push_back(v[2 + 2 * i]);
      end[p].push_back(v[3 + 2 * i]);
    }
  }
  return measured_timeline_svg(
      schedule, start, end,
      "measured: " + schedule_name + ", " + std::to_string(schedule.ranks) + " ranks, " +
          std::to_string(schedule.microbatches) + " micro-batches, last step");
}

}  // namespace weft::parallel
