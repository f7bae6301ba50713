"""Process groups and collectives with torch.distributed's names (weft/dist in C++).

A tensor is anything that exports contiguous CPU memory: a numpy array, a torch tensor
(through DLPack, bfloat16 included), a bytearray or memoryview. Collectives work in place on
that memory, without copies. Every blocking call releases the GIL; Ctrl-C interrupts it
within a second (the group is then aborted: its other ranks get PeerError).

The module-level functions act on the world group of init_process_group(), or on the group
passed as `group`; each ProcessGroup has the same operations as methods.
"""
from typing import Any, List, Optional, Sequence

from weft._weft import InvalidArgument
from weft._weft.dist import (CollectiveMismatch, GroupBroken, PeerError, ProcessGroup,
                             ReduceOp, Work, registered_backends)
from weft._weft.dist import init_process_group as _init_process_group

__all__ = [
    "CollectiveMismatch", "GroupBroken", "PeerError", "ProcessGroup", "ReduceOp", "Work",
    "all_gather", "all_gather_v", "all_reduce", "all_to_all", "all_to_all_v", "barrier",
    "broadcast", "destroy_process_group", "gather", "get_rank", "get_world_size",
    "init_process_group", "is_initialized", "new_group", "recv", "recv_any", "reduce",
    "reduce_scatter", "registered_backends", "scatter", "send", "split", "isend", "irecv",
]

_world: Optional[ProcessGroup] = None
_joined = False


def init_process_group(backend: str = "", init_method: str = "", rank: int = -1,
                       world_size: int = -1, timeout: Optional[float] = None) -> ProcessGroup:
    """Joins the job and returns its world group, the default group of this module.

    Reads what it is not given from the environment weftrun sets (or torchrun's, mpirun's,
    srun's): RANK, WORLD_SIZE, MASTER_ADDR, WEFT_STORE_PORT (weftrun's store; else
    MASTER_PORT), WEFT_BACKEND, WEFT_JOB_TOKEN. A process joins a job once:
    destroy_process_group() leaves it, and joining again is refused.
    backend: "" (shm on one host, auto across hosts), "shm", "tcp", "auto", "mpi".
    timeout: seconds for the rendezvous and for each operation (300 by default).
    """
    global _world, _joined
    if _joined:
        # The job's store still holds this process's first rendezvous (addresses of
        # listeners since closed): a second one in the same attempt would read them.
        raise InvalidArgument("init_process_group: this process already joined its job; a "
                              "process joins once (weftrun --max-restarts starts new ones)")
    _world = _init_process_group(backend, init_method, rank, world_size, timeout)
    _joined = True
    return _world


def is_initialized() -> bool:
    """Whether init_process_group() has given this module its world group."""
    return _world is not None


def destroy_process_group() -> None:
    """Leaves the job: the world group goes once nothing else refers to it. The process
    cannot join again."""
    global _world
    _world = None


def _group(group: Optional[ProcessGroup]) -> ProcessGroup:
    if group is not None:
        return group
    if _world is None:
        raise InvalidArgument("no process group: call weft.dist.init_process_group() first, "
                              "or pass group=")
    return _world


def get_rank(group: Optional[ProcessGroup] = None) -> int:
    """This process's rank in `group` (the world group by default)."""
    return _group(group).rank()


def get_world_size(group: Optional[ProcessGroup] = None) -> int:
    """How many ranks `group` (the world group by default) has."""
    return _group(group).size()


def new_group(ranks: Sequence[int], group: Optional[ProcessGroup] = None) -> Optional[ProcessGroup]:
    """A subgroup of `ranks`; collective over `group`; None on ranks not in it."""
    return _group(group).new_group(list(ranks))


def split(color: int, key: int = 0, group: Optional[ProcessGroup] = None) -> Optional[ProcessGroup]:
    """Subgroups by color, ordered by (key, rank) within each; collective over `group`;
    None on ranks that pass a negative color."""
    return _group(group).split(color, key)


def broadcast(tensor: Any, src: int, group: Optional[ProcessGroup] = None,
              async_op: bool = False, timeout: Optional[float] = None) -> Optional[Work]:
    """Copies src's tensor into every rank's, in place. With async_op, returns a Work."""
    return _group(group).broadcast(tensor, src, timeout=timeout, async_op=async_op)


def all_reduce(tensor: Any, op: ReduceOp = ReduceOp.SUM, group: Optional[ProcessGroup] = None,
               async_op: bool = False, timeout: Optional[float] = None) -> Optional[Work]:
    """Reduces every rank's tensor with `op`; each rank gets the result in place."""
    return _group(group).all_reduce(tensor, op, timeout=timeout, async_op=async_op)


