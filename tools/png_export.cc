#include "png_export.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "weft/base/error.h"

extern char** environ;

namespace weft::tools {
namespace {

namespace fs = std::filesystem;

// The first of Chromium's names on PATH.
std::string find_browser() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
      const fs::path candidate = fs::path(dir) / name;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
  }
  throw Error(
      "--png needs headless Chromium, which is not installed: apt-get install chromium (the "
      "SVG figures and the page are written without it)");
}

// The width and height attributes of an SVG document's root element.
std::pair<int, int> svg_size(const std::string& path) {
  std::ifstream in(path);
  std::string head(512, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  std::smatch m;
  if (!std::regex_search(head, m, std::regex("<svg[^>]* width=\"(\\d+)\" height=\"(\\d+)\"")))
    throw Error(path + ": an SVG without width and height attributes");
  return {std::stoi(m[1]), std::stoi(m[2])};
}

// Runs argv with its output discarded; false when it did not end within `limit` (killed).
bool run_with_limit(const std::vector<std::string>& args, std::chrono::seconds limit) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&files, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int failed = ::posix_spawn(&pid, argv[0], &files, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  if (failed != 0) throw SystemError("start " + args[0], failed);
  const auto end = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace

std::vector<std::string> write_pngs(const std::vector<std::string>& svgs) {
  if (svgs.empty()) return {};
  const std::string browser = find_browser();
  const fs::path profile = fs::path(svgs.front()).parent_path() / ".chromium-profile";
  std::vector<std::string> pngs;
  for (const std::string& svg : svgs) {
    const auto [width, height] = svg_size(svg);
    const std::string png = fs::path(svg).replace_extension(".png").string();
    fs::remove(png);
    const bool ended =
        run_with_limit({browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--user-data-dir=" + profile.string(),
                        "--window-size=" + std::to_string(width) + "," + std::to_string(height),
                        "--screenshot=" + png, "file://" + fs::absolute(svg).string()},
                       std::chrono::seconds(60));
    if (!ended) throw Error(browser + " did not draw " + svg + " within 60 s (killed)");
    if (!fs::exists(png)) throw Error(browser + " wrote no " + png);
    pngs.push_back(png);
  }
  std::error_code ignored;
  fs::remove_all(profile, ignored);
  return pngs;
}

}  // namespace weft::tools
