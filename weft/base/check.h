// Invariant checks. A failed check is a bug in weft, not a user error: it prints the
// expression, both values and the location to stderr and aborts. User errors throw a
// weft::Error subclass instead (see error.h).
//
//   WEFT_CHECK(ptr != nullptr);
//   WEFT_CHECK_EQ(shape.size(), 2u);   // "check failed: shape.size() == 2u (3 vs 2)"
#pragma once

#include <sstream>
#include <string>

namespace weft::internal {

[[noreturn]] void check_failed(const char* file, int line, const std::string& message);

template <class T>
std::string check_value_string(const T& value) {
  if constexpr (requires(std::ostream & os) { os << value; }) {
    std::ostringstream os;
    os << value;
    return os.str();
  } else {
    return "<unprintable>";
  }
}

template <class A, class B>
[[noreturn]] void check_op_failed(const char* file, int line, const char* expr, const A& a,
                                  const B& b) {
  check_failed(
      file, line,
      std::string(expr) + " (" + check_value_string(a) + " vs " + check_value_string(b) + ")");
}

}  // namespace weft::internal

#define WEFT_CHECK(cond)                                         \
  do {                                                           \
    if (!(cond)) [[unlikely]]                                    \
      ::weft::internal::check_failed(__FILE__, __LINE__, #cond); \
  } while (0)

#define WEFT_CHECK_OP_(op, a, b)                                                              \
  do {                                                                                        \
    const auto& weft_check_a_ = (a);                                                          \
    const auto& weft_check_b_ = (b);                                                          \
    if (!(weft_check_a_ op weft_check_b_)) [[unlikely]]                                       \
      ::weft::internal::check_op_failed(__FILE__, __LINE__, #a " " #op " " #b, weft_check_a_, \
                                        weft_check_b_);                                       \
  } while (0)

#define WEFT_CHECK_EQ(a, b) WEFT_CHECK_OP_(==, a, b)
#define WEFT_CHECK_NE(a, b) WEFT_CHECK_OP_(!=, a, b)
#define WEFT_CHECK_LT(a, b) WEFT_CHECK_OP_(<, a, b)
#define WEFT_CHECK_LE(a, b) WEFT_CHECK_OP_(<=, a, b)
#define WEFT_CHECK_GT(a, b) WEFT_CHECK_OP_(>, a, b)
#define WEFT_CHECK_GE(a, b) WEFT_CHECK_OP_(>=, a, b)
