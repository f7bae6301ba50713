"""The cost of one torch.distributed call with nobody to wait for: a 4-byte all_reduce in a
one-process group, blocking and async + wait(), 20,000 calls, three rounds:

    PYTHONPATH=build/release/python build/release/tools/weftrun --nproc-per-node 1 \
        /usr/bin/python3 bench/python/torch_call_cost.py weft      # or gloo
"""
import sys
import time

import torch
import torch.distributed as dist

import weft.torch  # noqa: F401  (registers the backend)

CALLS = 20000

dist.init_process_group(sys.argv[1])
t = torch.ones(1)
for _ in range(3):
    start = time.perf_counter()
    for _ in range(CALLS):
        dist.all_reduce(t)
    blocking = (time.perf_counter() - start) / CALLS * 1e6
    start = time.perf_counter()
    for _ in range(CALLS):
        dist.all_reduce(t, async_op=True).wait()
    waited = (time.perf_counter() - start) / CALLS * 1e6
    print(f"{sys.argv[1]}: blocking {blocking:.2f} us, async + wait {waited:.2f} us", flush=True)
dist.destroy_process_group()
