#include "weft/dist/algorithms/collectives.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>

#include "weft/base/check.h"
#include "weft/dist/algorithms/scratch.h"

namespace weft::dist::algorithms {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

std::size_t elem(const Buffer& b) { return dtype_size(b.dtype); }

// Element offsets of n nearly equal blocks of `count` (the first count % n get one more).
std::vector<std::size_t> split_offsets(std::size_t count, int n) {
  std::vector<std::size_t> offsets(static_cast<std::size_t>(n) + 1, 0);
  const std::size_t base = count / static_cast<std::size_t>(n);
  const std::size_t extra = count % static_cast<std::size_t>(n);
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
    offsets[i + 1] = offsets[i] + base + (i < extra ? 1 : 0);
  }
  return offsets;
}

std::vector<std::size_t> prefix_offsets(const std::vector<std::size_t>& counts) {
  std::vector<std::size_t> offsets(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), offsets.begin() + 1);
  return offsets;
}

// The rings move a block in pieces of about this size, the reduce-scatter reducing each as it
// arrives, so that while one is reduced the next lands in the transport's (the kernel's
// socket) buffers instead of stalling its sender, and no exchange overruns those buffers.
// Whole blocks of 32 MiB (a 64 MiB all-reduce on 2 ranks over tcp) measured 1.5-1.8x slower,
// and an all-gather's 99th percentile 2-3x higher (docs/PERFORMANCE.md).
constexpr std::size_t kRingPieceBytes = std::size_t{1} << 20;

// The elements of the largest block [offsets[i], offsets[i+1]).
std::size_t largest_block(const std::vector<std::size_t>& offsets) {
  std::size_t largest = 0;
  for (std::size_t i = 0; i + 1 < offsets.size(); ++i)
    largest = std::max(largest, offsets[i + 1] - offsets[i]);
  return largest;
}

// How many pieces each block of a ring step goes in: the same on every rank (it follows the
// largest block), and few enough that a reduce-scatter's and an all-gather's steps together
// stay within the kMaxSteps an operation may number. One where ranks share CPUs: there each
// exchange waits for its peer to be scheduled, and 1 MiB pieces made the 64 MiB all-reduce
// of 4 tcp ranks on 2 vCPUs 1.3-1.4x slower than whole blocks.
int ring_pieces(const Comm& c, std::size_t max_block_bytes, int n) {
  if (c.transport.ranks_share_cpus()) return 1;
  const auto wanted = static_cast<int>(
      std::min<std::size_t>((max_block_bytes + kRingPieceBytes - 1) / kRingPieceBytes, kMaxSteps));
  const int room = kMaxSteps / (2 * std::max(n - 1, 1));
  return std::max(1, std::min(wanted, room));
}

// One exchange of a ring: this rank sends elements [send_at, send_at + send_count) to the next
// rank and receives [recv_at, recv_at + recv_count) from the previous one, under `step`.
struct RingPiece {
  std::size_t send_at, send_count, recv_at, recv_count;
  int step;
};

// The ring's n - 1 steps over blocks [offsets[i], offsets[i+1]), each block in ring_pieces()
// pieces (piece p of a block is piece p of the same block on the rank it goes to), numbered
// from step_base; this rank sends block (rank + shift) mod n first. Calls fn(piece) in order
// and returns the first step it left unused.
template <class Fn>
int for_each_ring_piece(const Comm& c, const std::vector<std::size_t>& offsets, std::size_t es,
                        int shift, int step_base, Fn&& fn) {
  const int n = c.size();
  const int pieces = ring_pieces(c, largest_block(offsets) * es, n);
  for (int s = 0; s < n - 1; ++s) {
    const auto send_block = static_cast<std::size_t>(mod(c.rank - s + shift, n));
    const auto recv_block = static_cast<std::size_t>(mod(c.rank - s - 1 + shift, n));
    const auto send = split_offsets(offsets[send_block + 1] - offsets[send_block], pieces);
    const auto recv = split_offsets(offsets[recv_block + 1] - offsets[recv_block], pieces);
    for (std::size_t p = 0; p < static_cast<std::size_t>(pieces); ++p) {
      fn(RingPiece{offsets[send_block] + send[p], send[p + 1] - send[p],
                   offsets[recv_block] + recv[p], recv[p + 1] - recv[p],
                   step_base + s * pieces + static_cast<int>(p)});
    }
  }
  return step_base + (n - 1) * pieces;
}

// Ring reduce-scatter over blocks [offsets[i], offsets[i+1]) of `acc` (in place), each piece
// reduced as it arrives. After it, this rank's block (rank + shift + 1) mod n is fully
// reduced. Returns the first step it left unused.
int ring_reduce_scatter(const Comm& c, std::byte* acc, DType dtype,
                        const std::vector<std::size_t>& offsets, ReduceOp op, int shift,
                        int step_base) {
  const int n = c.size();
  const std::size_t es = dtype_size(dtype);
  std::byte* incoming = scratch(Scratch::kIncoming, largest_block(offsets) * es);
  const int next = mod(c.rank + 1, n);
  const int prev = mod(c.rank - 1, n);
  return for_each_ring_piece(c, offsets, es, shift, step_base, [&](const RingPiece& p) {
    c.send_recv(next, acc + p.send_at * es, p.send_count * es, prev, incoming, p.recv_count * es,
                p.step);
    reduce_into(acc + p.recv_at * es, incoming, p.recv_count, dtype, op);
  });
}

