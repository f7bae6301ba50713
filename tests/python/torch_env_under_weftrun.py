"""A PyTorch program under weftrun, as under torchrun:

    weftrun --nproc-per-node 3 /usr/bin/python3 tests/python/torch_env_under_weftrun.py

torch.distributed's env:// rendezvous starts its own TCPStore on MASTER_PORT at rank 0,
which weftrun leaves free (its own store is on WEFT_STORE_PORT); gloo then all-reduces. The
same program also joins weft's world group, which finds weftrun's store. Exits 0 on success.
"""
import datetime

import numpy as np
import torch
import torch.distributed as tdist

import weft.dist as dist

tdist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
rank, size = tdist.get_rank(), tdist.get_world_size()
t = torch.tensor([float(rank)])
tdist.all_reduce(t)
assert t.item() == size * (size - 1) / 2, t

world = dist.init_process_group(timeout=30)
assert (world.rank(), world.size()) == (rank, size)
x = np.array([rank], np.int64)
dist.all_reduce(x)
assert x[0] == size * (size - 1) // 2, x

tdist.barrier()
tdist.destroy_process_group()
print(f"rank {rank}: ok")
