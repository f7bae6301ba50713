"""weft.dist from Python: a sum all-reduce and a broadcast on numpy arrays (docs/PYTHON.md).

    PYTHONPATH=build/release/python build/release/tools/weftrun --nproc-per-node 3 \
        /usr/bin/python3 examples/python/all_reduce.py
"""
import numpy as np
import weft.dist as dist

world = dist.init_process_group()          # rank, size, master from weftrun's environment
x = np.full(4, world.rank(), np.float32)
dist.all_reduce(x)                         # in place: 0 + 1 + 2 on every rank
t = np.arange(4, dtype=np.int64) if world.rank() == 0 else np.zeros(4, np.int64)
dist.broadcast(t, src=0)
print(f"rank {world.rank()}: {x} {t}")     # [0] rank 0: [3. 3. 3. 3.] [0 1 2 3]
