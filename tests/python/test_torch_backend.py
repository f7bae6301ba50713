"""weft as a torch.distributed backend, tested the way PyTorch tests its gloo backend
(test/distributed/test_c10d_gloo.py): every collective through torch.distributed's own API,
for each dtype and reduce op, against the result computed locally from every rank's input.
Run under weftrun with 2 and 3 processes (tests/python/CMakeLists.txt):

    PYTHONPATH=build/release/python weftrun --nproc-per-node 3 \
        /usr/bin/python3 tests/python/test_torch_backend.py
"""
import datetime
import os
import signal
import sys
import threading
import warnings
import traceback

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

import weft
import weft._torch
import weft.dist
import weft.torch  # noqa: F401  (registers the backend)

R = dist.ReduceOp
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int32, torch.int64, torch.uint8, torch.int8]


def data(rank, n, dtype, salt=0):
    """Rank `rank`'s input: small values, so that sums and products are exact in every dtype."""
    base = (torch.arange(n) * 7 + rank * 3 + salt) % 5 + 1
    return base.to(dtype)


def expected(op, inputs):
    stack = torch.stack([t.to(torch.float64) for t in inputs])
    if op == R.SUM:
        out = stack.sum(0)
    elif op == R.AVG:
        out = stack.sum(0) / len(inputs)
        if not inputs[0].is_floating_point():
            out = torch.div(stack.sum(0), len(inputs), rounding_mode="floor")
    elif op == R.PRODUCT:
        out = stack.prod(0)
    elif op == R.MIN:
        out = stack.min(0).values
    elif op == R.MAX:
        out = stack.max(0).values
    else:
        ints = [t.to(torch.int64) for t in inputs]
        out = ints[0].clone()
        for t in ints[1:]:
            out = {R.BAND: out & t, R.BOR: out | t, R.BXOR: out ^ t}[op]
    return out.to(inputs[0].dtype)


def ops_for(dtype):
    ops = [R.SUM, R.AVG, R.PRODUCT, R.MIN, R.MAX]
    if not dtype.is_floating_point:
        ops += [R.BAND, R.BOR, R.BXOR]
    return ops


def check(got, want, what, exact=True):
    close = torch.equal(got, want) if exact else torch.allclose(got.double(), want.double(),
                                                                rtol=1e-2)
    if got.dtype != want.dtype or not close:
        raise AssertionError(f"{what}: got {got.tolist()} want {want.tolist()}")


def test_broadcast(rank, size):
    for dtype in FLOATS + INTS:
        for root in range(size):
            t = data(rank, 5, dtype)
            dist.broadcast(t, src=root)
            check(t, data(root, 5, dtype), f"broadcast {dtype} root {root}")


def test_all_reduce(rank, size):
    for dtype in FLOATS + INTS:
        for op in ops_for(dtype):
            t = data(rank, 6, dtype)
            dist.all_reduce(t, op=op)
            # A 16-bit AVG divides the 16-bit sum: it may round differently from the float64
            # quotient expected() rounds once.
            low_precision_avg = op == R.AVG and dtype in (torch.float16, torch.bfloat16)
            check(t, expected(op, [data(r, 6, dtype) for r in range(size)]),
                  f"all_reduce {dtype} {op}", exact=not low_precision_avg)


def test_reduce(rank, size):
    for dtype in [torch.float32, torch.int64]:
        for op in ops_for(dtype):
            for root in range(size):
                t = data(rank, 4, dtype)
                dist.reduce(t, dst=root, op=op)
                if rank == root:
                    check(t, expected(op, [data(r, 4, dtype) for r in range(size)]),
                          f"reduce {dtype} {op} root {root}")


def test_gathers(rank, size):
    for dtype in [torch.float32, torch.bfloat16, torch.uint8]:
        want = [data(r, 3, dtype) for r in range(size)]
        outs = [torch.zeros(3, dtype=dtype) for _ in range(size)]
        dist.all_gather(outs, data(rank, 3, dtype))
        for r in range(size):
            check(outs[r], want[r], f"all_gather {dtype} from {r}")
        flat = torch.zeros(size * 3, dtype=dtype)
        dist.all_gather_into_tensor(flat, data(rank, 3, dtype))
        check(flat, torch.cat(want), f"all_gather_into_tensor {dtype}")
        for root in range(size):
            outs = [torch.zeros(3, dtype=dtype) for _ in range(size)] if rank == root else None
            dist.gather(data(rank, 3, dtype), gather_list=outs, dst=root)
            if rank == root:
                for r in range(size):
                    check(outs[r], want[r], f"gather {dtype} root {root} from {r}")


