// DirectCollectives: collectives a transport runs over memory every rank can read, instead
// of through send/recv (the shm transport's shared-memory engine). A transport hands one
// out to the group of all its ranks (Transport::take_direct_collectives); ProcessGroup uses
// it for the operations below and the generic algorithms for everything else.
//
// The contract is ProcessGroup's, after its validation: equal counts and dtypes on every
// rank, 16-bit floats already widened to float32, kAvg already turned into kSum. Results
// are reduced in rank order (rank 0's data first), so they are identical on every rank and
// independent of timing. Each call blocks until `deadline` at most: PeerTimeout names the
// rank waited for, PeerError says a peer died or the job aborted.
#pragma once

#include "weft/base/deadline.h"
#include "weft/dist/buffer.h"
#include "weft/dist/reduce_op.h"

namespace weft::dist {

class DirectCollectives {
 public:
  virtual ~DirectCollectives() = default;

  virtual void all_reduce(Buffer buf, ReduceOp op, const Deadline& deadline) = 0;
  virtual void broadcast(Buffer buf, int root, const Deadline& deadline) = 0;
  // Only the root's `buf` receives the result.
  virtual void reduce(Buffer buf, int root, ReduceOp op, const Deadline& deadline) = 0;
  // out holds size() blocks of in.count; `in` may alias this rank's block of `out`.
  virtual void all_gather(Buffer out, Buffer in, const Deadline& deadline) = 0;
  // in holds size() blocks of out.count; this rank gets the reduction of its block.
  virtual void reduce_scatter(Buffer out, Buffer in, ReduceOp op, const Deadline& deadline) = 0;
  // in and out hold size() blocks; block j of `in` goes to rank j. out may equal in.
  virtual void all_to_all(Buffer out, Buffer in, const Deadline& deadline) = 0;
  virtual void barrier(const Deadline& deadline) = 0;
};

}  // namespace weft::dist
