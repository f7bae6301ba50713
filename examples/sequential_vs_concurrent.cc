// The textbook listing, in C++: ten calls of a function that sleeps 0.5 s, first one after
// another, then through a ThreadPoolExecutor(10) and a ProcessPoolExecutor(10).
//
//   Python                                          weft
//   with ThreadPoolExecutor(10) as ex:              weft::ThreadPoolExecutor ex(10);
//       results = list(ex.map(some_work, xs))       auto results = ex.map(some_work, xs);
//
// Expected output: 45 and about 5.0 s sequentially, 45 and about 0.5 s in each pool.
#include <chrono>
#include <cstdio>
#include <numeric>
#include <thread>
#include <vector>

#include "weft/exec.h"

namespace {

int some_work(int x) {
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  return x;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

template <class Results>
int sum(const Results& results) {
  return std::accumulate(results.begin(), results.end(), 0);
}

}  // namespace

int main() {
  std::vector<int> xs(10);
  std::iota(xs.begin(), xs.end(), 0);

  // Created first: a process pool forks, and a fork is cleanest before other threads exist.
  weft::ProcessPoolExecutor processes(10);

  auto start = std::chrono::steady_clock::now();
  std::vector<int> results;
  for (int x : xs) results.push_back(some_work(x));
  std::printf("%d\nSequential Time: %.2f seconds\n", sum(results), seconds_since(start));

  start = std::chrono::steady_clock::now();
  {
    weft::ThreadPoolExecutor threads(10);
    std::printf("%d\n", sum(threads.map(some_work, xs)));
  }
  std::printf("ThreadPoolExecutor Time: %.2f seconds\n", seconds_since(start));

  start = std::chrono::steady_clock::now();
  std::printf("%d\n", sum(processes.map(some_work, xs)));
  std::printf("ProcessPoolExecutor Time: %.2f seconds\n", seconds_since(start));
  return 0;
}