def test_scatter(rank, size):
    for root in range(size):
        parts = [data(r, 4, torch.int32, salt=root) for r in range(size)]
        out = torch.zeros(4, dtype=torch.int32)
        dist.scatter(out, scatter_list=parts if rank == root else None, src=root)
        check(out, data(rank, 4, torch.int32, salt=root), f"scatter root {root}")


def test_reduce_scatter(rank, size):
    for dtype in [torch.float32, torch.int64]:
        for op in [R.SUM, R.MAX, R.AVG]:
            ins = [data(rank, 2, dtype, salt=j) for j in range(size)]
            out = torch.zeros(2, dtype=dtype)
            dist.reduce_scatter(out, ins, op=op)
            check(out, expected(op, [data(r, 2, dtype, salt=rank) for r in range(size)]),
                  f"reduce_scatter {dtype} {op}")
            out = torch.zeros(2, dtype=dtype)
            dist.reduce_scatter_tensor(out, torch.cat(ins), op=op)
            check(out, expected(op, [data(r, 2, dtype, salt=rank) for r in range(size)]),
                  f"reduce_scatter_tensor {dtype} {op}")


def test_all_to_all(rank, size):
    # Equal blocks: block j of rank r's input is data(r, 2, salt=j).
    inp = torch.cat([data(rank, 2, torch.float32, salt=j) for j in range(size)])
    out = torch.zeros(2 * size)
    dist.all_to_all_single(out, inp)
    check(out, torch.cat([data(r, 2, torch.float32, salt=rank) for r in range(size)]),
          "all_to_all_single")
    # Uneven rows of a 2-D tensor: rank r sends j + 1 rows to rank j.
    inp = torch.cat([torch.full((j + 1, 3), float(rank * 10 + j)) for j in range(size)])
    out = torch.zeros((rank + 1) * size, 3)
    dist.all_to_all_single(out, inp, output_split_sizes=[rank + 1] * size,
                           input_split_sizes=[j + 1 for j in range(size)])
    want = torch.cat([torch.full((rank + 1, 3), float(r * 10 + rank)) for r in range(size)])
    check(out, want, "all_to_all_single with splits")
    # Lists of tensors, of different sizes per peer.
    ins = [torch.full((j + 1,), rank * 10 + j, dtype=torch.int64) for j in range(size)]
    outs = [torch.zeros(rank + 1, dtype=torch.int64) for _ in range(size)]
    dist.all_to_all(outs, ins)
    for r in range(size):
        check(outs[r], torch.full((rank + 1,), r * 10 + rank, dtype=torch.int64),
              f"all_to_all from {r}")


def test_point_to_point(rank, size):
    right, left = (rank + 1) % size, (rank - 1) % size
    got = torch.zeros(4, dtype=torch.float64)
    if rank % 2 == 0:
        dist.send(data(rank, 4, torch.float64), dst=right)
        dist.recv(got, src=left)
    else:
        dist.recv(got, src=left)
        dist.send(data(rank, 4, torch.float64), dst=right)
    check(got, data(left, 4, torch.float64), "send/recv ring")
    # Non-blocking, posted before the matching send, with tags.
    reqs = [dist.irecv(got, src=left, tag=7), dist.isend(data(rank, 4, torch.float64, salt=1),
                                                        dst=right, tag=7)]
    for req in reqs:
        req.wait()
    check(got, data(left, 4, torch.float64, salt=1), "isend/irecv")
    # From whichever rank sends: rank 0 hears from everyone else.
    if rank == 0:
        senders = set()
        for _ in range(size - 1):
            t = torch.zeros(1, dtype=torch.int32)
            sender = dist.recv(t)
            check(t, torch.tensor([sender], dtype=torch.int32), "recv from any")
            senders.add(sender)
        assert senders == set(range(1, size)), senders
    else:
        dist.send(torch.tensor([rank], dtype=torch.int32), dst=0)


def test_async(rank, size):
    works = []
    tensors = []
    for i in range(8):
        t = data(rank, 3, torch.float32, salt=i)
        tensors.append(t)
        works.append(dist.all_reduce(t, async_op=True))
    futures = [w.get_future() for w in works[:4]]
    torch.futures.wait_all(futures)
    for w in works[4:]:
        assert w.wait()
    for i, t in enumerate(tensors):
        check(t, expected(R.SUM, [data(r, 3, torch.float32, salt=i) for r in range(size)]),
              f"async all_reduce {i}")
    assert all(w.is_completed() for w in works)
    fut = dist.all_reduce(torch.ones(2), async_op=True).get_future()
    check(fut.wait()[0], torch.full((2,), float(size)), "the future's value")
    # A blocking call behind unfinished async ones runs after them (weft queues it then).
    t = torch.ones(1)
    pending = [dist.all_reduce(t, async_op=True) for _ in range(4)]
    dist.all_reduce(t)
    assert all(w.is_completed() for w in pending)
    check(t, torch.full((1,), float(size ** 5)), "async all_reduces, then a blocking one")
    for _ in range(50):  # once wait() returned, the future is done too
        work = dist.all_reduce(torch.ones(1), async_op=True)
        work.wait()
        assert work.get_future().done()
        check(work.get_future().value()[0], torch.full((1,), float(size)), "value after wait")
    dist.barrier()


