// The flight recorder's dumps as PyTorch's flight recorder writes its own, for PyTorch's
// analyser (torchfrtrace FOLDER): one file per rank, weft_trace_rank_<rank>, a pickled dict
// {"version": "2.10", "pg_config", "pg_status", "entries"} whose entries carry PyTorch's keys
// (record_id, process_group, collective_seq_id, p2p_seq_id, profiling_name "nccl:all_reduce",
// input/output sizes and dtypes, state "scheduled"/"started"/"completed", times, frames: the
// record's site). Or the same dict as JSON (weft_trace_rank_<rank>.json), as PyTorch's
// _dump_nccl_trace_json writes it, for other tools; torchfrtrace reads only the pickles.
//
// What PyTorch records and weft does not is left neutral: timeout_ms 0, no thread names. A
// group whose members' job ranks are not in its ring (unevenly spaced) lists those whose
// dumps name it. Operations PyTorch has no name for (recv from any peer) are left out.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "weft/recorder/dump.h"

namespace weft::recorder {

enum class TorchFormat { kPickle, kJson };

// Writes each rank's dump into `folder` (created if missing); returns the files written.
// Throws weft::SystemError naming a file that cannot be written.
std::vector<std::string> export_torch(const std::map<int, Dump>& dumps, const std::string& folder,
                                      TorchFormat format = TorchFormat::kPickle);

// `value` pickled (protocol 2): objects as dicts, arrays as lists, strings, integers, floats,
// booleans and null as Python's. Exposed for tests.
std::string pickle(const nlohmann::json& value);

}  // namespace weft::recorder
