// Under mpirun -np 2 on the mpi backend: rank 1 misses rank 0's all-reduce. Rank 0 must time
// out (TimeoutError) instead of waiting forever, and rank 1's next collective must fail with
// the PeerError rank 0's failure sent it. Each prints what it caught;
// tests/dist/CMakeLists.txt checks the lines.
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "weft/dist.h"

int main() {
  using weft::dist::PeerError;
  auto pg = weft::dist::init_process_group({.backend = "mpi"});
  pg->set_timeout(weft::Seconds(2));
  std::vector<float> v{1.0f};
  if (pg->rank() == 0) {
    try {
      pg->all_reduce(v);
      std::printf("rank 0: no error\n");
    } catch (const weft::TimeoutError& e) {
      std::printf("rank 0: TimeoutError: %s\n", e.what());
    }
    // A rank that ends without MPI_Finalize makes mpirun kill the others: stay until rank 1
    // has seen the failure.
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(4));
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(4));
    try {
      pg->barrier();
      std::printf("rank 1: no error\n");
    } catch (const PeerError& e) {
      std::printf("rank 1: PeerError: %s\n", e.what());
    }
  }
  std::fflush(stdout);
  return 0;
}
