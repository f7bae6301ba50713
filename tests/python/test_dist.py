"""weft.dist from Python, as a user runs it: every rank is a process under weftrun.

    weftrun --nproc-per-node 3 /usr/bin/python3 tests/python/test_dist.py

Every rank runs the same tests in the same order (unittest sorts them by name), so their
collectives match; each checks its results against values computed here with numpy. A short
group timeout turns a rank that fails early into errors on the others rather than a hang.
"""
import gc
import threading
import time
import unittest

import numpy as np

import weft
import weft.dist as dist

try:
    import torch
except ImportError:  # the torch tests are skipped where python3-torch is missing
    torch = None

WORLD = dist.init_process_group(timeout=30)
RANK, SIZE = WORLD.rank(), WORLD.size()

DTYPES = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int32, np.int64]
INTEGER = {np.int8, np.uint8, np.int32, np.int64}


def values(rank, dtype, n=7):
    """Small positive values, different on every rank, exact in every dtype."""
    return (np.arange(n) % 3 + rank + 1).astype(dtype)


def reference(op, dtype, n=7):
    stack = np.stack([values(r, dtype, n) for r in range(SIZE)]).astype(np.float64)
    if op == dist.ReduceOp.SUM:
        out = stack.sum(0)
    elif op == dist.ReduceOp.PRODUCT:
        out = stack.prod(0)
    elif op == dist.ReduceOp.MIN:
        out = stack.min(0)
    elif op == dist.ReduceOp.MAX:
        out = stack.max(0)
    elif op == dist.ReduceOp.AVG:
        out = stack.sum(0) / SIZE
        if dtype in INTEGER:
            out = np.floor(out)
    else:
        ints = [values(r, dtype, n) for r in range(SIZE)]
        fn = {dist.ReduceOp.BAND: np.bitwise_and, dist.ReduceOp.BOR: np.bitwise_or,
              dist.ReduceOp.BXOR: np.bitwise_xor}[op]
        out = ints[0]
        for v in ints[1:]:
            out = fn(out, v)
    return out.astype(dtype)


