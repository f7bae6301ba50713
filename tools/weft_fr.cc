// weft-fr: reads the flight recorder's dumps of a job (PREFIX<rank>.json, written by a rank
// whose operation failed with WEFT_FLIGHT_RECORDER_DUMP=PREFIX set, or by weftrun for each of
// its workers when a job failed) and says which rank is behind or diverged, in which
// collective, at which site, and what the others were doing; lists the records; exports them
// for PyTorch's torchfrtrace.
//
//   weft-fr /tmp/fr/trace_                 (every PREFIX<rank>.json: trace_0.json, trace_1.json)
//   weft-fr --records /tmp/fr/trace_0.json /tmp/fr/trace_1.json
//   weft-fr --export-torch /tmp/torch-fr /tmp/fr/trace_    then: torchfrtrace /tmp/torch-fr
//
// Exit codes: 0 read (whatever the diagnosis says); 1 a dump cannot be read or is not one;
// 2 bad arguments. See docs/LAUNCHER.md.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "weft/base/error.h"
#include "weft/recorder/diagnosis.h"
#include "weft/recorder/dump.h"
#include "weft/recorder/torch_export.h"

namespace {

namespace fs = std::filesystem;
using weft::recorder::Dump;

// The dumps an argument names: a file, or a prefix whose PREFIX<rank>.json files are read.
std::vector<std::string> files_of(const std::string& argument) {
  if (fs::is_regular_file(argument)) return {argument};
  const fs::path prefix(argument);
  const fs::path folder = prefix.has_parent_path() ? prefix.parent_path() : fs::path(".");
  const std::string stem = prefix.filename().string();
  std::vector<std::string> files;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= stem.size() + 5 || name.compare(0, stem.size(), stem) != 0 ||
        !name.ends_with(".json"))
      continue;
    const std::string rank = name.substr(stem.size(), name.size() - stem.size() - 5);
    if (std::all_of(rank.begin(), rank.end(), [](char c) { return c >= '0' && c <= '9'; }))
      files.push_back(entry.path().string());
  }
  if (files.empty()) {
    throw weft::InvalidArgument(argument + ": neither a dump nor the prefix of any (" +
                                (folder / (stem + "<rank>.json")).string() + ")");
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The dumps by rank; one rank dumped twice is an error (two jobs' dumps mixed).
std::map<int, Dump> read_all(const std::vector<std::string>& arguments) {
  std::map<int, Dump> dumps;
  std::map<int, std::string> source;
  for (const std::string& argument : arguments) {
    for (const std::string& file : files_of(argument)) {
      Dump d = weft::recorder::read_dump(file);
      const int rank = d.ring.rank;
      if (rank < 0) throw weft::recorder::DumpError(file + ": holds no one rank's operations");
      if (dumps.count(rank) != 0) {
        throw weft::InvalidArgument(file + " and " + source[rank] + " are both rank " +
                                    std::to_string(rank) + "'s: dumps of two jobs or attempts?");
      }
      source[rank] = file;
      dumps.emplace(rank, std::move(d));
    }
  }
  return dumps;
}

std::vector<weft::recorder::RankView> views_of(const std::map<int, Dump>& dumps) {
  int world = 0;
  for (const auto& [rank, d] : dumps) world = std::max({world, d.ring.world_size, rank + 1});
  std::vector<weft::recorder::RankView> views;
  for (int rank = 0; rank < world; ++rank) {
    weft::recorder::RankView view{.rank = rank};
    if (const auto it = dumps.find(rank); it != dumps.end()) {
      view.ring = it->second.ring;
      view.status = it->second.status;
      view.read_ns = it->second.dumped_monotonic_ns;
    } else {
      view.missing =
          "no dump: it wrote none, as a rank that is stopped, killed, stuck outside "
          "communication or never failed in an operation does not";
    }
    views.push_back(std::move(view));
  }
  return views;
}

void print_records(const std::map<int, Dump>& dumps) {
  for (const auto& [rank, d] : dumps) {
    std::printf("rank %d (pid %d on %s, %s): %zu records\n", rank, d.ring.pid, d.host.c_str(),
                d.status.c_str(), d.ring.records.size());
    for (const auto& r : d.ring.records) {
      const std::string group =
          r.group >= 0 ? d.ring.groups[static_cast<std::size_t>(r.group)].name : "?";
      std::printf("  %-10s #%-6llu %-48s %-10s %8.3f s before the dump  %s\n", group.c_str(),
                  static_cast<unsigned long long>(r.seq), r.call().c_str(),
                  weft::recorder::state_name(r.state),
                  static_cast<double>(d.dumped_monotonic_ns - r.issued_ns) / 1e9, r.site.c_str());
    }
  }
}

bool one_host(const std::map<int, Dump>& dumps) {
  return std::all_of(dumps.begin(), dumps.end(),
                     [&](const auto& d) { return d.second.host == dumps.begin()->second.host; });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("weft-fr: what a job's flight recorder dumps say about why it stopped", "weft-fr");
  std::vector<std::string> arguments;
  bool records = false;
  std::string torch_folder, torch_format = "pickle";
  app.add_option("DUMP", arguments, "dump files, or the PREFIX of PREFIX<rank>.json")->required();
  app.add_flag("--records", records, "also list every rank's records");
  app.add_option("--export-torch", torch_folder,
                 "write the dumps into this folder as PyTorch's flight recorder\n"
                 "writes them, for torchfrtrace FOLDER");
  app.add_option("--torch-format", torch_format,
                 "pickle (what torchfrtrace reads) or json (the same, as\n"
                 "PyTorch's _dump_nccl_trace_json writes it)")
      ->check(CLI::IsMember({"pickle", "json"}));
  CLI11_PARSE(app, argc, argv);
  try {
    const std::map<int, Dump> dumps = read_all(arguments);
    const auto views = views_of(dumps);
    for (const std::string& line : weft::recorder::diagnose(views))
      std::printf("%s\n", line.c_str());
    if (one_host(dumps)) {
      if (auto line = weft::recorder::straggler(views)) std::printf("%s\n", line->c_str());
    }
    if (records) print_records(dumps);
    if (!torch_folder.empty()) {
      const auto format = torch_format == "json" ? weft::recorder::TorchFormat::kJson
                                                 : weft::recorder::TorchFormat::kPickle;
      for (const std::string& file : weft::recorder::export_torch(dumps, torch_folder, format)) {
        std::printf("wrote %s\n", file.c_str());
      }
    }
    return 0;
  } catch (const weft::InvalidArgument& e) {
    std::fprintf(stderr, "weft-fr: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft-fr: %s\n", e.what());
    return 1;
  }
}
