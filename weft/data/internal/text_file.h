// Reading the small files tokenizers are made of, with errors that name them.
#pragma once

#include <string>

namespace weft::data::internal {

// The whole file. Throws TokenizerError naming `what` and the path when it cannot be read.
std::string read_text_file(const std::string& path, const std::string& what);

}  // namespace weft::data::internal
