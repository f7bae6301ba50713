"""The chapter's listing 16.6 on weft: rank 0 broadcasts 123 to every rank, then every rank
contributes its rank to a sum all-reduce (0 + 1 + 2 = 3 with three processes). Unchanged but
for `import weft.torch` and the backend's name:

    PYTHONPATH=build/release/python weftrun --nproc-per-node 3 \
        /usr/bin/python3 examples/python/listing_16_6.py
"""
import torch
import torch.distributed as dist

import weft.torch  # noqa: F401  (registers the "weft" backend)


def run(rank, size):
    tensor = torch.zeros(1)
    if rank == 0:
        tensor += 123
    dist.broadcast(tensor, src=0)
    print(f"Process {rank} received tensor: {tensor[0]}")

    tensor = torch.tensor([float(rank)])
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    print(f"Process {rank} received tensor: {tensor[0]}")


if __name__ == "__main__":
    dist.init_process_group("weft")
    run(dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()
