#include "weft/data/internal/text_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "weft/data/tokenizer.h"

namespace weft::data::internal {

std::string read_text_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw TokenizerError("the " + what + " file " + path + " is a folder");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw TokenizerError("cannot read the " + what + " file " + path + ": " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw TokenizerError("reading the " + what + " file " + path + " failed");
  return std::move(text).str();
}

}  // namespace weft::data::internal
