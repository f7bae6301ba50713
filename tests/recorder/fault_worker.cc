// A worker for the flight recorder's fault suite (faults_test.cc), started by weftrun with
// 2 ranks: each makes a few all-reduces, then rank 1 commits the fault its argument names.
//   missing   rank 1 leaves before all-reduce #3; rank 0 waits in it
//   extra     rank 0 makes one all-reduce more than rank 1
//   size      rank 1's all-reduce #3 has 8 elements, rank 0's 4
//   dtype     rank 1's all-reduce #3 is of int32, rank 0's float32 (debug mode)
//   op        rank 1's all-reduce #3 takes the max, rank 0's the sum (debug mode)
//   root      broadcast #3 from rank 0 on rank 0, from rank 1 on rank 1 (debug mode)
//   collective  rank 1 calls broadcast where rank 0 calls all_reduce (#3)
//   stop      rank 1 stops itself (SIGSTOP) before all-reduce #3
//   kill      rank 1 is killed (SIGKILL) before all-reduce #3
//   subgroup  the same as missing, on a subgroup of both ranks ("world/0")
//   order     rank 0 all-reduces on the world, then on the subgroup; rank 1 the other way
//   p2p       each rank receives from the other, and neither sends
//   teardown  rank 1 hangs at exit, after every collective (a static destructor that waits)
//   straggler rank 1 arrives 40 ms late at each of 12 all-reduces; the job succeeds
//   pipeline  two pipeline stages pass activations forward and gradients back; stage 1 gets
//             stuck computing micro-batch 2, and stage 0 waits for its gradient
// Every collective is labelled with its number (FlightRecorder::Site: "step N").
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "weft/dist.h"
#include "weft/recorder/flight_recorder.h"

using weft::dist::ProcessGroup;
using weft::dist::ReduceOp;
using weft::recorder::FlightRecorder;

namespace {

void all_reduce(ProcessGroup& pg, int count, ReduceOp op = ReduceOp::kSum) {
  std::vector<float> v(static_cast<std::size_t>(count), 1.0f);
  pg.all_reduce(v, op);
}

// Collective #3 (after #0-#2 made alike) as `fault` has rank `rank` make it; false: none.
bool faulty_step(ProcessGroup& pg, const std::string& fault, int rank) {
  if (rank == 1 && (fault == "missing" || fault == "subgroup")) return false;
  if (rank == 1 && fault == "stop") ::raise(SIGSTOP);
  if (fault == "p2p") {
    std::vector<float> v(4);
    pg.recv(v, 1 - rank);
    return true;
  }
  if (rank == 1 && fault == "kill") {
    // Killed while rank 0 waits in #3, as a rank dying mid-job leaves the others: on a busy
    // machine rank 0 may otherwise not have reached #3 when weftrun reads the rings.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ::raise(SIGKILL);
  }
  if (rank == 1 && fault == "size") {
    all_reduce(pg, 8);
  } else if (rank == 1 && fault == "dtype") {
    std::vector<int> v(4, 1);
    pg.all_reduce(v);
  } else if (rank == 1 && fault == "op") {
    all_reduce(pg, 4, ReduceOp::kMax);
  } else if (rank == 1 && fault == "collective") {
    std::vector<float> v(4, 1.0f);
    pg.broadcast(v, 0);
  } else if (fault == "root") {
    std::vector<float> v(4, 1.0f);
    pg.broadcast(v, rank);
  } else {
    all_reduce(pg, 4);
  }
  return true;
}

// A hang in teardown: a static object whose destructor never returns.
struct HangAtExit {
  bool armed = false;
  ~HangAtExit() {
    while (armed) ::pause();
  }
};
HangAtExit hang_at_exit;

void straggle(ProcessGroup& pg, int rank) {
  for (int step = 0; step < 12; ++step) {
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(40));
    const FlightRecorder::Site site("step " + std::to_string(step));
    all_reduce(pg, 4);
  }
}

// Stage `rank` of a two-stage pipeline over four micro-batches: activations go 0 -> 1,
// gradients 1 -> 0; stage 1 gets stuck on micro-batch 2.
void pipeline(ProcessGroup& pg, int rank) {
  std::vector<float> x(16, 1.0f);
  for (int mb = 0; mb < 4; ++mb) {
    const std::string stage = "stage " + std::to_string(rank);
    const std::string micro = " mb " + std::to_string(mb);
    if (rank == 0) {
      const FlightRecorder::Site forward(stage + " forward" + micro);
      pg.send(x, 1);
      const FlightRecorder::Site backward(stage + " backward" + micro);
      pg.recv(x, 1);
    } else {
      {
        const FlightRecorder::Site forward(stage + " forward" + micro);
        pg.recv(x, 0);
      }
      while (mb == 2) ::pause();  // stuck computing
      const FlightRecorder::Site backward(stage + " backward" + micro);
      pg.send(x, 0);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string fault = argc > 1 ? argv[1] : "";
  auto world = weft::dist::init_process_group({.timeout = weft::Seconds(3)});
  const int rank = world->rank();
  if (fault == "straggler") return straggle(*world, rank), 0;
  if (fault == "pipeline") return pipeline(*world, rank), 0;
  std::shared_ptr<ProcessGroup> pair = world;
  if (fault == "subgroup" || fault == "order") pair = world->new_group({0, 1});
  ProcessGroup& pg = fault == "order" ? *world : *pair;
  for (int step = 0; step < 3; ++step) {
    const FlightRecorder::Site site("step " + std::to_string(step));
    all_reduce(pg, 4);
  }
  {
    const FlightRecorder::Site site("step 3");
    if (fault == "order") {
      ProcessGroup& first = rank == 0 ? *world : *pair;
      all_reduce(first, 4);
      all_reduce(&first == world.get() ? *pair : *world, 4);
    } else if (!faulty_step(pg, fault, rank)) {
      return 0;
    }
  }
  hang_at_exit.armed = fault == "teardown" && rank == 1;
  if (fault == "extra" && rank == 0) {
    const FlightRecorder::Site site("step 4");
    all_reduce(pg, 4);
  }
  return 0;
}
