#include "weft/dist/internal/call_check.h"

#include <cstdlib>
#include <string_view>
#include <vector>

namespace weft::dist::internal {
namespace {

// Algorithms use steps below this; the signature exchange uses the ones above.
constexpr int kCheckStepBase = 2048;

// The fixed-size form of a signature on the wire.
struct WireSignature {
  std::int32_t op;
  std::int32_t dtype;
  std::int32_t root;
  std::int32_t reduce;  // -1: none
  std::uint64_t count;
  std::uint64_t seq;
};

WireSignature to_wire(const CallSignature& s, std::uint64_t seq) {
  WireSignature w{};
  w.op = static_cast<std::int32_t>(s.op);
  w.dtype = static_cast<std::int32_t>(s.dtype);
  w.root = s.root;
  w.reduce = s.reduce ? static_cast<std::int32_t>(*s.reduce) : -1;
  w.count = s.count;
  w.seq = seq;
  return w;
}

std::string describe(const WireSignature& w) {
  CallSignature s;
  s.op = static_cast<Op>(w.op);
  s.dtype = static_cast<DType>(w.dtype);
  s.count = w.count;
  s.root = w.root;
  if (w.reduce >= 0) s.reduce = static_cast<ReduceOp>(w.reduce);
  return s.describe() + " as collective #" + std::to_string(w.seq);
}

bool same(const WireSignature& a, const WireSignature& b) {
  return a.op == b.op && a.dtype == b.dtype && a.root == b.root && a.reduce == b.reduce &&
         a.count == b.count && a.seq == b.seq;
}

}  // namespace

std::string CallSignature::describe() const {
  std::string out = std::string(op_name(op)) + "(";
  if (count != kAnyCount) out += "count=" + std::to_string(count) + ", ";
  out += "dtype=" + std::string(dtype_name(dtype));
  if (root >= 0) out += ", root=" + std::to_string(root);
  if (reduce) out += ", op=" + std::string(reduce_op_name(*reduce));
  return out + ")";
}

bool call_checks_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("WEFT_DIST_DEBUG");
    return v != nullptr && std::string_view(v) == "detail";
  }();
  return enabled;
}

void check_call(CollectiveEngine& engine, const OpContext& op, int group_size,
                const CallSignature& mine, std::uint64_t seq, const std::string& group) {
  const auto n = static_cast<std::size_t>(group_size);
  WireSignature own = to_wire(mine, seq);
  std::vector<WireSignature> all(n);
  const std::size_t words = sizeof(WireSignature) / sizeof(std::uint64_t);
  static_assert(sizeof(WireSignature) % sizeof(std::uint64_t) == 0);
  // On the group's own engine (shm's step engine: one step), under a tag of its own.
  engine.all_gather(Buffer(all.data(), n * words, DType::kInt64),
                    Buffer(&own, words, DType::kInt64),
                    OpContext{op.tag + static_cast<Tag>(kCheckStepBase), op.deadline});
  bool agree = true;
  for (const auto& w : all) agree = agree && same(w, all[0]);
  if (agree) return;
  std::string msg = "dist: ranks of group '" + group + "' called different collectives:";
  for (std::size_t r = 0; r < n; ++r)
    msg += "\n  rank " + std::to_string(r) + ": " + describe(all[r]);
  msg +=
      "\nEvery rank must call the same collectives, with the same sizes, dtypes and roots, in "
      "the same order.";
  throw CollectiveMismatch(msg);
}

}  // namespace weft::dist::internal
