"""weft against gloo through torch.distributed's own API, in one run: all_reduce (float sum),
broadcast and all_gather (nccl-tests' size: the whole output, as a list of tensors) from 4 B
to 64 MiB. One gloo group and one weft group over the same processes; each size runs on both,
back to back, alternating which goes first. Prints, on rank 0, one line per op and size:

    op bytes gloo_us weft_us gloo/weft

(time per call: the median of ROUNDS rounds of back-to-back calls, each round's average, on
the slowest rank). Under weftrun (bench/python/torch_backends.sh runs it):

    PYTHONPATH=build/release/python weftrun --nproc-per-node 2 \
        /usr/bin/python3 bench/python/torch_backends.py [MAX_BYTES]
"""
import statistics
import sys
import time

import torch
import torch.distributed as dist

import weft.torch  # noqa: F401  (registers the backend)

ROUNDS = 5


def calls_per_round(nbytes):
    """200 calls per round up to 32 KiB, fewer above (8 MiB of data a round), at least 2."""
    return max(2, min(200, (8 << 20) // max(nbytes, 1)))


def op_call(op, count, n, rank):
    if op == "all_reduce":
        t = torch.ones(count)
        return lambda g: dist.all_reduce(t, group=g)
    if op == "broadcast":
        t = torch.ones(count)
        return lambda g: dist.broadcast(t, src=0, group=g)
    parts = [torch.ones(count // n) for _ in range(n)]
    mine = torch.ones(count // n)
    return lambda g: dist.all_gather(parts, mine, group=g)


def time_per_call(call, group, calls):
    rounds = []
    for _ in range(ROUNDS):
        dist.barrier(group=group)
        start = time.perf_counter()
        for _ in range(calls):
            call(group)
        rounds.append((time.perf_counter() - start) / calls * 1e6)
    us = torch.tensor([statistics.median(rounds)])
    dist.all_reduce(us, op=dist.ReduceOp.MAX, group=group)  # the slowest rank's
    return us.item()


def main():
    max_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else 64 << 20
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    groups = {"gloo": dist.group.WORLD, "weft": dist.new_group(backend="weft")}
    engine = groups["weft"].weft_backend
    if rank == 0:
        print(f"# {n} processes; weft group on its {engine} backend", flush=True)
        print(f"{'op':<11} {'bytes':>9} {'gloo_us':>10} {'weft_us':>10} {'gloo/weft':>9}",
              flush=True)
    flip = False
    for op in ["all_reduce", "broadcast", "all_gather"]:
        nbytes = 4
        while nbytes <= max_bytes:
            count = nbytes // 4
            if op == "all_gather" and count % n:
                count += n - count % n
            call = op_call(op, count, n, rank)
            calls = calls_per_round(count * 4)
            us = {}
            order = ["weft", "gloo"] if flip else ["gloo", "weft"]
            flip = not flip
            for name in order:
                call(groups[name])  # warm-up
                us[name] = time_per_call(call, groups[name], calls)
            if rank == 0:
                print(f"{op:<11} {count * 4:>9} {us['gloo']:>10.1f} {us['weft']:>10.1f} "
                      f"{us['gloo'] / us['weft']:>8.1f}x", flush=True)
            nbytes *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
