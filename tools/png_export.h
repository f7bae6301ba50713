// PNG copies of weft-report's SVG figures, drawn by headless Chromium (Debian's chromium), so
// that a chart can go where SVG cannot (slides, documents, chat).
#pragma once

#include <string>
#include <vector>

namespace weft::tools {

// Writes X.png beside each X.svg of `svgs` at the SVG's own size, one Chromium run each of at
// most 60 s; the PNGs' paths. weft::Error when no Chromium is installed (saying which package
// to install), when one does not finish in time, or when it writes no PNG.
std::vector<std::string> write_pngs(const std::vector<std::string>& svgs);

}  // namespace weft::tools
