"""Type stubs for weft._torch, the extension behind weft.torch (python/src/torch)."""
import datetime

import torch.distributed as dist

class ProcessGroupWeft(dist.ProcessGroup):
    """A torch.distributed process group whose collectives run on weft (docs/PYTHON.md)."""

    def __init__(self, store: dist.Store, rank: int, size: int,
                 timeout: datetime.timedelta) -> None:
        """Joins the group's other ranks through `store`; `timeout` bounds the rendezvous and
        is every operation's default deadline."""
    @property
    def weft_backend(self) -> str:
        """The weft backend the group runs on: shm, tcp, auto, ..."""

def _caller_waits(on: bool) -> bool:
    """Internal (weft.torch's wrappers): on this thread, the operations torch.distributed issues
    are waited for at once, so weft may run them right here. Returns the previous setting."""

def _arm_interrupts() -> None:
    """Internal: puts weft's Ctrl-C watcher back in front of Python's SIGINT handler."""