def test_non_contiguous(rank, size):
    def grid(r):
        return torch.stack([data(r, 4, torch.float32, salt=i) for i in range(3)])  # 3x4

    base = grid(rank)
    view = base.t()[::2]  # 2x3, strided
    assert not view.is_contiguous()
    dist.all_reduce(view)
    check(view.contiguous(), sum(grid(r).t()[::2] for r in range(size)).contiguous(),
          "all_reduce of a strided view")
    check(base[:, 1], grid(rank)[:, 1], "the elements outside the view")
    outs = [torch.zeros(4, 2).t() for _ in range(size)]  # non-contiguous outputs
    dist.all_gather(outs, torch.full((2, 4), float(rank)))
    for r in range(size):
        check(outs[r], torch.full((2, 4), float(r)), f"all_gather into strided outputs {r}")


def test_bool_and_grad(rank, size):
    flags = torch.tensor([rank == 0, True, False])
    dist.all_reduce(flags, op=R.MAX)
    check(flags, torch.tensor([True, True, False]), "bool MAX")
    flags = torch.tensor([rank == 0, True, False])
    dist.all_reduce(flags, op=R.MIN)
    check(flags, torch.tensor([size == 1, True, False]), "bool MIN")
    try:
        dist.all_reduce(torch.tensor([True]), op=R.SUM)
        raise AssertionError("a SUM of bools went through")
    except ValueError as e:
        assert "bool" in str(e), e
    # A parameter that requires grad, as DDP broadcasts them.
    p = torch.nn.Parameter(torch.full((3,), float(rank)))
    dist.broadcast(p.data, src=1 % size)
    dist.broadcast(p, src=1 % size)
    check(p.detach(), torch.full((3,), float(1 % size)), "broadcast of a parameter")


def expect_value_error(what, call):
    try:
        call()
    except ValueError as e:
        assert isinstance(e, weft.InvalidArgument), type(e)
        return str(e)
    raise AssertionError(f"{what}: no ValueError")


