// weft-schedule, run as the built binary: the simulated bubble and timeline of a schedule, its
// picture (one box per compute action), a CSV schedule, and the validator's message for a bad
// one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "weft/parallel/pipeline_schedule.h"

namespace weft {
namespace {

using ::testing::HasSubstr;

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ScheduleToolTest, PrintsTheBubbleAndDrawsEveryAction) {
  const test::TempDir dir("weft-schedule");
  const std::string svg = (dir.path() / "1f1b.svg").string();
  const test::Finished f = test::run({WEFT_SCHEDULE_TOOL, "--schedule", "1F1B", "--ranks", "4",
                                      "--microbatches", "8", "--svg", svg});
  ASSERT_EQ(f.code, 0) << f.err;
  EXPECT_THAT(f.out, HasSubstr("bubble 27.3%"));  // (p - 1) / (m + p - 1) with B = 2 F
  EXPECT_THAT(f.out, HasSubstr("rank 3 |"));
  const std::string picture = read(svg);
  EXPECT_THAT(picture, HasSubstr("<svg"));
  EXPECT_THAT(picture, HasSubstr("1F1B, 4 ranks, 4 stages, 8 micro-batches (bubble 27.3%)"));
  EXPECT_EQ(count(picture, "<rect"), 1 + 4 * 8 * 2);  // the background, then F and B boxes
  EXPECT_EQ(count(picture, ">F7<"), 4);
}

TEST(ScheduleToolTest, ReadsCsvAndNamesTheBadAction) {
  const test::TempDir dir("weft-schedule");
  const std::string good = (dir.path() / "zbv.csv").string();
  std::ofstream(good) << parallel::write_schedule_csv(
      parallel::make_schedule(parallel::ScheduleKind::kZBVZeroBubble, 2, 2, 4));
  const test::Finished f = test::run({WEFT_SCHEDULE_TOOL, "--csv", good});
  ASSERT_EQ(f.code, 0) << f.err;
  EXPECT_THAT(f.out, HasSubstr("2 ranks, 4 stages, 4 micro-batches"));
  const std::string bad = (dir.path() / "bad.csv").string();
  std::ofstream(bad) << "0B0,0F0\r\n1F0,1B0\r\n";
  const test::Finished g = test::run({WEFT_SCHEDULE_TOOL, "--csv", bad});
  EXPECT_EQ(g.code, 2);
  EXPECT_THAT(g.err, HasSubstr("0B0"));
}

}  // namespace
}  // namespace weft
