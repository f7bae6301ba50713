#!/usr/bin/env python3
"""The torch.distributed gloo side of bench/collectives/compare.sh: all_reduce (float sum),
broadcast, all_gather (nccl-tests' size: the whole output) and barrier swept like weft-bench,
printing "op size time_us busbw best_us p99_us" lines (median, best and 99th percentile of the
timed iterations, each on the slowest rank; nccl-tests' busbw).

    python3 bench/collectives/gloo_bench.py NRANKS all_reduce broadcast all_gather barrier
"""
import math
import os
import statistics
import sys
import time


def worker(rank, n, ops, port):
    import torch
    import torch.distributed as dist
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    for op in ops:
        size = 4
        while size <= 64 << 20:
            count = 0 if op == "barrier" else size // 4
            if op == "all_gather":
                count -= count % n
                if count == 0:
                    size *= 4
                    continue
            t = torch.ones(max(count, 1), dtype=torch.float32)
            parts = [torch.ones(count // n) for _ in range(n)] if op == "all_gather" else None
            times = []
            for it in range(25):
                dist.barrier()
                start = time.perf_counter()
                if op == "all_reduce":
                    dist.all_reduce(t)
                elif op == "broadcast":
                    dist.broadcast(t, 0)
                elif op == "all_gather":
                    dist.all_gather(parts, parts[rank])
                else:
                    dist.barrier()
                if it >= 5:
                    times.append((time.perf_counter() - start) * 1e6)
            times.sort()
            p99 = times[max(math.ceil(0.99 * len(times)), 1) - 1]  # nearest rank
            stats = torch.tensor([statistics.median(times), times[0], p99], dtype=torch.float64)
            dist.all_reduce(stats, op=dist.ReduceOp.MAX)  # each the slowest rank's
            us, best, p99 = stats.tolist()
            algbw = count * 4 / (us * 1e3) if us > 0 else 0
            factor = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n}.get(op, 1)
            if rank == 0:
                print(f"{op} {count * 4} {us:.3f} {algbw * factor:.3f} {best:.3f} {p99:.3f}", flush=True)
            if op == "barrier":
                break
            size *= 4
    dist.destroy_process_group()


def main():
    import torch.multiprocessing as mp
    n = int(sys.argv[1])
    mp.spawn(worker, args=(n, sys.argv[2:], 29600 + os.getpid() % 1000), nprocs=n)


if __name__ == "__main__":
    main()
