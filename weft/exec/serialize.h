// Byte encoding for values that cross a process boundary (ProcessPoolExecutor's arguments
// and results). Serializable types are:
//   - trivially copyable types that are not pointers (copied byte for byte),
//   - std::string,
//   - std::vector<T> of a serializable T.
// Anything else (pointers, std::string_view, std::span, std::reference_wrapper, other
// containers) is rejected at compile time by the weft::Serializable concept. A trivially
// copyable struct of your own that holds pointers passes the check, but its pointers are
// meaningless in the other process: do not send such structs.
//
// Format: trivially copyable values as their bytes; strings and vectors as a uint64 element
// count followed by the elements. ByteReader checks every length against the bytes left
// and throws weft::Error on a malformed message instead of reading past the end.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "weft/base/error.h"

namespace weft {

template <class T>
struct IsSerializable : std::bool_constant<std::is_trivially_copyable_v<T> &&
                                           !std::is_pointer_v<T> && !std::is_member_pointer_v<T>> {
};
template <>
struct IsSerializable<std::string> : std::true_type {};
// Trivially copyable, but views of memory in this process: meaningless in another.
template <class C, class Tr>
struct IsSerializable<std::basic_string_view<C, Tr>> : std::false_type {};
template <class T, std::size_t N>
struct IsSerializable<std::span<T, N>> : std::false_type {};
template <class T>
struct IsSerializable<std::reference_wrapper<T>> : std::false_type {};
template <>
struct IsSerializable<std::vector<bool>> : std::false_type {};  // packed bits, no data()
template <class T>
struct IsSerializable<std::vector<T>> : IsSerializable<T> {};

template <class T>
concept Serializable = IsSerializable<std::remove_cvref_t<T>>::value;

class ByteWriter {
 public:
  void write_bytes(const void* data, std::size_t size) {
    buffer_.append(static_cast<const char*>(data), size);
  }
  template <Serializable T>
  void write(const T& value) {
    if constexpr (std::is_same_v<T, std::string>) {
      write_count(value.size());
      write_bytes(value.data(), value.size());
    } else if constexpr (std::is_trivially_copyable_v<T>) {
      write_bytes(&value, sizeof(T));
    } else {  // std::vector<U>
      write_count(value.size());
      using U = typename T::value_type;
      if constexpr (std::is_trivially_copyable_v<U>) {
        write_bytes(value.data(), value.size() * sizeof(U));
      } else {
        for (const U& item : value) write(item);
      }
    }
  }
  std::string& buffer() { return buffer_; }

 private:
  void write_count(std::size_t n) { write(static_cast<std::uint64_t>(n)); }
  std::string buffer_;
};

class ByteReader {
 public:
  explicit ByteReader(std::string_view bytes) : bytes_(bytes) {}

  void read_bytes(void* out, std::size_t size) {
    need(size);
    std::memcpy(out, bytes_.data() + pos_, size);
    pos_ += size;
  }
  template <Serializable T>
  T read() {
    if constexpr (std::is_same_v<T, std::string>) {
      const std::size_t n = read_count(1);
      std::string s(bytes_.substr(pos_, n));
      pos_ += n;
      return s;
    } else if constexpr (std::is_trivially_copyable_v<T>) {
      T value;
      read_bytes(&value, sizeof(T));
      return value;
    } else {  // std::vector<U>
      using U = typename T::value_type;
      // Every element takes at least one byte, which bounds the count before allocating.
      const std::size_t n = read_count(std::is_trivially_copyable_v<U> ? sizeof(U) : 1);
      T out;
      if constexpr (std::is_trivially_copyable_v<U>) {
        out.resize(n);
        read_bytes(out.data(), n * sizeof(U));
      } else {
        out.reserve(n);
        for (std::size_t i = 0; i < n; ++i) out.push_back(read<U>());
      }
      return out;
    }
  }
  std::size_t remaining() const { return bytes_.size() - pos_; }

 private:
  // Reads an element count and checks that `n * min_element_size` bytes can follow.
  std::size_t read_count(std::size_t min_element_size) {
    const auto n = read<std::uint64_t>();
    if (n > remaining() / min_element_size) {
      throw Error("malformed message: a length of " + std::to_string(n) + " elements exceeds the " +
                  std::to_string(remaining()) + " bytes left");
    }
    return static_cast<std::size_t>(n);
  }
  void need(std::size_t size) const {
    if (size > remaining()) {
      throw Error("malformed message: needs " + std::to_string(size) + " more bytes, " +
                  std::to_string(remaining()) + " left");
    }
  }

  std::string_view bytes_;
  std::size_t pos_ = 0;
};

}  // namespace weft
