"""Failures through torch.distributed on the weft backend, one scenario per run (2 processes
under weftrun, as PyTorch's c10d tests run theirs):

    weftrun --nproc-per-node 2 /usr/bin/python3 tests/python/torch_failures.py mismatch

mismatch: the ranks all-reduce different sizes: every rank raises a weft.Error (a
          RuntimeError), none hangs.
timeout:  rank 0 all-reduces alone in a group with a 2 s timeout: weft.TimeoutError (also the
          built-in TimeoutError) in time; rank 1, arriving late, gets weft.dist.PeerError.
killed:   the last rank is killed (SIGKILL); every other rank's next all-reduce raises
          weft.dist.PeerError naming it within 5 s. weftrun then fails the job, so the test
          looks for the survivors' "ok".
interrupt: rank 0 blocks in an all-reduce rank 1 does not join and gets SIGINT 0.5 s later:
          KeyboardInterrupt within a second, not at the group's timeout; rank 1 gets
          weft.dist.PeerError naming the interruption. The blocking call runs on the caller's
          thread (weft.torch's hint), which the Ctrl-C watcher aborts.
interrupt_async: the same with async_op=True and Work.wait(), which polls for Ctrl-C.
Each rank exits 0 when it saw what it should, 1 otherwise.
"""
import datetime
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist

import weft
import weft.dist
import weft.torch  # noqa: F401  (registers the backend)

SCENARIO = sys.argv[1]
dist.init_process_group("weft")
RANK = dist.get_rank()
# Every rank past init's store-based barrier (which polls rank 0's TCPStore) before any can
# finish its scenario and exit: a rank still polling would see the store vanish.
dist.barrier()


def check(condition, what):
    if not condition:
        print(f"rank {RANK}: FAILED: {what}", flush=True)
        os._exit(1)


def mismatch():
    try:
        dist.all_reduce(torch.ones(4 if RANK == 0 else 8))
        check(False, "a mismatched all_reduce went through")
    except weft.Error as e:
        check(isinstance(e, RuntimeError), f"{type(e)} is not a RuntimeError")
        print(f"rank {RANK}: {type(e).__name__}: {e}", flush=True)


def timeout():
    # A group whose operations time out after 2 s, made once both ranks have started (their
    # imports alone may be seconds apart on a loaded machine).
    group = dist.new_group(backend="weft", timeout=datetime.timedelta(seconds=2))
    if RANK == 1:
        time.sleep(5)  # rank 0 gave up at 2 s
        try:
            dist.all_reduce(torch.ones(4), group=group)
            check(False, "expected PeerError")
        except weft.dist.PeerError as e:
            check("rank 0" in str(e), f"PeerError should name rank 0: {e}")
        return
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4), group=group)
        check(False, "expected a timeout")
    except TimeoutError as e:
        check(isinstance(e, weft.TimeoutError), f"{type(e)} is not weft.TimeoutError")
    elapsed = time.monotonic() - start
    check(1.9 < elapsed < 10, f"the timeout took {elapsed:.1f} s")  # loaded machines lag


def killed():
    # weftrun stops the other workers with SIGTERM once one dies; rank 0 stays to see the
    # error itself (weftrun's SIGKILL comes --stop-grace seconds later).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    dist.barrier()
    victim = dist.get_world_size() - 1
    if RANK == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4))
        check(False, "expected PeerError")
    except weft.dist.PeerError as e:
        check(f"rank {victim}" in str(e), f"the error should name rank {victim}: {e}")
    took = time.monotonic() - start
    check(took < 5.0, f"the dead peer took {took:.2f} s to notice")


def interrupt(waited=False):
    if RANK == 1:
        time.sleep(2.0)  # rank 0 was interrupted at 0.5 s and aborted the group
        try:
            dist.all_reduce(torch.ones(4))
            check(False, "expected PeerError")
        except weft.dist.PeerError as e:
            check("Ctrl-C" in str(e), f"PeerError should name the interruption: {e}")
        return
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    try:
        if waited:
            dist.all_reduce(torch.ones(4), async_op=True).wait()
        else:
            dist.all_reduce(torch.ones(4))
        check(False, "expected KeyboardInterrupt")
    except KeyboardInterrupt:
        pass
    took = time.monotonic() - start
    check(took < 1.5, f"Ctrl-C took {took - 0.5:.2f} s to interrupt the call")


{"mismatch": mismatch, "timeout": timeout, "killed": killed, "interrupt": interrupt,
 "interrupt_async": lambda: interrupt(waited=True)}[SCENARIO]()
print(f"rank {RANK}: ok", flush=True)
os._exit(0)  # a broken group: skip destroy_process_group's wait for peers
