"""weft as a torch.distributed backend. Importing this module registers the backend "weft":

    import torch
    import torch.distributed as dist
    import weft.torch  # noqa: F401  (registers the backend)

    dist.init_process_group("weft")     # under weftrun or torchrun: rank, size, master from env
    t = torch.ones(4)
    dist.all_reduce(t)                  # on weft's shared-memory engine when ranks share a host

Groups made with dist.new_group(ranks, backend="weft") are weft groups too. Each takes CPU
tensors of float32, float64, float16, bfloat16, int8, uint8, bool, int32 or int64, one tensor
per process; every torch.distributed.ReduceOp but PREMUL_SUM (NCCL's), AVG included. Errors
are weft's exceptions (weft.dist.PeerError, weft.TimeoutError, weft.InvalidArgument...), all
of them RuntimeErrors as torch.distributed's are. docs/PYTHON.md has the details.
"""
import torch.distributed as _dist

import weft  # noqa: F401  (weft's exception types, for the errors the backend raises)
from weft._torch import ProcessGroupWeft

__all__ = ["ProcessGroupWeft", "BACKEND"]

BACKEND = "weft"


def _create(store, rank, size, timeout):
    return ProcessGroupWeft(store, rank, size, timeout)


if BACKEND.upper() not in _dist.Backend._plugins:  # importing twice (or reloading) is fine
    _dist.Backend.register_backend(BACKEND, _create)
