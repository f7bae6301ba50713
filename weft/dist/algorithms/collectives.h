// The collective algorithms, written once against Transport (through Comm) and run by the
// generic engine (weft/dist/engine/generic_engine.h), which also picks between them. Buffers are
// already validated by ProcessGroup; 16-bit floats arrive widened to float32 for the reducing ones.
// Costs (alpha: latency per message, beta: time per byte, n ranks, m bytes) are in
// docs/COLLECTIVES.md.
#pragma once

#include <cstddef>
#include <vector>

#include "weft/dist/algorithms/comm.h"
#include "weft/dist/buffer.h"
#include "weft/dist/reduce_op.h"

namespace weft::dist::algorithms {

// Binomial tree from `root`: ceil(log2 n) rounds.
void broadcast(const Comm& c, Buffer buf, int root);
// Binomial tree towards `root`; only the root's `buf` receives the result.
void reduce(const Comm& c, Buffer buf, int root, ReduceOp op);
// Reduce to rank 0, then broadcast: 2 ceil(log2 n) rounds of the whole buffer.
void all_reduce_reduce_broadcast(const Comm& c, Buffer buf, ReduceOp op);
// Recursive doubling: ceil(log2 n) exchange rounds of the whole buffer, every rank reducing,
// plus a round before and after for the n - 2^floor(log2 n) ranks folded into a neighbour.
// Every rank evaluates the same expression tree, so results agree bitwise.
void all_reduce_recursive_doubling(const Comm& c, Buffer buf, ReduceOp op);
// Ring reduce-scatter + ring all-gather: 2 (n - 1) rounds of count / n elements, each block
// moved in pieces of about 1 MiB (the reduce-scatter reducing each as it arrives); needs
// count >= n to be worth it (every block non-empty). Each element's sum is the ring's order
// whatever the pieces, so results are those of whole blocks.
void all_reduce_ring(const Comm& c, Buffer buf, ReduceOp op);
// Ring reduce-scatter (in pieces, as above): `in` holds n blocks of out.count elements; rank r
// gets block r.
void reduce_scatter(const Comm& c, Buffer out, Buffer in, ReduceOp op);
// Ring all-gather (in pieces, as above) of blocks of (possibly different) sizes: block r is
// `in`, at offset sum(counts[0..r)) of `out`.
void all_gather_v(const Comm& c, Buffer out, Buffer in, const std::vector<std::size_t>& counts);
// Direct: every rank sends to (or receives from) the root.
void gather(const Comm& c, Buffer out, Buffer in, int root);
void scatter(const Comm& c, Buffer out, Buffer in, int root);
// Pairwise exchange in n - 1 rounds; counts in elements, per peer.
void all_to_all_v(const Comm& c, Buffer out, const std::vector<std::size_t>& out_counts, Buffer in,
                  const std::vector<std::size_t>& in_counts);
// Dissemination: ceil(log2 n) rounds of empty messages.
void barrier(const Comm& c);

// The naive reference every algorithm is tested against: gather to rank 0, reduce there in
// rank order, broadcast back.
void reference_all_reduce(const Comm& c, Buffer buf, ReduceOp op);

}  // namespace weft::dist::algorithms
