#include <string>
#include <vector>

#include "weft/parallel/pipeline_report.h"
#include "weft/parallel/strategies.h"

namespace weft::parallel {
namespace {

std::int64_t bytes_of_floats(std::int64_t n) {
  return n * static_cast<std::int64_t>(sizeof(float));
}

// "mesh pp 2 x tp 2; world ranks by (pp, tp): 0 (0, 0), 1 (0, 1), 2 (1, 0), 3 (1, 1)".
std::string describe_mesh(const DeviceMesh& mesh) {
  std::string shape, names;
  for (const auto& [name, n] : mesh.dims()) {
    shape += (shape.empty() ? "" : " x ") + name + " " + std::to_string(n);
    names += (names.empty() ? "" : ", ") + name;
  }
  std::string text = "mesh " + shape + "; world ranks by (" + names + "):";
  for (int rank = 0; rank < mesh.world().size(); ++rank) {
    const std::vector<int> coordinates = mesh.coordinates_of(rank);
    text += rank == 0 ? " " : ", ";
    text += std::to_string(rank) + " (";
    for (std::size_t d = 0; d < coordinates.size(); ++d) {
      text += (d == 0 ? "" : ", ");
      text += std::to_string(coordinates[d]);
    }
    text += ")";
  }
  return text;
}

class StrategiesReport : public TrainingReport {
 public:
  explicit StrategiesReport(const Strategies& s) : s_(s) {}

  double communication_seconds() const override {
    return s_.seconds + (s_.tp_adapter ? s_.tp_adapter->seconds() : 0.0) +
           (s_.cp_adapter ? s_.cp_adapter->seconds() : 0.0) +
           (s_.pipeline ? s_.pipeline->wait_seconds() : 0.0);
  }

  MemoryReport memory() const override {
    MemoryReport report;
    s_.dp->memory(report);
    report.activations =
        s_.pipeline ? s_.pipeline->peak_activation_bytes() : s_.model.activation_bytes();
    report.one_process = 4 * bytes_of_floats(s_.model.whole_numel());
    report.canonical_sums += s_.model.parameters().leaf_trees().bytes();
    return report;
  }

  std::vector<std::string> describe(bool with_peaks) const override {
    std::vector<std::string> lines;
    if (s_.mesh != nullptr && !s_.mesh->dims().empty() && !with_peaks)
      lines.push_back(describe_mesh(*s_.mesh));
    if (s_.pipeline) {
      lines.push_back(with_peaks ? describe_pipeline_idle(*s_.pipeline, *s_.mesh)
                                 : describe_pipeline_stages(*s_.pipeline));
    }
    if (s_.cp != nullptr && !with_peaks) {
      const int n = s_.cp->size();
      const bool ring = s_.options.cp_exchange == nn::KeyValueExchange::kRing;
      lines.push_back("context parallel " + std::to_string(n) + ": each sequence in " +
                      std::to_string(2 * n) + " chunks, rank r of the ring holding chunks r and " +
                      std::to_string(2 * n - 1) + " - r; keys and values " +
                      (ring ? "around the ring (alltoall)" : "all-gathered (allgather)"));
    }
    if (s_.tp != nullptr && !with_peaks) {  // once, at the start
      const nn::TensorParallel& tp = s_.model.tensor_parallel();
      std::string line = "tensor parallel " + std::to_string(tp.size()) + ": " +
                         (tp.sequence_parallel ? "sequence parallel" : "no sequence parallelism") +
                         ", ";
      if (s_.options.layout_invariant) {
        line += "layout-invariant in " + std::to_string(s_.options.feature_blocks) +
                " feature blocks, the loss computed loss-parallel";
      } else {
        line += tp.loss_parallel ? "loss parallel" : "logits gathered for the loss";
      }
      lines.push_back(line);
    }
    s_.dp->describe(lines, with_peaks);
    return lines;
  }

  std::string pipeline_timeline_svg() const override {
    if (!s_.pipeline) return "";
    const PipelineOptions& p = s_.options.pipeline;
    return parallel::pipeline_timeline_svg(*s_.pipeline, *s_.mesh,
                                           p.schedule_csv.empty() ? p.schedule : "CSV schedule");
  }

 private:
  const Strategies& s_;
};

}  // namespace

std::unique_ptr<TrainingReport> make_training_report(const Strategies& s) {
  return std::make_unique<StrategiesReport>(s);
}

}  // namespace weft::parallel
