// libFuzzer target: the flight recorder's dump reader (weft/recorder/dump.h), which weft-fr
// runs on files from any node, fed arbitrary bytes. It must accept a dump or throw DumpError,
// and whatever it accepts must hold records whose group indices are in range (the diagnosis
// and the torch export index with them). Seeds: tests/fuzz/corpus/flight_dump_fuzz (a dump
// weftrun wrote for a size mismatch).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "weft/recorder/diagnosis.h"
#include "weft/recorder/dump.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace weft::recorder;
  try {
    const Dump d = parse_dump(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    for (const OpRecord& r : d.ring.records) {
      if (r.group >= static_cast<int>(d.ring.groups.size())) std::abort();
    }
    diagnose({RankView{.rank = 0, .ring = d.ring, .read_ns = d.dumped_monotonic_ns}});
    (void)straggler({RankView{.rank = 0, .ring = d.ring}, RankView{.rank = 1, .ring = d.ring}});
  } catch (const DumpError&) {
  }
  return 0;
}
