#include "weft/train/recovery_state.h"

#include <algorithm>
#include <bit>
#include <string>

#include "weft/base/error.h"

namespace weft::train {
namespace {

// The tags of a copy's two messages: its stamp (and size), then its block.
constexpr int kStampTag = 7001;
constexpr int kBlockTag = 7002;
// A block this many floats or more is no training state of this machine's (a length read from
// the wire is checked before it is used).
constexpr std::int64_t kMostFloats = std::int64_t{1} << 40;

std::vector<Tensor> views_of(const Tensor& block, const std::vector<parallel::StatePiece>& layout) {
  std::vector<Tensor> pieces;
  std::int64_t at = 0;
  for (const parallel::StatePiece& p : layout) {
    const std::int64_t n = shape_numel(p.sizes);
    pieces.push_back(block.narrow(0, at, n).view(p.sizes));
    at += n;
  }
  return pieces;
}

dist::Buffer floats(Tensor& block) {
  return {block.data<float>(), static_cast<std::size_t>(block.numel()), DType::kFloat32};
}

void send_copy(dist::ProcessGroup& world, int to, const StepStamp& stamp, Tensor& block) {
  std::vector<std::int64_t> header = stamp.encode();
  header.push_back(block.numel());
  world.send(header, to, kStampTag);
  world.send(floats(block), to, kBlockTag);
}

// The stamp of a copy from `from`, its block received into `block`: made the sender's size, or
// when `expected` is given (a replacement's pieces), of that size.
StepStamp receive_copy(dist::ProcessGroup& world, int from, Tensor& block,
                       std::int64_t expected = -1) {
  std::vector<std::int64_t> header(StepStamp::kWords + 1);
  world.recv(header, from, kStampTag);
  const std::int64_t n = header.back();
  if (n < 0 || n >= kMostFloats || (expected >= 0 && n != expected)) {
    throw Error("in-place recovery: rank " + std::to_string(from) + " announced a copy of " +
                std::to_string(n) + " floats" +
                (expected >= 0 ? " for pieces of " + std::to_string(expected) : std::string()));
  }
  if (block.numel() != n) block = Tensor::zeros({n});
  world.recv(floats(block), from, kBlockTag);
  header.pop_back();
  return StepStamp::decode(header);
}

// The newest step at which every rank has a copy of its own, or its buddy has one of it:
// `offers` holds each rank's own copies' steps, then its held copies' (-1: none).
std::int64_t newest_common_step(const std::vector<std::int64_t>& offers, int size) {
  std::vector<std::int64_t> steps;
  for (int q = 0; q < size; ++q) {
    for (int k = 0; k < 2; ++k) steps.push_back(offers[4 * static_cast<std::size_t>(q) + k]);
  }
  std::sort(steps.rbegin(), steps.rend());
  for (const std::int64_t step : steps) {
    if (step < 0) break;
    bool every = true;
    for (int q = 0; q < size && every; ++q) {
      const std::size_t mine = 4 * static_cast<std::size_t>(q);
      const std::size_t buddys = 4 * static_cast<std::size_t>((q + 1) % size) + 2;
      every = offers[mine] == step || offers[mine + 1] == step || offers[buddys] == step ||
              offers[buddys + 1] == step;
    }
    if (every) return step;
  }
  return -1;
}

}  // namespace

StateCopy state_copy(parallel::TrainingState& state, bool fill) {
  const std::vector<parallel::StatePiece> layout = state.layout();
  std::int64_t total = 0;
  for (const parallel::StatePiece& p : layout) total += shape_numel(p.sizes);
  StateCopy copy{.block = Tensor::zeros({total})};
  copy.pieces = views_of(copy.block, layout);
  if (fill) state.copy(copy.pieces);
  return copy;
}

std::vector<std::int64_t> StepStamp::encode() const {
  return {train.step,
          train.samples_drawn,
          std::bit_cast<std::int64_t>(train.lr),
          optimizer_steps,
          std::bit_cast<std::int64_t>(peak_gflops),
          std::bit_cast<std::int64_t>(loss),
          std::bit_cast<std::int64_t>(grad_norm),
          std::bit_cast<std::int64_t>(seconds)};
}

StepStamp StepStamp::decode(const std::vector<std::int64_t>& w) {
  if (w.size() != kWords) {
    throw Error("in-place recovery: a step's stamp of " + std::to_string(w.size()) +
                " words, not " + std::to_string(kWords));
  }
  return {.train = {.step = w[0], .samples_drawn = w[1], .lr = std::bit_cast<double>(w[2])},
          .optimizer_steps = w[3],
          .peak_gflops = std::bit_cast<double>(w[4]),
          .loss = std::bit_cast<double>(w[5]),
          .grad_norm = std::bit_cast<double>(w[6]),
          .seconds = std::bit_cast<double>(w[7])};
}

BuddyCopies::Copy& BuddyCopies::oldest(Copy (&pair)[2]) {
  return pair[0].stamp.train.step <= pair[1].stamp.train.step ? pair[0] : pair[1];
}

BuddyCopies::Copy* BuddyCopies::at(Copy (&pair)[2], std::int64_t step) {
  for (Copy& c : pair) {
    if (c.stamp.train.step == step) return &c;
  }
  return nullptr;
}

void BuddyCopies::take(dist::ProcessGroup& world, parallel::TrainingState& state,
                       const StepStamp& stamp) {
  Copy& own = oldest(own_);
  own.stamp = StepStamp{};  // no copy while it is overwritten
  if (own.block.numel() == 0) {
    own.block = state_copy(state, true).block;
  } else {
    std::vector<Tensor> pieces = views_of(own.block, state.layout());
    state.copy(pieces);
  }
  own.stamp = stamp;
  ++takes_;
  const int n = world.size(), r = world.rank();
  if (n == 1) return;
  Copy& held = oldest(held_);
  held.stamp = StepStamp{};
  // Every rank sends before it receives: the sends run on the group's thread.
  std::vector<std::int64_t> header = stamp.encode();
  header.push_back(own.block.numel());
  const std::shared_ptr<dist::Work> sends[] = {
      world.send_async(header, (r + 1) % n, kStampTag),
      world.send_async(floats(own.block), (r + 1) % n, kBlockTag)};
  StepStamp got;
  try {
    got = receive_copy(world, (r + n - 1) % n, held.block);
  } catch (...) {
    // The sends read `header` and the block: they end before either goes.
    for (const auto& work : sends) {
      try {
        work->wait();
      } catch (const std::exception&) {  // the same failure, reported by the receive
      }
    }
    throw;
  }
  for (const auto& work : sends) work->wait();
  if (got.train.step != stamp.train.step) {
    throw Error("in-place recovery: rank " + std::to_string((r + n - 1) % n) +
                " sent its copy of step " + std::to_string(got.train.step) + " while this rank " +
                "copied step " + std::to_string(stamp.train.step));
  }
  held.stamp = got;
}

StepStamp BuddyCopies::restore(dist::ProcessGroup& world, parallel::TrainingState& state) {
  const int n = world.size(), r = world.rank();
  std::vector<std::int64_t> mine{own_[0].stamp.train.step, own_[1].stamp.train.step,
                                 held_[0].stamp.train.step, held_[1].stamp.train.step};
  std::vector<std::int64_t> offers(4 * static_cast<std::size_t>(n));
  world.all_gather(offers, mine);
  const std::int64_t step = newest_common_step(offers, n);
  if (step < 0) {
    throw Error(
        "in-place recovery: no step at which every rank's training state survives in memory "
        "(two neighbouring ranks died, or no copy had been taken yet); weftrun restarts every "
        "worker from the newest checkpoint instead");
  }
  const auto owns = [&](int q) {
    return offers[4 * static_cast<std::size_t>(q)] == step ||
           offers[4 * static_cast<std::size_t>(q) + 1] == step;
  };
  // A rank without its own copy of `step` gets it from its buddy, the next rank.
  StateCopy received;
  StepStamp stamp;
  for (int q = 0; q < n; ++q) {
    if (owns(q)) continue;
    const int buddy = (q + 1) % n;
    if (r == buddy) {
      Copy* held = at(held_, step);
      send_copy(world, q, held->stamp, held->block);
    } else if (r == q) {
      received = state_copy(state, false);
      stamp = receive_copy(world, buddy, received.block, received.block.numel());
    }
  }
  if (owns(r)) {
    const Copy* own = at(own_, step);
    stamp = own->stamp;
    state.load(views_of(own->block, state.layout()), stamp.optimizer_steps);
  } else {
    state.load(received.pieces, stamp.optimizer_steps);
  }
  take(world, state, stamp);  // the replacement's pieces need a buddy too
  return stamp;
}

std::int64_t BuddyCopies::bytes() const {
  std::int64_t total = 0;
  for (const Copy* c : {&own_[0], &own_[1], &held_[0], &held_[1]})
    total += static_cast<std::int64_t>(c->block.nbytes());
  return total;
}

}  // namespace weft::train