// Ring all-gather of blocks in place in `out`; this rank starts owning block
// (rank + shift) mod n.
void ring_all_gather(const Comm& c, std::byte* out, std::size_t es,
                     const std::vector<std::size_t>& offsets, int shift, int step_base) {
  const int n = c.size();
  const int next = mod(c.rank + 1, n);
  const int prev = mod(c.rank - 1, n);
  for_each_ring_piece(c, offsets, es, shift, step_base, [&](const RingPiece& p) {
    c.send_recv(next, out + p.send_at * es, p.send_count * es, prev, out + p.recv_at * es,
                p.recv_count * es, p.step);
  });
}

}  // namespace

void broadcast(const Comm& c, Buffer buf, int root) {
  const int n = c.size();
  const int vr = mod(c.rank - root, n);  // rank relative to the root
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      c.recv(mod(vr - mask + root, n), 0, buf.data, buf.size_bytes());
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vr + mask < n) c.send(mod(vr + mask + root, n), 0, buf.data, buf.size_bytes());
  }
}

void reduce(const Comm& c, Buffer buf, int root, ReduceOp op) {
  const int n = c.size();
  const int vr = mod(c.rank - root, n);
  const std::size_t bytes = buf.size_bytes();
  std::byte* acc = scratch(Scratch::kAccumulator, bytes);
  std::byte* incoming = scratch(Scratch::kIncoming, bytes);
  if (bytes > 0) std::memcpy(acc, buf.data, bytes);
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr & mask) {
      c.send(mod(vr - mask + root, n), 0, acc, bytes);
      return;  // non-roots keep their input
    }
    if (vr + mask < n) {
      c.recv(mod(vr + mask + root, n), 0, incoming, bytes);
      reduce_into(acc, incoming, buf.count, buf.dtype, op);
    }
  }
  if (bytes > 0) std::memcpy(buf.data, acc, bytes);
}

void all_reduce_reduce_broadcast(const Comm& c, Buffer buf, ReduceOp op) {
  // The reduced values travel from the root unchanged, so every rank ends bitwise equal.
  reduce(c, buf, 0, op);
  const Comm second{c.transport, c.members, c.rank, c.tag + 1, c.deadline};
  broadcast(second, buf, 0);
}

void all_reduce_recursive_doubling(const Comm& c, Buffer buf, ReduceOp op) {
  const int n = c.size();
  int pof2 = 1;
  while (pof2 * 2 <= n) pof2 *= 2;
  const int extra = n - pof2;  // ranks 0, 2, .., 2 extra - 2 fold into their odd neighbour
  const std::size_t bytes = buf.size_bytes();
  std::byte* acc = buf.bytes();
  std::byte* incoming = scratch(Scratch::kIncoming, bytes);
  const int folded_step = std::bit_width(static_cast<unsigned>(pof2));  // after the rounds
  if (c.rank < 2 * extra && c.rank % 2 == 0) {
    c.send(c.rank + 1, 0, acc, bytes);
    c.recv(c.rank + 1, folded_step, acc, bytes);
    return;
  }
  if (c.rank < 2 * extra) {
    c.recv(c.rank - 1, 0, incoming, bytes);
    reduce_pair(acc, incoming, acc, buf.count, buf.dtype, op);  // the lower rank's on the left
  }
  // Among the pof2 survivors, v is this rank's number; round k pairs v with v ^ 2^k. Each
  // pair combines its two halves lower half first, so every rank evaluates the same
  // expression and ends bitwise equal to the others, whatever the operation's rounding.
  const int v = c.rank < 2 * extra ? c.rank / 2 : c.rank - extra;
  const auto real = [extra](int w) { return w < extra ? 2 * w + 1 : w + extra; };
  for (int mask = 1, step = 1; mask < pof2; mask <<= 1, ++step) {
    const int partner = real(v ^ mask);
    c.send_recv(partner, acc, bytes, partner, incoming, bytes, step);
    if ((v & mask) == 0) {
      reduce_into(acc, incoming, buf.count, buf.dtype, op);
    } else {
      reduce_pair(acc, incoming, acc, buf.count, buf.dtype, op);
    }
  }
  if (c.rank < 2 * extra) c.send(c.rank - 1, folded_step, acc, bytes);
}

void all_reduce_ring(const Comm& c, Buffer buf, ReduceOp op) {
  const int n = c.size();
  const auto offsets = split_offsets(buf.count, n);
  const int steps =
      ring_reduce_scatter(c, buf.bytes(), buf.dtype, offsets, op, /*shift=*/0, /*step_base=*/0);
  // Rank r now owns block r + 1: all-gather starting from there.
  ring_all_gather(c, buf.bytes(), elem(buf), offsets, /*shift=*/1, /*step_base=*/steps);
}

