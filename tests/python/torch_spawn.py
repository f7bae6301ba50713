"""The weft backend without weftrun, as a PyTorch program starts it under torchrun-style
variables: torch.multiprocessing.spawn starts the ranks, MASTER_ADDR and MASTER_PORT name
torch's TCPStore, and init_process_group("weft", rank=..., world_size=...) rendezvouses
through it (weft reads nothing of its own from the environment).

    PYTHONPATH=build/release/python /usr/bin/python3 tests/python/torch_spawn.py
"""
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 3


def worker(rank, port):
    import weft.torch  # noqa: F401  (registers the backend)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("weft", rank=rank, world_size=WORLD)
    wrapped = getattr(dist.all_reduce, "_weft_waited_at_once", False)
    assert wrapped, "import weft.torch did not wrap torch.distributed's blocking calls"
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    assert t.item() == WORLD * (WORLD + 1) / 2, t
    out = [torch.zeros(2, dtype=torch.int64) for _ in range(WORLD)]
    dist.all_gather(out, torch.full((2,), rank))
    assert [o.tolist() for o in out] == [[r, r] for r in range(WORLD)], out
    dist.destroy_process_group()
    print(f"rank {rank}: ok", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    for name in ["RANK", "WORLD_SIZE", "LOCAL_RANK", "WEFT_STORE_PORT", "WEFT_STORE_HOSTED"]:
        os.environ.pop(name, None)
    mp.spawn(worker, args=(free_port(),), nprocs=WORLD)
    sys.exit(0)
