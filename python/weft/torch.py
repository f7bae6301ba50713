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

Importing it also wraps torch.distributed's blocking calls (those with async_op=False, send and
recv): c10d issues every operation asynchronously and waits for it afterwards, and the wrapper
tells weft so, which then runs the operation on the calling thread instead of handing it to the
group's thread and back (about 10 µs a call). Other backends ignore the hint.
"""
import functools as _functools
import inspect as _inspect
import types as _types

import torch.distributed as _dist
import torch.distributed.distributed_c10d as _c10d

import weft  # noqa: F401  (weft's exception types, for the errors the backend raises)
from weft._torch import ProcessGroupWeft, _caller_waits

__all__ = ["ProcessGroupWeft", "BACKEND"]

BACKEND = "weft"


def _create(store, rank, size, timeout):
    return ProcessGroupWeft(store, rank, size, timeout)


if BACKEND.upper() not in _dist.Backend._plugins:  # importing twice (or reloading) is fine
    _dist.Backend.register_backend(BACKEND, _create)


def _waited_at_once(fn, async_op_at):
    """`fn` telling weft that the operation it issues is waited for at once, unless called
    with async_op=True (the argument at position `async_op_at`; None: it always waits)."""

    @_functools.wraps(fn)
    def call(*args, **kwargs):
        if kwargs.get("async_op") or (async_op_at is not None and len(args) > async_op_at
                                      and args[async_op_at]):
            return fn(*args, **kwargs)
        previous = _caller_waits(True)
        try:
            return fn(*args, **kwargs)
        finally:
            _caller_waits(previous)

    call._weft_waited_at_once = True
    return call


def _wrap_blocking_calls():
    """Wraps, in torch.distributed and in distributed_c10d (whose own helpers, such as
    all_gather_object, call them there), every call taking async_op, and send and recv."""
    for name, fn in list(vars(_c10d).items()):
        # type(), not isinstance(): torch's deprecated reduce_op warns on any attribute access
        if type(fn) is not _types.FunctionType or getattr(fn, "_weft_waited_at_once", False):
            continue
        params = list(_inspect.signature(fn).parameters)
        if "async_op" in params:
            wrapped = _waited_at_once(fn, params.index("async_op"))
        elif name in ("send", "recv"):
            wrapped = _waited_at_once(fn, None)
        else:
            continue
        setattr(_c10d, name, wrapped)
        if getattr(_dist, name, None) is fn:
            setattr(_dist, name, wrapped)


_wrap_blocking_calls()
