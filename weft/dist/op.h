// The operations of a process group, listed once. Everything that names an operation (error
// messages, the debug-mode call signatures, the shm engine's step headers, weft-bench's
// command line) takes the name from here.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace weft::dist {

// X(name): every operation of ProcessGroup, collectives first.
#define WEFT_DIST_OPS(X) \
  X(broadcast)           \
  X(all_reduce)          \
  X(reduce)              \
  X(all_gather)          \
  X(all_gather_v)        \
  X(gather)              \
  X(scatter)             \
  X(reduce_scatter)      \
  X(all_to_all)          \
  X(all_to_all_v)        \
  X(barrier)             \
  X(send)                \
  X(recv)                \
  X(recv_any)

enum class Op : std::uint8_t {
#define WEFT_DIST_OP_ENUM(name) name,
  WEFT_DIST_OPS(WEFT_DIST_OP_ENUM)
#undef WEFT_DIST_OP_ENUM
};

inline constexpr int kOpCount = 0
#define WEFT_DIST_OP_COUNT(name) +1
    WEFT_DIST_OPS(WEFT_DIST_OP_COUNT)
#undef WEFT_DIST_OP_COUNT
    ;

// "all_reduce" for Op::all_reduce; "?" for a value outside the list (a corrupt header).
std::string_view op_name(Op op);
// The operation named `name`, or std::nullopt.
std::optional<Op> op_from_name(std::string_view name);
// Collectives involve every rank of the group; send, recv and recv_any do not.
bool is_collective(Op op);

}  // namespace weft::dist
