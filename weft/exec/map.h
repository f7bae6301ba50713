// Executor::map's options and result range, shared by the thread and process pools.
#pragma once

#include <cstddef>
#include <exception>
#include <iterator>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/base/check.h"
#include "weft/base/deadline.h"
#include "weft/base/error.h"
#include "weft/exec/future.h"

namespace weft {

struct MapOptions {
  // Total time for the whole map, counted from the map() call; reaching an element whose
  // result is not ready by then throws weft::TimeoutError. std::nullopt: no limit.
  std::optional<Seconds> timeout;
  // Elements per submitted task. Larger chunks cut per-task overhead for cheap functions.
  std::size_t chunksize = 1;
};

namespace internal {

// Hands `inputs` to `submit_chunk` as vectors of at most `chunksize` elements (converted to
// A), in order; returns how many elements there were. Throws InvalidArgument for chunksize 0.
template <class A, class Range, class SubmitChunk>
std::size_t split_into_chunks(const Range& inputs, std::size_t chunksize,
                              SubmitChunk submit_chunk) {
  if (chunksize == 0) throw InvalidArgument("map: chunksize must be at least 1");
  std::vector<A> chunk;
  std::size_t size = 0;
  for (const auto& item : inputs) {
    chunk.push_back(static_cast<A>(item));
    ++size;
    if (chunk.size() == chunksize) submit_chunk(std::exchange(chunk, {}));
  }
  if (!chunk.empty()) submit_chunk(std::move(chunk));
  return size;
}

}  // namespace internal

// The results of one chunk of a map: the values of its leading elements, and the error of
// the element after them if one threw (the chunk stops at its first failing element).
template <class R>
struct ChunkResult {
  std::vector<R> values;
  std::exception_ptr error;
};

// map's results in input order, readable by index (at) or by iterating. Reading an element
// blocks until its chunk is done; reading an element that threw rethrows its exception.
// Destroying the range cancels the chunks that have not started. Not thread-safe.
template <class R>
class MapResults {
  static_assert(!std::is_same_v<R, bool>,
                "map results of type bool are not supported (std::vector<bool> packs bits, so "
                "results could not be handed out by reference): return char or int");

 public:
  MapResults(std::vector<Future<ChunkResult<R>>> chunks, std::size_t chunksize, std::size_t size,
             Deadline deadline)
      : chunks_(std::move(chunks)), chunksize_(chunksize), size_(size), deadline_(deadline) {}
  MapResults(MapResults&&) noexcept = default;
  MapResults& operator=(MapResults&&) noexcept = default;
  ~MapResults() {
    for (auto& chunk : chunks_) chunk.cancel();
  }

  std::size_t size() const { return size_; }

  // The result of element `i`, blocking for it.
  const R& at(std::size_t i) const {
    const ChunkResult<R>& chunk = wait_chunk(i / chunksize_);
    const std::size_t offset = i % chunksize_;
    if (offset < chunk.values.size()) return chunk.values[offset];
    WEFT_CHECK(chunk.error != nullptr);  // a chunk stops short only at a failing element
    std::rethrow_exception(chunk.error);
  }

  // Every result, in input order (copies); throws like at().
  std::vector<R> to_vector() const {
    std::vector<R> out;
    out.reserve(size_);
    for (std::size_t i = 0; i < size_; ++i) out.push_back(at(i));
    return out;
  }

  class iterator {
   public:
    using value_type = R;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    iterator(const MapResults* owner, std::size_t i) : owner_(owner), i_(i) {}
    const R& operator*() const { return owner_->at(i_); }
    iterator& operator++() {
      ++i_;
      return *this;
    }
    iterator operator++(int) {
      iterator old = *this;
      ++i_;
      return old;
    }
    friend bool operator==(const iterator& a, const iterator& b) { return a.i_ == b.i_; }

   private:
    const MapResults* owner_ = nullptr;
    std::size_t i_ = 0;
  };
  iterator begin() const { return iterator(this, 0); }
  iterator end() const { return iterator(this, size_); }

 private:
  const ChunkResult<R>& wait_chunk(std::size_t c) const {
    const Future<ChunkResult<R>>& chunk = chunks_.at(c);
    if (!chunk.wait_for(std::chrono::duration_cast<Seconds>(deadline_.remaining()))) {
      throw TimeoutError("map: result " + std::to_string(c * chunksize_) +
                         " was not ready before the map's timeout; raise MapOptions::timeout");
    }
    return chunk.get();
  }

  std::vector<Future<ChunkResult<R>>> chunks_;
  std::size_t chunksize_;
  std::size_t size_;
  Deadline deadline_;
};

}  // namespace weft
