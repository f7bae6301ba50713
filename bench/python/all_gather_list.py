"""torch.distributed's all_gather into a list of tensors on the weft backend, against
all_gather_into_tensor (one output tensor) and against gloo's list form, 1 to 64 MiB of
output; rank 0 prints, per size, µs a call (the median of 5 rounds of back-to-back calls):

    PYTHONPATH=build/release/python build/release/tools/weftrun --nproc-per-node 2 \\
        /usr/bin/python3 bench/python/all_gather_list.py
"""
import statistics
import time

import torch  # noqa: F401  (torch.distributed needs it loaded)
import torch.distributed as dist

import weft.torch  # noqa: F401  (registers the backend)

ROUNDS = 5


def timed(call):
    """µs a call: the median over ROUNDS rounds, each of enough calls for 64 MiB of output."""
    times = []
    for _ in range(ROUNDS):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(call.reps):
            call()
        times.append((time.perf_counter() - start) / call.reps * 1e6)
    return statistics.median(times)


def calls(nbytes, n, gloo):
    count = nbytes // 4
    parts = [torch.ones(count // n) for _ in range(n)]
    flat = torch.ones(count)
    mine = torch.ones(count // n)
    named = {"list": lambda: dist.all_gather(parts, mine),
             "tensor": lambda: dist.all_gather_into_tensor(flat, mine),
             "gloo_list": lambda: dist.all_gather(parts, mine, group=gloo)}
    for call in named.values():
        call.reps = max(2, (64 << 20) // nbytes)
    return named


def main():
    dist.init_process_group("weft")
    n, rank = dist.get_world_size(), dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    for nbytes in [1 << 20, 4 << 20, 16 << 20, 64 << 20]:
        us = {name: timed(call) for name, call in calls(nbytes, n, gloo).items()}
        if rank == 0:
            print(nbytes, " ".join(f"{k}={v:.0f}" for k, v in us.items()),
                  f"gloo/list={us['gloo_list'] / us['list']:.2f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
