// weft-report's reader and drawing against hand-written metrics files.
#include "weft/train/report.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "weft/base/error.h"

namespace weft::train {
namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const auto path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(ReportTest, ReadsStepsValidationSummaryAndConfig) {
  const auto path = write_file(
      "report_run.jsonl",
      "{\"config\":\"[model]\\ndim = 256\\n\"}\n"
      "{\"step\":1,\"loss\":4.0,\"tps\":100,\"mfu\":0.5,\"memory_bytes\":1048576}\n"
      "{\"step\":2,\"loss\":3.0,\"tps\":110,\"mfu\":0.6,\"memory_bytes\":2097152,"
      "\"rank_memory_bytes\":[2097152,1048576],\"comm_share\":0.25}\n"
      "{\"step\":2,\"val_loss\":3.5,\"val_bpb\":5}\n"
      "{\"step\":2,\"loss\":2.5}\n"      // resumed: the step's last value counts
      "{\"future_record\":{\"x\":1}}\n"  // a newer weft's record: skipped
      "{\"summary\":{\"first_step\":1,\"last_step\":2,\"tps\":105,\"final_loss\":2.5}}\n");
  const RunMetrics run = read_metrics(path);
  EXPECT_EQ(run.name, "report_run");
  EXPECT_EQ(run.loss, (std::map<std::int64_t, double>{{1, 4.0}, {2, 2.5}}));
  EXPECT_EQ(run.validation_loss, (std::map<std::int64_t, double>{{2, 3.5}}));
  EXPECT_DOUBLE_EQ(run.mfu.at(2), 60);
  EXPECT_DOUBLE_EQ(run.memory_mib.at(2), 2);
  EXPECT_EQ(run.config_toml, "[model]\ndim = 256\n");
  ASSERT_EQ(run.rank_memory_mib.size(), 2u);
  EXPECT_EQ(run.rank_memory_mib[1], (std::map<std::int64_t, double>{{2, 1.0}}));
  EXPECT_EQ(run.communication_percent, (std::map<std::int64_t, double>{{2, 25.0}}));
  std::vector<std::string> files;
  const std::vector<RunMetrics> runs{run};
  for (const Chart& c : charts_of(runs)) files.push_back(c.file);
  EXPECT_EQ(files,
            (std::vector<std::string>{"loss.svg", "validation.svg", "throughput.svg", "mfu.svg",
                                      "memory.svg", "memory_ranks.svg", "communication.svg"}));
  ASSERT_FALSE(run.summary.empty());
  EXPECT_EQ(run.summary[0], (std::pair<std::string, std::string>{"steps", "1-2"}));
}

TEST(ReportTest, NamesTheLineThatIsNotAMetricsRecord) {
  const auto bad_json = write_file("report_bad.jsonl", "{\"step\":1,\"loss\":1}\nnot json\n");
  try {
    read_metrics(bad_json);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("report_bad.jsonl:2: not JSON"), std::string::npos)
        << e.what();
  }
  const auto bad_type = write_file("report_type.jsonl", "{\"step\":1,\"loss\":\"low\"}\n");
  EXPECT_THROW(read_metrics(bad_type), InvalidArgument);
  EXPECT_THROW(read_metrics("/nonexistent/metrics.jsonl"), SystemError);
}

// A pipeline run's timeline goes into the page as an image (base64 in a data: URI, so that
// the page stays one file and nothing in a metrics file runs in it) and beside it as a file.
TEST(ReportTest, ShowsThePipelineTimelineAsAnImage) {
  const std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\"><text>F0</text></svg>\n";
  const auto path = write_file(
      "report_pipeline.jsonl",
      "{\"step\":1,\"loss\":4.0}\n" + nlohmann::json{{"pipeline_timeline_svg", svg}}.dump() + "\n");
  const RunMetrics run = read_metrics(path);
  EXPECT_EQ(run.pipeline_svg, svg);
  const auto folder = std::filesystem::temp_directory_path() / "report_pipeline";
  std::filesystem::remove_all(folder);
  const std::string page = write_report({run}, folder.string());
  std::ifstream in(page);
  const std::string html{std::istreambuf_iterator<char>(in), {}};
  // "<svg xmlns=" in base64, at the start of the URI's data.
  EXPECT_NE(html.find("src=\"data:image/svg+xml;base64,PHN2ZyB4bWxucz0i"), std::string::npos);
  EXPECT_EQ(html.find("<text>F0</text>"), std::string::npos);
  std::ifstream file(folder / "pipeline.svg");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(file), {}), svg);
  const auto bad = write_file("report_pipeline_bad.jsonl",
                              "{\"pipeline_timeline_svg\":\"<script>x</script>\"}\n");
  EXPECT_THROW(read_metrics(bad), InvalidArgument);
}

// Each run is one polyline with every point it logged; names are escaped in the page.
TEST(ReportTest, ChartsHaveEveryLoggedPointOfEveryRun) {
  RunMetrics a, b;
  a.name = "a<b>";
  b.name = "b";
  for (int s = 1; s <= 50; ++s) a.loss[s] = 5.0 / s;
  for (int s = 1; s <= 20; ++s) b.loss[s] = 4.0 / s;
  const std::vector<RunMetrics> runs{a, b};
  const auto charts = charts_of(runs);  // pointing into runs
  ASSERT_EQ(charts.size(), 1u);         // the others have no points
  const std::string svg = render_svg(charts[0]);
  std::smatch m;
  std::vector<std::pair<int, int>> counts;  // data-points, pairs in points
  std::string rest = svg;
  const std::regex line("data-points=\"(\\d+)\"[^>]* points=\"([^\"]*)\"");
  while (std::regex_search(rest, m, line)) {
    const std::string xy = m[2];
    counts.emplace_back(std::stoi(m[1]), int(std::count(xy.begin(), xy.end(), ',')));
    rest = m.suffix();
  }
  EXPECT_EQ(counts, (std::vector<std::pair<int, int>>{{50, 50}, {20, 20}}));
  const std::string html = render_html(runs);
  EXPECT_NE(html.find("a&lt;b&gt;"), std::string::npos);
  EXPECT_EQ(html.find("a<b>"), std::string::npos);
}

}  // namespace
}  // namespace weft::train