class CollectivesTest(unittest.TestCase):
    def test_all_reduce_every_dtype_and_op(self):
        for dtype in DTYPES:
            ops = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN,
                   dist.ReduceOp.MAX, dist.ReduceOp.AVG]
            if dtype in INTEGER:
                ops += [dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR]
            for op in ops:
                x = values(RANK, dtype)
                dist.all_reduce(x, op)
                np.testing.assert_allclose(x.astype(np.float64),
                                           reference(op, dtype).astype(np.float64),
                                           rtol=1e-3, err_msg=f"{dtype.__name__} {op}")

    def test_all_reduce_works_in_place_on_multidimensional_arrays(self):
        x = np.ones((3, 4), np.float32) * (RANK + 1)
        view = x.reshape(-1)
        dist.all_reduce(x)
        self.assertTrue(np.all(view == SIZE * (SIZE + 1) / 2))

    def test_broadcast_from_every_root(self):
        for root in range(SIZE):
            x = np.full(1000, RANK, np.int32)
            dist.broadcast(x, root)
            self.assertTrue(np.all(x == root))

    def test_reduce_leaves_the_others_alone(self):
        x = values(RANK, np.int64)
        dist.reduce(x, SIZE - 1)
        expected = reference(dist.ReduceOp.SUM, np.int64) if RANK == SIZE - 1 else values(
            RANK, np.int64)
        np.testing.assert_array_equal(x, expected)

    def test_all_gather_into_a_list(self):
        mine = np.full(3, RANK, np.int32)
        parts = [np.zeros(3, np.int32) for _ in range(SIZE)]
        dist.all_gather(parts, mine)
        for r, part in enumerate(parts):
            self.assertTrue(np.all(part == r))
        dist.all_gather(parts, mine, async_op=True).wait()
        with self.assertRaises(ValueError):
            dist.all_gather(parts[:-1], mine)

    def test_a_timeout_that_is_not_a_positive_number_is_refused(self):
        x = np.ones(4, np.float32)
        for bad in (-1, 0, float("nan"), float("inf")):
            with self.assertRaises(ValueError):
                dist.all_reduce(x, timeout=bad)
            with self.assertRaises(ValueError):
                WORLD.timeout = bad
        dist.all_reduce(x)  # the group is as it was
        self.assertTrue(np.all(x == SIZE))

    def test_all_gather_and_all_gather_v(self):
        out = np.zeros((SIZE, 3), np.float64)
        dist.all_gather(out, np.full(3, RANK, np.float64))
        np.testing.assert_array_equal(out, np.repeat(np.arange(SIZE), 3).reshape(SIZE, 3))
        counts = [r + 1 for r in range(SIZE)]
        out_v = np.zeros(sum(counts), np.int32)
        dist.all_gather_v(out_v, np.full(RANK + 1, RANK, np.int32), counts)
        np.testing.assert_array_equal(out_v, np.repeat(np.arange(SIZE), counts))

    def test_gather_and_scatter(self):
        root = SIZE - 1
        out = np.zeros(2 * SIZE, np.int64) if RANK == root else None
        dist.gather(out, np.array([RANK, -RANK], np.int64), root)
        if RANK == root:
            np.testing.assert_array_equal(out.reshape(SIZE, 2)[:, 0], np.arange(SIZE))
        blocks = np.arange(2 * SIZE, dtype=np.float32) if RANK == 0 else None
        mine = np.zeros(2, np.float32)
        dist.scatter(mine, blocks, 0)
        np.testing.assert_array_equal(mine, [2 * RANK, 2 * RANK + 1])

    def test_reduce_scatter(self):
        inp = np.arange(SIZE * 4, dtype=np.float32) + RANK
        out = np.zeros(4, np.float32)
        dist.reduce_scatter(out, inp)
        full = sum(np.arange(SIZE * 4, dtype=np.float32) + r for r in range(SIZE))
        np.testing.assert_array_equal(out, full[RANK * 4:(RANK + 1) * 4])

    def test_all_to_all_and_v(self):
        inp = np.array([RANK * 10 + j for j in range(SIZE)], np.int32)
        out = np.zeros(SIZE, np.int32)
        dist.all_to_all(out, inp)
        np.testing.assert_array_equal(out, [i * 10 + RANK for i in range(SIZE)])
        # rank i sends j + 1 elements to rank j
        in_counts = [j + 1 for j in range(SIZE)]
        send = np.concatenate([np.full(j + 1, RANK, np.int64) for j in range(SIZE)])
        out_counts = [RANK + 1] * SIZE
        recv = np.zeros(sum(out_counts), np.int64)
        dist.all_to_all_v(recv, out_counts, send, in_counts)
        np.testing.assert_array_equal(recv, np.repeat(np.arange(SIZE), RANK + 1))

    def test_point_to_point_ring_and_recv_any(self):
        right, left = (RANK + 1) % SIZE, (RANK - 1) % SIZE
        got = np.zeros(5, np.float32)
        # A group runs its operations in issue order, and a send does not wait for its
        # receive: send first, then receive.
        work = WORLD.send(np.full(5, RANK, np.float32), right, 3, async_op=True)
        dist.recv(got, left, tag=3)
        work.wait()
        self.assertTrue(np.all(got == left))
        if RANK == 0:
            seen = set()
            for _ in range(SIZE - 1):
                one = np.zeros(1, np.int32)
                src = dist.recv_any(one, tag=9)
                self.assertEqual(one[0], src * 7)
                seen.add(src)
            self.assertEqual(seen, set(range(1, SIZE)))
        else:
            dist.send(np.array([RANK * 7], np.int32), 0, tag=9)

    def test_isend_and_irecv(self):
        right, left = (RANK + 1) % SIZE, (RANK - 1) % SIZE
        got, anyone = np.zeros(3, np.int64), np.zeros(1, np.int64)
        receives = [dist.irecv(got, left, tag=4), dist.irecv(anyone, tag=5)]
        sends = [dist.isend(np.full(3, RANK, np.int64), right, tag=4),
                 dist.isend(np.array([RANK], np.int64), right, tag=5)]
        for w in sends + receives:
            w.wait()
        self.assertTrue(np.all(got == left))
        self.assertEqual(anyone[0], left)
        self.assertEqual(receives[1].source_rank(), left)

    def test_barrier(self):
        dist.barrier()
        dist.barrier(async_op=True).wait()


