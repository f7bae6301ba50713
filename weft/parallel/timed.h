// The wall time the process-group adapters of tensor and context parallelism spend blocked in
// communication, which TrainingReport::communication_seconds reports.
#pragma once

#include <chrono>

namespace weft::parallel {

// Runs `f` and adds the seconds it took to `total`.
template <class F>
void add_seconds(double& total, F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  total += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace weft::parallel
