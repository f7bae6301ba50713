#include "weft/dist/mpi/mpi_engine.h"

#include <limits>
#include <vector>

#include "weft/dist/mpi/mpi_check.h"

namespace weft::dist {
namespace {

MPI_Datatype g_half = MPI_DATATYPE_NULL;
MPI_Datatype g_bfloat16 = MPI_DATATYPE_NULL;
MPI_Op g_half_ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // sum prod min max

template <class H>
void combine(const void* in, void* inout, int length, ReduceOp op) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < length; ++i) {
    const float x = static_cast<float>(a[i]);
    const float y = static_cast<float>(b[i]);
    float r = x + y;
    if (op == ReduceOp::kProduct) r = x * y;
    if (op == ReduceOp::kMin) r = x < y ? x : y;
    if (op == ReduceOp::kMax) r = x > y ? x : y;
    b[i] = H(r);
  }
}

// MPI's user-function signature: inout[i] = in[i] op inout[i].
template <ReduceOp kOp>
void half_op(void* in, void* inout, int* length, MPI_Datatype* type) {
  if (*type == g_bfloat16) return combine<BFloat16>(in, inout, *length, kOp);
  combine<Half>(in, inout, *length, kOp);
}

int int_count(std::size_t count, const char* what) {
  if (count > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw InvalidArgument(std::string("mpi: ") + what + " of " + std::to_string(count) +
                          " elements exceeds MPI's int counts (2^31 - 1); split it");
  }
  return static_cast<int>(count);
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    case DType::kInt8:
      return MPI_INT8_T;
    case DType::kUInt8:
      return MPI_UINT8_T;
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kInt64:
      return MPI_INT64_T;
    case DType::kFloat16:
      return g_half;
    case DType::kBFloat16:
      return g_bfloat16;
  }
  throw InvalidArgument("mpi: unknown dtype");
}

MPI_Op mpi_op(ReduceOp op, DType t) {
  const bool half = t == DType::kFloat16 || t == DType::kBFloat16;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // ProcessGroup divides afterwards
      return half ? g_half_ops[0] : MPI_SUM;
    case ReduceOp::kProduct:
      return half ? g_half_ops[1] : MPI_PROD;
    case ReduceOp::kMin:
      return half ? g_half_ops[2] : MPI_MIN;
    case ReduceOp::kMax:
      return half ? g_half_ops[3] : MPI_MAX;
    case ReduceOp::kBAnd:
      return MPI_BAND;
    case ReduceOp::kBOr:
      return MPI_BOR;
    case ReduceOp::kBXor:
      return MPI_BXOR;
  }
  throw InvalidArgument("mpi: unknown reduce op");
}

// Counts and displacements (in elements) for the _v calls.
struct IntLayout {
  std::vector<int> counts, displacements;
};

IntLayout int_layout(const std::vector<std::size_t>& counts, const char* what) {
  IntLayout layout;
  std::size_t at = 0;
  for (std::size_t c : counts) {
    layout.counts.push_back(int_count(c, what));
    layout.displacements.push_back(int_count(at, what));
    at += c;
  }
  int_count(at, what);
  return layout;
}

// A copy of `in` when it shares memory with `out`: MPI forbids overlapping buffers.
const void* apart_from(const Buffer& in, const Buffer& out, std::vector<std::byte>& copy) {
  const auto* a = in.bytes();
  const auto* b = out.bytes();
  if (in.size_bytes() == 0 || a + in.size_bytes() <= b || b + out.size_bytes() <= a) return a;
  copy.assign(a, a + in.size_bytes());
  return copy.data();
}

}  // namespace

void MpiEngine::create_16bit_types() {
  if (g_half != MPI_DATATYPE_NULL) return;
  check_mpi(MPI_Type_contiguous(2, MPI_BYTE, &g_half), "MPI_Type_contiguous");
  check_mpi(MPI_Type_commit(&g_half), "MPI_Type_commit");
  check_mpi(MPI_Type_contiguous(2, MPI_BYTE, &g_bfloat16), "MPI_Type_contiguous");
  check_mpi(MPI_Type_commit(&g_bfloat16), "MPI_Type_commit");
  MPI_Op_create(&half_op<ReduceOp::kSum>, 1, &g_half_ops[0]);
  MPI_Op_create(&half_op<ReduceOp::kProduct>, 1, &g_half_ops[1]);
  MPI_Op_create(&half_op<ReduceOp::kMin>, 1, &g_half_ops[2]);
  MPI_Op_create(&half_op<ReduceOp::kMax>, 1, &g_half_ops[3]);
}

MpiEngine::MpiEngine(MPI_Comm comm, std::shared_ptr<MpiWatchdog> watchdog)
    : comm_(comm), watchdog_(std::move(watchdog)) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiEngine::~MpiEngine() { MPI_Comm_free(&comm_); }

void MpiEngine::broadcast(Buffer buf, int root, const OpContext& op) {
  const MpiWatchdog::Guard guard(*watchdog_, op.deadline, "MPI_Bcast");
  check_mpi(
      MPI_Bcast(buf.data, int_count(buf.count, "broadcast"), mpi_type(buf.dtype), root, comm_),
      "MPI_Bcast");
}

void MpiEngine::all_reduce(Buffer buf, ReduceOp reduce, const OpContext& op) {
  const MpiWatchdog::Guard guard(*watchdog_, op.deadline, "MPI_Allreduce");
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, buf.data, int_count(buf.count, "all_reduce"),
                          mpi_type(buf.dtype), mpi_op(reduce, buf.dtype), comm_),
            "MPI_Allreduce");
}

