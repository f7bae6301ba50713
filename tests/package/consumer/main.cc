// A program that knows weft only through its installed package.
#include <weft/exec.h>

#include <cstdio>

int triple(int x) { return 3 * x; }

int main() {
  weft::ThreadPoolExecutor threads(2);
  weft::ProcessPoolExecutor processes(1);
  const int a = threads.submit(triple, 2).get();
  const int b = processes.submit(triple, 3).get();
  std::printf("consumer: %d %d\n", a, b);
  return a == 6 && b == 9 ? 0 : 1;
}