class TorchTest(unittest.TestCase):
    @unittest.skipIf(torch is None, "python3-torch is not installed")
    def test_torch_tensors_in_place_through_dlpack(self):
        for dtype in [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32,
                      torch.int64, torch.uint8]:
            t = torch.full((2, 3), RANK + 1, dtype=dtype)
            storage = t.data_ptr()
            dist.all_reduce(t)
            self.assertEqual(t.data_ptr(), storage)
            self.assertTrue(bool((t == SIZE * (SIZE + 1) // 2).all()), f"{dtype}: {t}")

    @unittest.skipIf(torch is None, "python3-torch is not installed")
    def test_parameters_that_require_grad_and_bool(self):
        p = torch.nn.Parameter(torch.full((4,), float(RANK)))
        dist.broadcast(p, 0)  # in place in the parameter, as torch.distributed does
        self.assertTrue(bool((p.detach() == 0).all()))
        with self.assertRaises(ValueError):
            dist.all_reduce(torch.zeros(4, dtype=torch.bool))

    @unittest.skipIf(torch is None, "python3-torch is not installed")
    def test_torch_non_contiguous_is_refused_and_contiguous_works(self):
        t = torch.zeros(4, 4)
        with self.assertRaises(ValueError):
            dist.all_reduce(t.t())
        with self.assertRaises(ValueError):
            dist.all_reduce(t[:, 1])
        row = t[1]  # a contiguous slice: in place in t's storage
        row += 1
        dist.all_reduce(row)
        self.assertTrue(bool((t[1] == SIZE).all()))
        self.assertTrue(bool((t[0] == 0).all()))


class AsyncTest(unittest.TestCase):
    def test_works_complete_in_issue_order(self):
        xs = [np.full(100, RANK + i, np.float64) for i in range(8)]
        works = [dist.all_reduce(x, async_op=True) for x in xs]
        works[-1].wait()
        self.assertTrue(all(w.is_completed() for w in works))
        for i, x in enumerate(xs):
            self.assertTrue(np.all(x == sum(r + i for r in range(SIZE))))

    def test_dropped_work_keeps_its_memory_alive(self):
        x = np.full(1 << 16, RANK, np.float32)
        dist.all_reduce(x, async_op=True)  # the Work is dropped at once
        dist.barrier()  # issued after it, so completes after it
        self.assertTrue(np.all(x == sum(range(SIZE))))
        # Nothing but the operation refers to this array once the Work is gone.
        dist.all_reduce(np.full(1 << 18, RANK, np.float64), async_op=True)
        gc.collect()
        dist.barrier()

    def test_read_only_root_of_a_broadcast(self):
        x = np.full(8, 7 if RANK == 0 else 0, np.int32)
        if RANK == 0:
            x.setflags(write=False)
        dist.broadcast(x, 0)
        self.assertTrue(np.all(x == 7))

    def test_big_endian_is_refused(self):
        with self.assertRaises(ValueError):
            dist.all_reduce(np.zeros(4, ">f4"))

    def test_wait_with_timeout(self):
        w = dist.all_reduce(np.ones(4, np.int32), async_op=True)
        w.wait(timeout=10.0)
        self.assertTrue(w.is_completed())

    def test_wait_timeout_runs_out_and_the_operation_goes_on(self):
        dist.barrier()
        if RANK != 0:
            time.sleep(1.5)  # rank 0's wait gives up first
        x = np.ones(4, np.int32)
        w = dist.all_reduce(x, async_op=True)
        if RANK == 0:
            start = time.monotonic()
            with self.assertRaises(TimeoutError) as caught:
                w.wait(timeout=0.2)
            self.assertIsInstance(caught.exception, weft.TimeoutError)
            self.assertIn("within 0.2 s", str(caught.exception))
            self.assertLess(time.monotonic() - start, 1.2)
        w.wait()
        self.assertTrue(np.all(x == SIZE))
        w.wait(timeout=0)  # done: no timeout, however short
        w.wait(timeout=float("inf"))
        with self.assertRaises(ValueError):
            w.wait(timeout=float("nan"))


class ErrorsTest(unittest.TestCase):
    def test_wrong_calls_raise_value_errors_on_this_rank(self):
        cases = [
            lambda: dist.all_reduce(np.zeros((4, 4), np.float32)[:, 1]),  # not contiguous
            lambda: dist.all_reduce(np.zeros(4, np.complex64)),  # dtype
            lambda: dist.all_reduce([1.0, 2.0]),  # exports no memory
            lambda: dist.all_reduce(bytes(4)),  # read-only
            lambda: dist.all_reduce(np.zeros(4, np.float32), dist.ReduceOp.BAND),  # bitwise
            lambda: dist.broadcast(np.zeros(4, np.float32), SIZE),  # no such root
            lambda: dist.all_gather(np.zeros(SIZE * 4 + 1, np.float32),
                                    np.zeros(4, np.float32)),  # sizes
            lambda: dist.all_gather(np.zeros(SIZE * 4, np.float64),
                                    np.zeros(4, np.float32)),  # dtypes
        ]
        for i, case in enumerate(cases):
            with self.assertRaises(ValueError, msg=f"case {i}"):
                case()
            with self.assertRaises(weft.Error, msg=f"case {i}"):
                case()
        dist.barrier()  # and the group is still usable
        x = np.ones(2, np.float32)
        dist.all_reduce(x)
        self.assertTrue(np.all(x == SIZE))

    def test_read_only_input_is_fine(self):
        inp = np.full(2, RANK, np.float32)
        inp.setflags(write=False)
        out = np.zeros(2 * SIZE, np.float32)
        dist.all_gather(out, inp)
        np.testing.assert_array_equal(out, np.repeat(np.arange(SIZE), 2).astype(np.float32))


class GroupsTest(unittest.TestCase):
    def test_new_group_and_split(self):
        pair = dist.new_group([0, 1])
        if RANK < 2:
            x = np.ones(3, np.int32)
            pair.all_reduce(x)
            self.assertEqual(pair.size(), 2)
            self.assertTrue(np.all(x == 2))
        else:
            self.assertIsNone(pair)
        half = dist.split(RANK % 2)
        y = np.ones(1, np.int64)
        half.all_reduce(y)
        self.assertEqual(y[0], len([r for r in range(SIZE) if r % 2 == RANK % 2]))
        self.assertEqual(half.size(), y[0])

    def test_waiting_calls_let_other_threads_run(self):
        """The GIL is released while new_group, split and a collective wait for a late rank:
        a thread counting in Python meanwhile gets on. (A call that did not wait, as
        new_group on a backend whose subgroups need no exchange, proves nothing.)"""
        counted = [0]
        stop = threading.Event()

        def count():
            while not stop.is_set():
                counted[0] += 1

        counter = threading.Thread(target=count)
        counter.start()
        held = []
        try:
            for name, call in (("new_group", lambda: dist.new_group(list(range(SIZE)))),
                               ("split", lambda: dist.split(0)),
                               ("barrier", dist.barrier)):
                if RANK == SIZE - 1:
                    time.sleep(0.3)
                before, start = counted[0], time.monotonic()
                call()
                if time.monotonic() - start > 0.2 and counted[0] - before < 1000:
                    held.append(name)
        finally:
            stop.set()
            counter.join()
        self.assertEqual(held, [], "held the GIL while waiting")

    def test_properties(self):
        self.assertEqual(dist.get_rank(), RANK)
        self.assertEqual(dist.get_world_size(), SIZE)
        self.assertTrue(dist.is_initialized())
        self.assertIn(WORLD.backend, dist.registered_backends())
        self.assertEqual(WORLD.timeout, 30.0)
        with self.assertRaises(ValueError):
            dist.init_process_group()


if __name__ == "__main__":
    unittest.main(verbosity=1)
