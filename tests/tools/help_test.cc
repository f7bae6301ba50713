// The tools' --help and usage errors, run as the real binaries: every option and configuration key
// is listed with its type, its default and what it means; a usage error exits with 2.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "weft/train/config.h"
#include "weft/train/generate.h"

namespace weft {
namespace {

using test::Finished;
using test::lines_of;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

Finished help_of(const std::string& tool) {
  const Finished f = test::run({tool, "--help"});
  EXPECT_EQ(f.code, 0) << tool << ": " << f.err;
  EXPECT_THAT(f.err, IsEmpty()) << tool;
  return f;
}

std::string trimmed(const std::string& s) {
  const auto first = s.find_first_not_of(' ');
  return first == std::string::npos ? "" : s.substr(first, s.find_last_not_of(' ') - first + 1);
}

// One listed key or option: its first line, and the lines under it (its description when the
// name is long, as CLI11 lays them out, or the rest of a wrapped one) joined by spaces.
struct Entry {
  std::string line, continued;
};

// The entries of `help` whose line starts with `prefix` ("  --" or "  -"), in order, each with
// the [section] heading above it.
std::vector<std::pair<std::string, Entry>> entries(const std::string& help,
                                                   const std::string& prefix) {
  std::vector<std::pair<std::string, Entry>> found;
  std::string section;
  for (const std::string& line : lines_of(help)) {
    if (line.starts_with("[")) section = line;
    if (line.starts_with(prefix)) {
      found.push_back({section, {line, ""}});
    } else if (line.starts_with("      ") && !found.empty()) {
      std::string& continued = found.back().second.continued;
      if (!continued.empty()) continued += ' ';
      continued += trimmed(line);
    }
  }
  return found;
}

// The description of `entry` after `head`, its name, type and default.
std::string description_after(const Entry& entry, const std::string& head) {
  const std::string rest = trimmed(entry.line.substr(head.size()));
  return trimmed(rest + " " + entry.continued);
}

// weft-train: the keys in the table's order, each under its section's heading, as
// "--section.key TYPE=default" followed by its meaning and range. The expectation comes from
// config_keys(), the table that parses and checks the keys, so a key left out of the help, one
// listed with a default that is not the real one, or one listed twice fails here.
TEST(HelpTest, WeftTrainListsEveryConfigKeyWithTypeDefaultAndMeaning) {
  const std::string help = help_of(WEFT_TRAIN_TOOL).out;
  EXPECT_THAT(help, HasSubstr("--config TEXT"));
  const std::vector<train::ConfigKey> keys = train::config_keys();
  ASSERT_FALSE(keys.empty());
  // The configuration's entries are the "  --section.key" lines: every name has a dot.
  std::vector<std::pair<std::string, Entry>> listed;
  for (const auto& e : entries(help, "  --")) {
    const std::string name = e.second.line.substr(4, e.second.line.find(' ', 4) - 4);
    if (name.find('.') != std::string::npos) listed.push_back(e);
  }
  ASSERT_EQ(listed.size(), keys.size()) << help;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const train::ConfigKey& k = keys[i];
    const auto& [section, entry] = listed[i];
    EXPECT_EQ(section, "[" + k.section + "]") << k.name;
    const std::string head = "  --" + k.name + " " + k.type + "=" + k.default_value;
    ASSERT_THAT(entry.line, StartsWith(head)) << k.name;
    EXPECT_EQ(description_after(entry, head),
              k.meaning + (k.allowed.empty() ? "" : " (" + k.allowed + ")"))
        << k.name;
  }
}

// The defaults --help prints are the parser's: each one, written into a configuration file as
// printed, gives the configuration a run without a file gets, and each meaning is there.
TEST(HelpTest, ConfigKeysCarryTheParsersDefaults) {
  const std::string defaults = train::to_toml(train::load_config("", {}));
  for (const train::ConfigKey& k : train::config_keys()) {
    const std::string key = k.name.substr(k.section.size() + 1);
    const std::string toml = "[" + k.section + "]\n" + key + " = " + k.default_value + "\n";
    EXPECT_EQ(train::to_toml(train::parse_config(toml, k.name)), defaults) << toml;
    EXPECT_THAT(defaults, HasSubstr("\n" + key + " = ")) << k.name;
    EXPECT_THAT(k.meaning, Not(IsEmpty())) << k.name;
    EXPECT_THAT(k.type, testing::AnyOf("INT", "FLOAT", "BOOL", "TEXT")) << k.name;
  }
  // A few as written by hand, so that the table's formatting is checked too.
  const auto key = [](const std::string& name) {
    for (const train::ConfigKey& k : train::config_keys()) {
      if (k.name == name) return k;
    }
    ADD_FAILURE() << "no key " << name;
    return train::ConfigKey{};
  };
  EXPECT_EQ(key("training.steps").default_value, std::to_string(train::TrainingConfig{}.steps));
  EXPECT_EQ(key("training.steps").allowed, "at least 1");
  EXPECT_EQ(key("training.validation_fraction").allowed, "0 to 0.5");
  EXPECT_EQ(key("model.norm_eps").default_value, "1e-05");
  EXPECT_EQ(key("metrics.peak_gflops").default_value, "0.0");
  EXPECT_EQ(key("metrics.jsonl_path").default_value, "''");
  EXPECT_EQ(key("checkpoint.enable").type, "BOOL");
  EXPECT_EQ(key("lr_scheduler.decay_type").allowed, "one of cosine, linear, constant");
}

// A CLI11 tool's options: each as "NAME TYPE=default" (or REQUIRED) with a description, and
// no option the test does not know of, so that a new one has to come with its default here.
struct Option {
  std::string name;      // as --help writes it, e.g. "-b,--min-bytes"
  std::string type_end;  // how its type and default end, e.g. "]=200" after "INT in [0 - 9]"
};

void expect_options(const std::string& tool, const std::vector<Option>& options) {
  const std::string help = help_of(tool).out;
  const auto listed = entries(help, "  -");
  EXPECT_EQ(listed.size(), options.size() + 1) << help;  // and -h,--help
  for (const Option& o : options) {
    const std::string name = "  " + o.name + " ";
    const auto it = std::find_if(listed.begin(), listed.end(),
                                 [&](const auto& e) { return e.second.line.starts_with(name); });
    ASSERT_NE(it, listed.end()) << tool << " --help lacks " << o.name << ":\n" << help;
    const std::string& line = it->second.line;
    const auto end = line.find(o.type_end, name.size() - 1);
    ASSERT_NE(end, std::string::npos) << tool << ": " << line << " lacks " << o.type_end;
    const std::string head = line.substr(0, end + o.type_end.size());
    EXPECT_THAT(description_after(it->second, head), Not(IsEmpty())) << tool << ": " << line;
  }
}

template <typename T>
std::string streamed(T value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

TEST(HelpTest, WeftGenerateShowsEveryOptionsDefault) {
  const train::SamplingOptions o;
  expect_options(WEFT_GENERATE_TOOL, {{"--checkpoint", "TEXT REQUIRED"},
                                      {"--prompt", "TEXT=ROMEO:"},
                                      {"--max-new-tokens", "]=" + streamed(o.max_new_tokens)},
                                      {"--temperature", "]=" + streamed(o.temperature)},
                                      {"--top-k", "]=" + streamed(o.top_k)},
                                      {"--seed", "UINT=" + streamed(o.seed)},
                                      {"--dtype", "bfloat16}"}});
}

// A usage error is exit code 2 with one line saying what is wrong, on every tool (CLI11's
// own codes are 100 and up); a NaN is not a temperature.
TEST(HelpTest, UsageErrorsExitWithTwo) {
  const std::vector<std::vector<std::string>> wrong = {
      {WEFT_TRAIN_TOOL, "--config"},
      {WEFT_GENERATE_TOOL, "--checkpoint", "x", "--temperature", "nan"},
      {WEFT_GENERATE_TOOL, "--checkpoint", "x", "--top-k", "-1"},
      {WEFT_CKPT_TOOL, "inspect"},
      {WEFT_CKPT_TOOL, "frobnicate", "x"}};
  for (const auto& argv : wrong) {
    const Finished f = test::run(argv);
    EXPECT_EQ(f.code, 2) << argv[0] << " " << argv[1] << ": " << f.err;
    EXPECT_THAT(f.err, Not(IsEmpty())) << argv[0];
  }
  EXPECT_THAT(test::run({WEFT_GENERATE_TOOL, "--checkpoint", "x", "--temperature", "nan"}).err,
              HasSubstr("--temperature: nan is not a number from 0 to 100"));
}

TEST(HelpTest, WeftBenchShowsEveryOptionsDefault) {
  expect_options(WEFT_BENCH_TOOL, {{"--tune", ""},
                                   {"--out", "TEXT"},
                                   {"-b,--min-bytes", "SIZE=8"},
                                   {"-e,--max-bytes", "SIZE=64M"},
                                   {"-f,--step-factor", "]=2"},
                                   {"-n,--iters", "]=20"},
                                   {"-w,--warmup-iters", "]=5"},
                                   {"-d,--datatype", "TEXT=float32"},
                                   {"-o,--op", "TEXT=sum"},
                                   {"--backend", "TEXT"},
                                   {"--threads", "]=0"},
                                   {"--timeout", "]=0"},
                                   {"-c,--check", ""},
                                   {"--shared", ""},
                                   {"--group", "generic}=all"}});
}

}  // namespace
}  // namespace weft
