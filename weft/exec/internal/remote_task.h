// The two halves of a ProcessPoolExecutor task: the parent's RemoteTask (a future state
// plus the encoded request) and the child's trampolines that decode the arguments, call
// the function and encode the result. Not part of the public API.
//
// A request is [u64 trampoline address][u64 function address][arguments]; the worker is a
// fork of the parent, so both addresses are valid there. Wire framing: docs/EXECUTORS.md.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/base/error.h"
#include "weft/exec/internal/future_state.h"
#include "weft/exec/map.h"
#include "weft/exec/serialize.h"

namespace weft::internal {

// Runs in the worker: decodes arguments from `in`, calls the function at `fn`, encodes
// the result into `out`. Exceptions propagate to the worker loop, which reports them.
using Trampoline = void (*)(std::uintptr_t fn, ByteReader& in, ByteWriter& out);

// The dynamic type name (demangled) and what() of the exception in flight.
std::pair<std::string, std::string> describe_current_exception();

template <class Fn>
void write_call_header(ByteWriter& out, Trampoline trampoline, Fn* fn) {
  out.write(reinterpret_cast<std::uint64_t>(trampoline));
  out.write(reinterpret_cast<std::uint64_t>(fn));
}

template <class R, class... P>
void remote_call(std::uintptr_t fn_address, ByteReader& in, ByteWriter& out) {
  auto* fn = reinterpret_cast<R (*)(P...)>(fn_address);
  // Braced initialization evaluates the reads left to right, in parameter order.
  std::tuple<std::decay_t<P>...> args{in.read<std::decay_t<P>>()...};
  if constexpr (std::is_void_v<R>) {
    std::apply(fn, std::move(args));
  } else {
    out.write(static_cast<const R&>(std::apply(fn, std::move(args))));
  }
}

// A map chunk: the values of the leading elements, then [u8 failed][type][what] for the
// first element that threw.
template <class R, class P>
void remote_chunk(std::uintptr_t fn_address, ByteReader& in, ByteWriter& out) {
  auto* fn = reinterpret_cast<R (*)(P)>(fn_address);
  const auto items = in.read<std::vector<std::decay_t<P>>>();
  std::vector<R> values;
  values.reserve(items.size());
  std::pair<std::string, std::string> error;
  std::uint8_t failed = 0;
  for (const auto& item : items) {
    try {
      values.push_back(fn(item));
    } catch (...) {
      error = describe_current_exception();
      failed = 1;
      break;
    }
  }
  out.write(values);
  out.write(failed);
  out.write(error.first);
  out.write(error.second);
}

// How the parent decodes a successful reply into the future's value type.
template <class T>
struct ReplyDecoder {
  static T decode(ByteReader& in) { return in.read<T>(); }
};
template <class R>
struct ReplyDecoder<ChunkResult<R>> {
  static ChunkResult<R> decode(ByteReader& in) {
    ChunkResult<R> chunk;
    chunk.values = in.read<std::vector<R>>();
    if (in.read<std::uint8_t>() != 0) {
      auto type = in.read<std::string>();
      auto what = in.read<std::string>();
      chunk.error = std::make_exception_ptr(RemoteError(std::move(type), std::move(what)));
    }
    return chunk;
  }
};

// The parent's view of a task, whatever its result type.
class RemoteTaskBase {
 public:
  explicit RemoteTaskBase(std::string request) : request_(std::move(request)) {}
  virtual ~RemoteTaskBase() = default;
  const std::string& request() const { return request_; }
  void release_request() { std::string().swap(request_); }

  // Pending -> running; false if cancelled (then it must not be sent).
  virtual bool start() = 0;
  // Sets the result from a successful reply's payload (or the decoding error).
  virtual void complete(ByteReader& reply) = 0;
  virtual void fail(std::exception_ptr error) = 0;
  virtual bool cancel() = 0;

 private:
  std::string request_;
};

template <class R>
class RemoteTask final : public FutureState<R>, public RemoteTaskBase {
 public:
  using RemoteTaskBase::RemoteTaskBase;
  bool start() override { return this->set_running_or_notify_cancel(); }
  void complete(ByteReader& reply) override {
    try {
      if constexpr (std::is_void_v<R>) {
        this->set_value();
      } else {
        this->set_value(ReplyDecoder<R>::decode(reply));
      }
    } catch (...) {
      this->set_exception(std::current_exception());
    }
  }
  void fail(std::exception_ptr error) override { this->set_exception(std::move(error)); }
  bool cancel() override { return FutureState<R>::cancel(); }
};

}  // namespace weft::internal
