"""weft from Python: process groups and their collectives, in place on numpy arrays and
torch tensors.

    import numpy as np
    import weft.dist as dist

    world = dist.init_process_group()   # under weftrun: rank, size and master from the env
    x = np.full(4, world.rank(), np.float32)
    dist.all_reduce(x)                  # every rank now holds 0 + 1 + ... + (size - 1)

Errors: weft.Error (a RuntimeError) and below it weft.InvalidArgument (also a ValueError),
weft.TimeoutError (also the built-in TimeoutError), weft.dist.PeerError,
weft.dist.CollectiveMismatch and weft.dist.GroupBroken. docs/PYTHON.md has the whole API.
"""
from weft._weft import Error, InvalidArgument, TimeoutError
from weft import dist

__all__ = ["Error", "InvalidArgument", "TimeoutError", "dist"]