def test_refused_locally(rank, size):
    """Calls wrong on this rank fail before anything is sent: the group stays usable."""
    quantized = torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.quint8)
    msg = expect_value_error("quantized", lambda: dist.all_reduce(quantized))
    assert "QUInt8" in msg, msg
    expect_value_error("sparse", lambda: dist.all_reduce(torch.eye(2).to_sparse()))
    expect_value_error("list size",
                       lambda: dist.all_gather([torch.zeros(1)] * (size + 1), torch.zeros(1)))
    expect_value_error("element count",
                       lambda: dist.all_gather([torch.zeros(2)] * size, torch.zeros(1)))
    expect_value_error("splits", lambda: dist.all_to_all_single(
        torch.zeros(size), torch.zeros(size), input_split_sizes=[size + 1] + [0] * (size - 1)))
    expect_value_error("root", lambda: dist.broadcast(torch.zeros(1), src=size))
    msg = expect_value_error("premul_sum", lambda: dist.all_reduce(
        torch.ones(1), op=dist._make_nccl_premul_sum(2.0)))
    assert "PREMUL_SUM" in msg, msg
    for op in (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR):
        msg = expect_value_error(f"{op} on floats", lambda: dist.all_reduce(torch.ones(1), op=op))
        assert "bitwise" in msg, msg
    try:
        dist.all_gather_coalesced([[torch.zeros(1)] * size], [torch.zeros(1)])
        raise AssertionError("all_gather_coalesced went through")
    except RuntimeError as e:
        assert "allgather_coalesced" in str(e), e
    # torch refuses it for every backend but gloo; the group object itself does too.
    for name, call in (("dist.monitored_barrier", lambda: dist.monitored_barrier()),
                       ("the group's monitored_barrier", lambda: c10d._get_default_group()
                        .monitored_barrier(datetime.timedelta(seconds=5)))):
        try:
            call()
            raise AssertionError(name + " went through")
        except RuntimeError as e:
            assert "monitored" in str(e).lower() and "GLOO" in str(e), (name, e)
    t = torch.ones(1)
    dist.all_reduce(t)  # still usable
    c = torch.full((2,), complex(rank, 1))  # torch passes complex tensors as float pairs
    dist.all_reduce(c)
    check(c, torch.full((2,), complex(size * (size - 1) // 2, size)), "complex all_reduce")
    check(t, torch.full((1,), float(size)), "the group after refused calls")


def test_blocking_calls_are_marked(rank, size):
    """import weft.torch wrapped torch.distributed's blocking calls, there and in
    distributed_c10d; the hint they give is withdrawn however they leave."""
    for name in ("all_reduce", "broadcast", "all_gather", "reduce_scatter_tensor", "barrier",
                 "send", "recv"):
        assert getattr(dist, name)._weft_waited_at_once, name
        assert getattr(c10d, name) is getattr(dist, name), name
    expect_value_error("root", lambda: dist.broadcast(torch.zeros(1), src=size))
    assert weft._torch._caller_waits(False) is False, "the hint outlived a failed call"
    # The hint each call gives (weft.torch looks _caller_waits up at every call): only for a
    # call that waits, on the main thread, while SIGINT keeps Python's meaning. The results
    # are the same every way.
    seen = []
    real = weft.torch._caller_waits

    def record(on):
        seen.append(on)
        return real(on)

    def hint_of(call):
        seen.clear()
        call()
        return seen[0]

    t = torch.ones(1)
    weft.torch._caller_waits = record
    try:
        assert hint_of(lambda: dist.all_reduce(t)) is True
        assert hint_of(lambda: dist.all_reduce(t, async_op=True).wait()) is False
        assert hint_of(lambda: dist.all_reduce(t, R.SUM, None, True).wait()) is False
        assert hint_of(lambda: dist.barrier()) is True
        from_thread = []
        worker = threading.Thread(
            target=lambda: from_thread.append(hint_of(lambda: dist.all_reduce(t))))
        worker.start()
        worker.join()
        assert from_thread == [False], from_thread
        previous = signal.signal(signal.SIGINT, lambda *_: None)
        try:
            assert hint_of(lambda: dist.all_reduce(t)) is False
        finally:
            signal.signal(signal.SIGINT, previous)
        assert hint_of(lambda: dist.all_reduce(t)) is True
    finally:
        weft.torch._caller_waits = real
    check(t, torch.full((1,), float(size ** 6)), "all_reduces with and without the hint")


def test_coalesced_and_objects(rank, size):
    ts = [data(rank, 2, torch.float32), data(rank, 3, torch.float32, salt=1)]
    dist.all_reduce_coalesced(ts)
    check(ts[1], expected(R.SUM, [data(r, 3, torch.float32, salt=1) for r in range(size)]),
          "all_reduce_coalesced")
    objs = [None] * size
    dist.all_gather_object(objs, {"rank": rank, "name": "r" * rank})
    assert objs == [{"rank": r, "name": "r" * r} for r in range(size)], objs
    lst = [f"from {rank}", rank] if rank == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    assert lst == ["from 0", 0], lst


def test_new_group(rank, size):
    if size < 3:
        members = [0, 1]
    else:
        members = [0, 2]
    g = dist.new_group(members, backend="weft")
    if rank in members:
        assert dist.get_backend(g) == "weft"
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=g)
        check(t, torch.tensor([float(sum(members))]), "all_reduce in a new group")
        dist.broadcast(t, src=members[-1], group=g)  # a global rank as src
        check(t, torch.tensor([float(sum(members))]), "broadcast in a new group")
        mine = torch.tensor([float(rank)])
        dist.broadcast(mine, src=members[-1], group=g)
        check(mine, torch.tensor([float(members[-1])]), "broadcast from the last member")
    else:
        assert g == dist.GroupMember.NON_GROUP_MEMBER
    gloo = dist.new_group(backend="gloo")  # weft's and gloo's groups side by side
    t = torch.ones(1)
    dist.all_reduce(t, group=gloo)
    dist.all_reduce(t)
    check(t, torch.full((1,), float(size * size)), "gloo then weft")


TESTS = [test_broadcast, test_all_reduce, test_reduce, test_gathers, test_scatter,
         test_reduce_scatter, test_all_to_all, test_point_to_point, test_async,
         test_non_contiguous, test_bool_and_grad, test_refused_locally,
         test_blocking_calls_are_marked, test_coalesced_and_objects, test_new_group]


def main():
    warnings.filterwarnings("ignore", message=".*will be deprecated")  # the _coalesced calls
    dist.init_process_group("weft")
    rank, size = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "weft", dist.get_backend()
    engine = dist.distributed_c10d._get_default_group().weft_backend
    assert engine == os.environ.get("WEFT_BACKEND", "shm"), engine
    failed = 0
    for test in TESTS:
        try:
            test(rank, size)
        except Exception:  # noqa: BLE001  (report every failure, then fail the job)
            failed += 1
            print(f"rank {rank}: FAILED {test.__name__}", flush=True)
            traceback.print_exc()
            break  # the ranks' sequences of collectives no longer line up
    dist.destroy_process_group()
    print(f"rank {rank}: {'FAILED' if failed else 'ok'} ({len(TESTS)} tests)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