void MpiEngine::reduce(Buffer buf, int root, ReduceOp reduce, const OpContext& op) {
  const int count = int_count(buf.count, "reduce");
  // Only the root's buffer is written: the others' are send buffers, read only.
  const void* send = rank_ == root ? MPI_IN_PLACE : buf.data;
  void* receive = rank_ == root ? buf.data : nullptr;
  const MpiWatchdog::Guard guard(*watchdog_, op.deadline, "MPI_Reduce");
  check_mpi(
      MPI_Reduce(send, receive, count, mpi_type(buf.dtype), mpi_op(reduce, buf.dtype), root, comm_),
      "MPI_Reduce");
}

void MpiEngine::all_gather(Buffer out, Buffer in, const OpContext& op) {
  const int count = int_count(in.count, "all_gather");
  int_count(out.count, "all_gather");
  const MPI_Datatype type = mpi_type(in.dtype);
  // `in` may already be this rank's block of `out`: MPI calls that in place.
  const bool in_place =
      in.bytes() == out.bytes() + static_cast<std::size_t>(rank_) * in.size_bytes();
  const MpiWatchdog::Guard guard(*watchdog_, op.deadline, "MPI_Allgather");
  check_mpi(
      MPI_Allgather(in_place ? MPI_IN_PLACE : in.data, count, type, out.data, count, type, comm_),
      "MPI_Allgather");
}

void MpiEngine::all_gather_v(Buffer out, Buffer in, const std::vector<std::size_t>& counts,
                             const OpContext& op) {
  const IntLayout layout = int_layout(counts, "all_gather");
  const MPI_Datatype type = mpi_type(in.dtype);
  const std::byte* mine = out.bytes() + static_cast<std::size_t>(
                                            layout.displacements[static_cast<std::size_t>(rank_)]) *
                                            dtype_size(in.dtype);
  // `in` may already be this rank's block of `out`: MPI calls that in place.
  const void* send = in.bytes() == mine ? MPI_IN_PLACE : in.data;
  const MpiWatchdog::Guard guard(*watchdog_, op.deadline, "MPI_Allgatherv");
  check_mpi(MPI_Allgatherv(send, int_count(in.count, "all_gather"), type, out.data,
                           layout.counts.data(), layout.displacements.data(), type, comm_),
            "MPI_Allgatherv");
}

void MpiEngine::gather(Buffer out, Buffer in, int root, const OpContext& op) {
  const int count = int_count(in.count, "gather");
  const MPI_Datatype type = mpi_type(in.dtype);
  std::vector<std::byte> copy;
  const void* send = rank_ == root ? apart_from(in, out, copy) : in.data;
  const MpiWatchdog::Guard guard(*watchdog_, op.deadline, "MPI_Gather");
  check_mpi(
      MPI_Gather(send, count, type, rank_ == root ? out.data : nullptr, count, type, root, comm_),
      "MPI_Gather");
}

void MpiEngine::scatter(Buffer out, Buffer in, int root, const OpContext& op) {
  const int count = int_count(out.count, "scatter");
  const MPI_Datatype type = mpi_type(out.dtype);
  std::vector<std::byte> copy;
  const void* send = rank_ == root ? apart_from(in, out, copy) : nullptr;
  const MpiWatchdog::Guard guard(*watchdog_, op.deadline, "MPI_Scatter");
  check_mpi(MPI_Scatter(send, count, type, out.data, count, type, root, comm_), "MPI_Scatter");
}

void MpiEngine::reduce_scatter(Buffer out, Buffer in, ReduceOp reduce, const OpContext& op) {
  std::vector<std::byte> copy;
  const void* send = apart_from(in, out, copy);
  const MpiWatchdog::Guard guard(*watchdog_, op.deadline, "MPI_Reduce_scatter_block");
  check_mpi(MPI_Reduce_scatter_block(send, out.data, int_count(out.count, "reduce_scatter"),
                                     mpi_type(out.dtype), mpi_op(reduce, out.dtype), comm_),
            "MPI_Reduce_scatter_block");
}

void MpiEngine::all_to_all(Buffer out, Buffer in, const OpContext& op) {
  const int block = int_count(in.count / static_cast<std::size_t>(size_), "all_to_all");
  int_count(in.count, "all_to_all");
  const MPI_Datatype type = mpi_type(in.dtype);
  std::vector<std::byte> copy;
  const void* send = apart_from(in, out, copy);
  const MpiWatchdog::Guard guard(*watchdog_, op.deadline, "MPI_Alltoall");
  check_mpi(MPI_Alltoall(send, block, type, out.data, block, type, comm_), "MPI_Alltoall");
}

void MpiEngine::all_to_all_v(Buffer out, const std::vector<std::size_t>& out_counts, Buffer in,
                             const std::vector<std::size_t>& in_counts, const OpContext& op) {
  const IntLayout sent = int_layout(in_counts, "all_to_all");
  const IntLayout received = int_layout(out_counts, "all_to_all");
  const MPI_Datatype type = mpi_type(in.dtype);
  std::vector<std::byte> copy;
  const void* send = apart_from(in, out, copy);
  const MpiWatchdog::Guard guard(*watchdog_, op.deadline, "MPI_Alltoallv");
  check_mpi(MPI_Alltoallv(send, sent.counts.data(), sent.displacements.data(), type, out.data,
                          received.counts.data(), received.displacements.data(), type, comm_),
            "MPI_Alltoallv");
}

void MpiEngine::barrier(const OpContext& op) {
  const MpiWatchdog::Guard guard(*watchdog_, op.deadline, "MPI_Barrier");
  check_mpi(MPI_Barrier(comm_), "MPI_Barrier");
}

}  // namespace weft::dist
