#include "weft/parallel/context_parallel.h"

#include <string>

#include "weft/base/error.h"
#include "weft/parallel/timed.h"

namespace weft::parallel {

// Both halves of the shift, waited for together; the buffers must outlive them, so a shift
// dropped unwaited still waits.
class ProcessGroupContextParallel::Started : public nn::ContextParallelGroup::Pending {
 public:
  Started(ProcessGroupContextParallel& owner, std::shared_ptr<dist::Work> send,
          std::shared_ptr<dist::Work> recv)
      : owner_(owner), send_(std::move(send)), recv_(std::move(recv)) {}
  ~Started() override {
    try {
      if (send_) send_->wait();
      if (recv_) recv_->wait();
    } catch (const std::exception&) {
      // The group reported it to whoever waited; a destructor cannot.
    }
  }
  void wait() override {
    add_seconds(owner_.seconds_, [&] {
      recv_->wait();
      send_->wait();
    });
    recv_.reset();
    send_.reset();
  }

 private:
  ProcessGroupContextParallel& owner_;
  std::shared_ptr<dist::Work> send_, recv_;
};

std::unique_ptr<nn::ContextParallelGroup::Pending> ProcessGroupContextParallel::ring_shift_async(
    const float* send, float* recv, std::int64_t n, int tag) {
  const int size = group_.size(), next = (rank() + 1) % size, prev = (rank() + size - 1) % size;
  const auto count = static_cast<std::size_t>(n);
  // The group runs its operations in the order they are posted, and a send does not wait for
  // its receiver: sending first, every rank's send is out before any rank blocks receiving.
  auto s =
      group_.send_async(dist::Buffer(const_cast<float*>(send), count, DType::kFloat32), next, tag);
  auto r = group_.recv_async(dist::Buffer(recv, count, DType::kFloat32), prev, tag);
  return std::make_unique<Started>(*this, std::move(s), std::move(r));
}

void ProcessGroupContextParallel::all_gather(const float* in, float* out, std::int64_t n) {
  add_seconds(seconds_, [&] {
    group_.all_gather(
        dist::Buffer(out, static_cast<std::size_t>(n * size()), DType::kFloat32),
        dist::Buffer(const_cast<float*>(in), static_cast<std::size_t>(n), DType::kFloat32));
  });
}

void ProcessGroupContextParallel::reduce_scatter(const float* in, float* out, std::int64_t n) {
  add_seconds(seconds_, [&] {
    group_.reduce_scatter(
        dist::Buffer(out, static_cast<std::size_t>(n), DType::kFloat32),
        dist::Buffer(const_cast<float*>(in), static_cast<std::size_t>(n * size()), DType::kFloat32),
        dist::ReduceOp::kSum);
  });
}

void ProcessGroupContextParallel::all_to_all(const float* in, float* out, std::int64_t n) {
  const auto count = static_cast<std::size_t>(n * size());
  add_seconds(seconds_, [&] {
    group_.all_to_all(dist::Buffer(out, count, DType::kFloat32),
                      dist::Buffer(const_cast<float*>(in), count, DType::kFloat32));
  });
}

std::vector<std::int32_t> context_parallel_rows(const std::int32_t* rows, std::int64_t batch,
                                                std::int64_t seq, int rank, int size, int groups) {
  if (seq % (2 * size) != 0) {
    throw InvalidArgument("context parallelism cuts each sequence into 2 x " +
                          std::to_string(size) + " equal chunks: the sequence length " +
                          std::to_string(seq) + " must be a multiple of " +
                          std::to_string(2 * size));
  }
  if (groups < 1 || batch % groups != 0) {
    throw InvalidArgument("context parallelism: " + std::to_string(batch) +
                          " sequences do not split into " + std::to_string(groups) +
                          " equal micro-batches");
  }
  const std::int64_t chunk = seq / (2 * size), per_group = batch / groups;
  std::vector<std::int32_t> out;
  out.reserve(static_cast<std::size_t>(batch * 2 * chunk));
  for (std::int64_t g = 0; g < groups; ++g) {
    for (const std::int64_t c : {std::int64_t{rank}, std::int64_t{2 * size - 1 - rank}}) {
      for (std::int64_t b = g * per_group; b < (g + 1) * per_group; ++b) {
        const std::int32_t* from = rows + b * seq + c * chunk;
        out.insert(out.end(), from, from + chunk);
      }
    }
  }
  return out;
}

}  // namespace weft::parallel
