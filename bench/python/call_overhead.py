"""Time of one small all_reduce from Python, through a ProcessGroup method and through the
module function, as weft-bench times it in C++ (run both with bench/python/call_overhead.sh).

    weftrun --nproc-per-node 2 /usr/bin/python3 bench/python/call_overhead.py [BYTES]

Prints, on rank 0, the slowest rank's median µs per call over 7 rounds of 20,000 calls.
"""
import statistics
import sys
import time

import numpy as np

import weft.dist as dist

world = dist.init_process_group()
x = np.zeros(max(1, int(sys.argv[1]) // 4 if len(sys.argv) > 1 else 1), np.float32)
CALLS, ROUNDS = 20_000, 7


def median_us(call):
    rounds = []
    for _ in range(ROUNDS):
        world.barrier()
        start = time.perf_counter()
        for _ in range(CALLS):
            call(x)
        rounds.append((time.perf_counter() - start) / CALLS * 1e6)
    slowest = np.array([statistics.median(rounds)], np.float64)
    world.all_reduce(slowest, dist.ReduceOp.MAX)
    return slowest[0]


method = median_us(world.all_reduce)
function = median_us(dist.all_reduce)
if world.rank() == 0:
    print(f"python {x.nbytes} B all_reduce, {world.size()} ranks, backend {world.backend}: "
          f"ProcessGroup.all_reduce {method:.2f} us, weft.dist.all_reduce {function:.2f} us")
