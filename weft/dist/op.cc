#include "weft/dist/op.h"

#include <array>

namespace weft::dist {
namespace {

constexpr std::array<std::string_view, kOpCount> kNames = {
#define WEFT_DIST_OP_NAME(name) #name,
    WEFT_DIST_OPS(WEFT_DIST_OP_NAME)
#undef WEFT_DIST_OP_NAME
};

}  // namespace

std::string_view op_name(Op op) {
  const auto i = static_cast<std::size_t>(op);
  return i < kNames.size() ? kNames[i] : "?";
}

std::optional<Op> op_from_name(std::string_view name) {
  for (std::size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<Op>(i);
  }
  return std::nullopt;
}

bool is_collective(Op op) { return op != Op::send && op != Op::recv && op != Op::recv_any; }

}  // namespace weft::dist
