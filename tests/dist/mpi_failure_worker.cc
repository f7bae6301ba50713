// Under mpirun -np 2 on the mpi backend: rank 1 never joins rank 0's all-reduce. MPI cannot
// time the call out, so rank 0's watchdog must end the job once the operation's 2 s timeout
// has passed, saying which call it was, instead of letting it wait forever;
// tests/dist/CMakeLists.txt checks the message.
#include <chrono>
#include <thread>
#include <vector>

#include "weft/dist.h"

int main() {
  auto pg = weft::dist::init_process_group({.backend = "mpi"});
  pg->set_timeout(weft::Seconds(2));
  if (pg->rank() == 0) {
    std::vector<float> v{1.0f};
    pg->all_reduce(v);
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(30));  // ended by rank 0's abort first
  }
  return 0;
}