def reduce(tensor: Any, dst: int, op: ReduceOp = ReduceOp.SUM,
           group: Optional[ProcessGroup] = None, async_op: bool = False,
           timeout: Optional[float] = None) -> Optional[Work]:
    """Reduces every rank's tensor with `op` into dst's; other ranks' are left as they were."""
    return _group(group).reduce(tensor, dst, op, timeout=timeout, async_op=async_op)


def all_gather(output: Any, input: Any, group: Optional[ProcessGroup] = None,
               async_op: bool = False, timeout: Optional[float] = None) -> Optional[Work]:
    """output holds world size * len(input) elements, rank r's input at r * len(input); or
    output is a list of world size arrays, rank r's input landing in output[r]."""
    return _group(group).all_gather(output, input, timeout=timeout, async_op=async_op)


def all_gather_v(output: Any, input: Any, counts: Sequence[int],
                 group: Optional[ProcessGroup] = None, async_op: bool = False,
                 timeout: Optional[float] = None) -> Optional[Work]:
    """As all_gather, rank r contributing counts[r] elements, packed in rank order."""
    return _group(group).all_gather_v(output, input, list(counts), timeout=timeout,
                                      async_op=async_op)


def gather(output: Any, input: Any, dst: int = 0, group: Optional[ProcessGroup] = None,
           async_op: bool = False, timeout: Optional[float] = None) -> Optional[Work]:
    """On dst, output gets every rank's input in rank order; elsewhere output may be None."""
    return _group(group).gather(output, input, dst, timeout=timeout, async_op=async_op)


def scatter(output: Any, input: Any, src: int = 0, group: Optional[ProcessGroup] = None,
            async_op: bool = False, timeout: Optional[float] = None) -> Optional[Work]:
    """src's input holds one block per rank; elsewhere input may be None."""
    return _group(group).scatter(output, input, src, timeout=timeout, async_op=async_op)


def reduce_scatter(output: Any, input: Any, op: ReduceOp = ReduceOp.SUM,
                   group: Optional[ProcessGroup] = None, async_op: bool = False,
                   timeout: Optional[float] = None) -> Optional[Work]:
    """input holds one block per rank; rank r gets the reduction of every rank's block r
    in output."""
    return _group(group).reduce_scatter(output, input, op, timeout=timeout, async_op=async_op)


def all_to_all(output: Any, input: Any, group: Optional[ProcessGroup] = None,
               async_op: bool = False, timeout: Optional[float] = None) -> Optional[Work]:
    """Block j of input goes to rank j, landing at this rank's place in its output."""
    return _group(group).all_to_all(output, input, timeout=timeout, async_op=async_op)


def all_to_all_v(output: Any, output_counts: Sequence[int], input: Any,
                 input_counts: Sequence[int], group: Optional[ProcessGroup] = None,
                 async_op: bool = False, timeout: Optional[float] = None) -> Optional[Work]:
    """As all_to_all with input_counts[j] elements to rank j and output_counts[i] from
    rank i, packed in rank order."""
    return _group(group).all_to_all_v(output, list(output_counts), input, list(input_counts),
                                      timeout=timeout, async_op=async_op)


def barrier(group: Optional[ProcessGroup] = None, async_op: bool = False,
            timeout: Optional[float] = None) -> Optional[Work]:
    """Returns once every rank of `group` has called it."""
    return _group(group).barrier(timeout=timeout, async_op=async_op)


def send(tensor: Any, dst: int, group: Optional[ProcessGroup] = None, tag: int = 0,
         timeout: Optional[float] = None) -> None:
    """Sends tensor to dst under tag; blocking (see isend)."""
    _group(group).send(tensor, dst, tag, timeout=timeout)


def recv(tensor: Any, src: int, group: Optional[ProcessGroup] = None, tag: int = 0,
         timeout: Optional[float] = None) -> None:
    """Receives src's next message under tag into tensor; blocking (see irecv)."""
    _group(group).recv(tensor, src, tag, timeout=timeout)


def recv_any(tensor: Any, group: Optional[ProcessGroup] = None, tag: int = 0,
             timeout: Optional[float] = None) -> int:
    """Receives from whichever rank sends first; returns its rank."""
    return _group(group).recv_any(tensor, tag, timeout=timeout)


def isend(tensor: Any, dst: int, group: Optional[ProcessGroup] = None, tag: int = 0,
          timeout: Optional[float] = None) -> Work:
    """send, returning at once: wait on the Work before reusing `tensor` (torch's isend)."""
    return _group(group).send(tensor, dst, tag, timeout=timeout, async_op=True)


def irecv(tensor: Any, src: Optional[int] = None, group: Optional[ProcessGroup] = None,
          tag: int = 0, timeout: Optional[float] = None) -> Work:
    """recv (from any rank when src is None), returning at once; the Work's source_rank()
    says who sent once it completed (torch's irecv)."""
    if src is None:
        return _group(group).recv_any(tensor, tag, timeout=timeout, async_op=True)
    return _group(group).recv(tensor, src, tag, timeout=timeout, async_op=True)
