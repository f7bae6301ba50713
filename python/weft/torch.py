"""weft as a torch.distributed backend. Importing this module registers the backend "weft":

    import torch
    import torch.distributed as dist
    import weft.torch  # noqa: F401  (registers the backend)

    dist.init_process_group("weft")     # under weftrun, torchrun, mpirun or srun
    t = torch.ones(4)
    dist.all_reduce(t)                  # on weft's shared-memory engine when ranks share a host

Groups made with dist.new_group(ranks, backend="weft") are weft groups too. Each takes CPU
tensors of float32, float64, float16, bfloat16, int8, uint8, bool, int32 or int64, one tensor
per process; every torch.distributed.ReduceOp but PREMUL_SUM (NCCL's), AVG included. Errors
are weft's exceptions (weft.dist.PeerError, weft.TimeoutError, weft.InvalidArgument...), all
of them RuntimeErrors as torch.distributed's are. docs/PYTHON.md has the details.

Under mpirun (or another MPI launcher speaking PMI) and srun, importing it also sets the
variables torch.distributed's env:// rendezvous reads (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) from the launcher's, as weft.dist reads them:
the master is MASTER_ADDR if set, else the first host of the Slurm allocation or, when every
rank is on this host, 127.0.0.1; the port MASTER_PORT if set, else one derived from the job
id. A variable already set is left as it is.

Importing it also wraps torch.distributed's blocking calls (those with async_op=False, send and
recv): c10d issues every operation asynchronously and waits for it afterwards, and the wrapper
tells weft so, which then runs the operation on the calling thread instead of handing it to the
group's thread and back (about 10 µs a call). Other backends ignore the hint. WEFT_TORCH_WRAP=0
in the environment leaves torch.distributed as it is (blocking calls then take the hand-off).
"""
import _thread
import functools as _functools
import inspect as _inspect
import os as _os
import _signal  # signal.getsignal converts to enums through an exception: 1.6 µs a call
import threading as _threading
import types as _types

import torch.distributed as _dist
import torch.distributed.distributed_c10d as _c10d

import weft  # noqa: F401  (weft's exception types, for the errors the backend raises)
from weft._torch import ProcessGroupWeft, _arm_interrupts, _caller_waits
from weft._weft.dist import _launch_environment

__all__ = ["ProcessGroupWeft", "BACKEND"]

BACKEND = "weft"


def _create(store, rank, size, timeout):
    return ProcessGroupWeft(store, rank, size, timeout)


def _export_launch_environment():
    """Sets torch's rendezvous variables from an MPI launcher's or srun's (module docstring)."""
    env = _launch_environment()
    if env is None or env["launcher"] == "torchrun":  # weftrun and torchrun set torch's names
        return
    for name, key in (("RANK", "rank"), ("WORLD_SIZE", "world_size"),
                      ("LOCAL_RANK", "local_rank"), ("LOCAL_WORLD_SIZE", "local_world_size"),
                      ("MASTER_ADDR", "master_addr"), ("MASTER_PORT", "master_port")):
        if env[key] is not None:
            _os.environ.setdefault(name, str(env[key]))


_export_launch_environment()

if BACKEND.upper() not in _dist.Backend._plugins:  # importing twice (or reloading) is fine
    _dist.Backend.register_backend(BACKEND, _create)


def _waits(fn):
    """Whether a call of `fn` with (args, kwargs) waits for its operation: a function of
    (args, kwargs), from `fn`'s async_op parameter (its default when not passed); send and
    recv, which take none, always wait."""
    params = _inspect.signature(fn).parameters
    param = params.get("async_op")
    if param is None:
        return lambda args, kwargs: True
    default = False if param.default is _inspect.Parameter.empty else bool(param.default)
    at = list(params).index("async_op")
    before = [p.kind for p in list(params.values())[:at]]
    positional = (param.kind is _inspect.Parameter.POSITIONAL_OR_KEYWORD
                  and _inspect.Parameter.VAR_POSITIONAL not in before)
    position = at if positional else None  # where async_op sits when passed positionally

    def waits(args, kwargs):
        if "async_op" in kwargs:
            return not kwargs["async_op"]
        if position is not None and len(args) > position:
            return not args[position]
        return not default

    return waits


def _waited_at_once(fn):
    """`fn` telling weft that the operation it issues is waited for at once, when it is, on
    the main thread, and SIGINT means what Python's default says (KeyboardInterrupt, or
    ignored, or the end of the process): the operation then runs on this thread, and Ctrl-C
    aborts its group (docs/PYTHON.md). Elsewhere the hint is withdrawn for the call, so that
    an operation issued asynchronously never runs synchronously."""
    waits = _waits(fn)

    @_functools.wraps(fn)
    def call(*args, **kwargs):
        handler = _signal.getsignal(_signal.SIGINT)
        plain = handler in _PLAIN_SIGINT
        if handler is not _sigint_seen[0]:  # signal.signal() ran, displacing weft's watcher
            _sigint_seen[0] = handler
            if plain:
                _arm_interrupts()
        hint = plain and waits(args, kwargs) and _thread.get_ident() == _MAIN_THREAD
        previous = _caller_waits(hint)
        try:
            return fn(*args, **kwargs)
        finally:
            _caller_waits(previous)

    call._weft_waited_at_once = True
    return call


_MAIN_THREAD = _threading.main_thread().ident
_PLAIN_SIGINT = (_signal.default_int_handler, _signal.SIG_IGN, _signal.SIG_DFL)  # as _signal has them
_sigint_seen = [None]  # the SIGINT handler the last wrapped call saw


def _wrap_blocking_calls():
    """Wraps, in torch.distributed and in distributed_c10d (whose own helpers, such as
    all_gather_object, call them there), every call taking async_op, and send and recv."""
    for name, fn in list(vars(_c10d).items()):
        # type(), not isinstance(): torch's deprecated reduce_op warns on any attribute access
        if type(fn) is not _types.FunctionType or getattr(fn, "_weft_waited_at_once", False):
            continue
        if "async_op" not in _inspect.signature(fn).parameters and name not in ("send", "recv"):
            continue
        wrapped = _waited_at_once(fn)
        setattr(_c10d, name, wrapped)
        if getattr(_dist, name, None) is fn:
            setattr(_dist, name, wrapped)


if _os.environ.get("WEFT_TORCH_WRAP", "1") != "0":
    _wrap_blocking_calls()
