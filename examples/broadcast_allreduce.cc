// The chapter's torch.distributed listing, in C++: rank 0 broadcasts 123 to everyone, then
// every rank contributes its rank number to a sum all-reduce (0 + 1 + 2 = 3 with 3 ranks).
//
//   weftrun --nproc-per-node 3 build/release/examples/broadcast_allreduce   # processes
//   build/release/examples/broadcast_allreduce --threads 3                  # threads
//
// Expected output, in some order:
//   Process 0 received tensor: 123    (and 1, 2)
//   Process 0 received tensor: 3       (and 1, 2)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "weft/dist.h"
#include "weft/dist/init.h"

namespace {

void run(weft::dist::ProcessGroup& pg) {
  std::vector<float> tensor{0.0f};
  if (pg.rank() == 0) tensor[0] = 123.0f;
  pg.broadcast(tensor, /*src=*/0);
  std::printf("Process %d received tensor: %g\n", pg.rank(), tensor[0]);

  tensor[0] = static_cast<float>(pg.rank());
  pg.all_reduce(tensor, weft::dist::ReduceOp::kSum);
  std::printf("Process %d received tensor: %g\n", pg.rank(), tensor[0]);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::string(argv[1]) == "--threads") {
      weft::dist::run_threads(std::atoi(argv[2]), run);
    } else {
      run(*weft::dist::init_process_group());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "broadcast_allreduce: %s\n", e.what());
    return 1;
  }
  return 0;
}
