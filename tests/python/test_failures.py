"""Failures seen from Python, one scenario per run (2 processes under weftrun):

    weftrun --nproc-per-node 2 /usr/bin/python3 tests/python/test_failures.py timeout
    weftrun --nproc-per-node 2 /usr/bin/python3 tests/python/test_failures.py interrupt
    weftrun --nproc-per-node 2 /usr/bin/python3 tests/python/test_failures.py killed

timeout:   rank 0 all-reduces alone with a 0.5 s timeout: weft.TimeoutError (a built-in
           TimeoutError too) in time, then GroupBroken; rank 1, arriving late, gets PeerError.
interrupt: rank 0 blocks in an all-reduce rank 1 does not join and gets SIGINT 0.5 s later:
           KeyboardInterrupt within a second, not at the 30 s timeout; rank 1 gets PeerError
           naming the interruption.
interrupt_wait, interrupt_wait_timeout: the same, blocked in Work.wait() and in
           Work.wait(timeout=30) of an async all-reduce, which go on running: rank 1's
           PeerError says rank 0 left with them unfinished.
killed:    the last rank is killed (SIGKILL); every other rank's next all-reduce raises
           PeerError naming it within 3 s. weftrun then fails the job, so the test looks for
           the survivors' "ok".
ignored:   with SIGINT ignored before init_process_group, a SIGINT during a blocked
           all-reduce leaves it to complete.
rejoin:    init_process_group after destroy_process_group raises ValueError.
Each rank exits 0 when it saw what it should, 1 otherwise.
"""
import os
import signal
import sys
import threading
import time

import numpy as np

import weft
import weft.dist as dist

if sys.argv[1] == "ignored":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
WORLD = dist.init_process_group(timeout=30)
RANK = WORLD.rank()


def check(condition, what):
    if not condition:
        print(f"rank {RANK}: FAILED: {what}", flush=True)
        sys.exit(1)


def expect_peer_error(after_seconds, words):
    time.sleep(after_seconds)
    try:
        dist.all_reduce(np.ones(4, np.float32))
    except dist.PeerError as e:
        check(words in str(e), f"PeerError should say '{words}': {e}")
        return
    check(False, "expected PeerError")


def timeout():
    if RANK == 1:
        return expect_peer_error(3.0, "rank 0 failed")  # after rank 0 gave up (0.5 + 1 s)
    start = time.monotonic()
    try:
        dist.all_reduce(np.ones(4, np.float32), timeout=0.5)
        check(False, "expected a timeout")
    except TimeoutError as e:  # the built-in class catches weft.TimeoutError
        check(isinstance(e, weft.TimeoutError), f"{type(e)} is not weft.TimeoutError")
        check("rank 1" in str(e), f"the error should name rank 1: {e}")
    took = time.monotonic() - start
    check(0.4 < took < 3.0, f"timed out after {took:.2f} s, not about 0.5")
    try:
        dist.barrier()
        check(False, "expected GroupBroken")
    except dist.GroupBroken:
        pass


def interrupt(wait=None):
    if RANK == 1:
        # A blocking call's Ctrl-C aborts the group; an interrupted wait leaves the operation
        # running, until rank 0 exits with it unfinished (well before 3.5 s: its own call
        # would otherwise meet rank 0's pending one).
        return expect_peer_error(2.0 if wait is None else 3.5,
                                 "SIGINT" if wait is None else "rank 0 destroyed")
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    try:
        if wait is None:
            dist.all_reduce(np.ones(4, np.float32))
        else:
            wait(dist.all_reduce(np.ones(4, np.float32), async_op=True))
        check(False, "expected KeyboardInterrupt")
    except KeyboardInterrupt:
        pass
    took = time.monotonic() - start
    check(took < 1.5, f"Ctrl-C took {took:.2f} s to interrupt the call")


def ignored():
    # Set before init_process_group: weft leaves an ignored SIGINT ignored, so a SIGINT
    # during a call that then completes changes nothing.
    if RANK == 0:
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    else:
        time.sleep(1.0)
    x = np.ones(4, np.float32)
    dist.all_reduce(x)
    check(np.all(x == 2), f"the all-reduce gave {x}")


def rejoin():
    dist.destroy_process_group()
    try:
        dist.init_process_group()
        check(False, "joining twice should be refused")
    except ValueError as e:
        check("joins once" in str(e), f"unexpected message: {e}")


def killed():
    # weftrun stops the other workers with SIGTERM once one dies; rank 0 stays to see the
    # error itself (weftrun's SIGKILL comes --stop-grace seconds later).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    dist.barrier()
    victim = WORLD.size() - 1
    if RANK == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        dist.all_reduce(np.ones(4, np.float32))
        check(False, "expected PeerError")
    except dist.PeerError as e:
        check(f"rank {victim}" in str(e), f"the error should name rank {victim}: {e}")
    took = time.monotonic() - start
    check(took < 3.0, f"the dead peer took {took:.2f} s to notice")


{"timeout": timeout, "interrupt": interrupt,
 "interrupt_wait": lambda: interrupt(lambda work: work.wait()),
 "interrupt_wait_timeout": lambda: interrupt(lambda work: work.wait(timeout=30)),
 "killed": killed, "ignored": ignored, "rejoin": rejoin}[sys.argv[1]]()
print(f"rank {RANK}: ok", flush=True)