void reduce_scatter(const Comm& c, Buffer out, Buffer in, ReduceOp op) {
  const int n = c.size();
  const std::size_t es = elem(in);
  std::byte* acc = scratch(Scratch::kAccumulator, in.size_bytes());
  if (in.size_bytes() > 0) std::memcpy(acc, in.data, in.size_bytes());
  std::vector<std::size_t> offsets(static_cast<std::size_t>(n) + 1);
  for (std::size_t i = 0; i <= static_cast<std::size_t>(n); ++i) offsets[i] = i * out.count;
  // shift -1: rank r ends owning block r.
  ring_reduce_scatter(c, acc, in.dtype, offsets, op, /*shift=*/-1, /*step_base=*/0);
  const std::size_t mine = offsets[static_cast<std::size_t>(c.rank)];
  if (out.count > 0) std::memmove(out.data, acc + mine * es, out.count * es);
}

void all_gather_v(const Comm& c, Buffer out, Buffer in, const std::vector<std::size_t>& counts) {
  const std::size_t es = elem(in);
  const auto offsets = prefix_offsets(counts);
  // memmove: `in` may already be this rank's block of `out` (in place).
  if (in.count > 0) {
    std::memmove(out.bytes() + offsets[static_cast<std::size_t>(c.rank)] * es, in.data,
                 in.size_bytes());
  }
  ring_all_gather(c, out.bytes(), es, offsets, /*shift=*/0, /*step_base=*/0);
}

void gather(const Comm& c, Buffer out, Buffer in, int root) {
  if (c.rank != root) {
    c.send(root, 0, in.data, in.size_bytes());
    return;
  }
  const std::size_t block = in.size_bytes();
  if (block > 0) std::memmove(out.bytes() + static_cast<std::size_t>(root) * block, in.data, block);
  for (int peer = 0; peer < c.size(); ++peer) {
    if (peer != root) c.recv(peer, 0, out.bytes() + static_cast<std::size_t>(peer) * block, block);
  }
}

void scatter(const Comm& c, Buffer out, Buffer in, int root) {
  const std::size_t block = out.size_bytes();
  if (c.rank != root) {
    c.recv(root, 0, out.data, block);
    return;
  }
  for (int peer = 0; peer < c.size(); ++peer) {
    if (peer != root) c.send(peer, 0, in.bytes() + static_cast<std::size_t>(peer) * block, block);
  }
  if (block > 0) std::memmove(out.data, in.bytes() + static_cast<std::size_t>(root) * block, block);
}

void all_to_all_v(const Comm& c, Buffer out, const std::vector<std::size_t>& out_counts, Buffer in,
                  const std::vector<std::size_t>& in_counts) {
  const int n = c.size();
  const std::size_t es = elem(in);
  const auto in_off = prefix_offsets(in_counts);
  const auto out_off = prefix_offsets(out_counts);
  // With out == in, receiving block k would overwrite data not sent yet: send from a copy.
  const std::byte* src = in.bytes();
  if (in.data == out.data && in.size_bytes() > 0) {
    std::byte* copy = scratch(Scratch::kAccumulator, in.size_bytes());
    std::memcpy(copy, in.data, in.size_bytes());
    src = copy;
  }
  const auto me = static_cast<std::size_t>(c.rank);
  if (in_counts[me] > 0) {
    std::memmove(out.bytes() + out_off[me] * es, src + in_off[me] * es, in_counts[me] * es);
  }
  for (int s = 1; s < n; ++s) {
    const auto to = static_cast<std::size_t>(mod(c.rank + s, n));
    const auto from = static_cast<std::size_t>(mod(c.rank - s, n));
    c.send_recv(static_cast<int>(to), src + in_off[to] * es, in_counts[to] * es,
                static_cast<int>(from), out.bytes() + out_off[from] * es, out_counts[from] * es, 0);
  }
}

void barrier(const Comm& c) {
  const int n = c.size();
  for (int k = 1, step = 0; k < n; k <<= 1, ++step) {
    c.send(mod(c.rank + k, n), step, nullptr, 0);
    c.recv(mod(c.rank - k, n), step, nullptr, 0);
  }
}

void reference_all_reduce(const Comm& c, Buffer buf, ReduceOp op) {
  const int n = c.size();
  const std::size_t bytes = buf.size_bytes();
  if (c.rank != 0) {
    c.send(0, 0, buf.data, bytes);
    c.recv(0, 1, buf.data, bytes);
    return;
  }
  std::byte* incoming = scratch(Scratch::kIncoming, bytes);
  for (int peer = 1; peer < n; ++peer) {
    c.recv(peer, 0, incoming, bytes);
    reduce_into(buf.data, incoming, buf.count, buf.dtype, op);
  }
  for (int peer = 1; peer < n; ++peer) c.send(peer, 1, buf.data, bytes);
}

}  // namespace weft::dist::algorithms
