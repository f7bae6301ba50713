#!/usr/bin/env python3
"""The PyTorch side of bench/train/compare.sh: trains weft's Llama (python/torch_llama.py)
with AdamW on random windows of Tiny Shakespeare and prints one line:

    torch tps <tokens/s> memory_mib <peak RSS> steps <timed steps>

Usage: torch_train.py DIM LAYERS HEADS SEQ BATCH STEPS THREADS [RANKS [BACKEND]]
DTYPE=bfloat16 in the environment runs the forward and the loss under torch.autocast("cpu",
torch.bfloat16) (PyTorch's mixed precision; float32 master weights and optimizer).
Set OPENBLAS_NUM_THREADS and OMP_WAIT_POLICY=PASSIVE in the environment (compare.sh does):
PyTorch's thread setting does not limit OpenBLAS. With RANKS > 1 it starts that many
processes (torch.multiprocessing; Debian's torchrun fails under Python 3.11) and trains with
DistributedDataParallel over BACKEND (gloo, or weft: PYTHONPATH must reach weft's package,
build/release/python), BATCH sequences per rank; rank 0 prints the global tokens/s and the
largest rank's memory.
"""
import os
import resource
import sys
import time

# Appended: the weft package PYTHONPATH names (the build tree's) goes before python/weft.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch_llama import Llama  # noqa: E402

WARMUP = 2


def main(dim, layers, heads, seq, batch, steps, threads, rank=0, world=1, port=0,
         backend="gloo"):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    hidden = 32 * ((2 * 4 * dim // 3 + 31) // 32)
    c = dict(dim=dim, n_layers=layers, n_heads=heads, n_kv_heads=heads, vocab_size=256,
             hidden_dim=hidden, rope_theta=10000.0, norm_eps=1e-5)
    model = Llama(c)
    for name, p in model.named_parameters():
        if not name.endswith("norm.weight"):
            torch.nn.init.normal_(p, std=0.02)
    if world > 1:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        if backend == "weft":
            import weft.torch  # noqa: F401  (registers the backend)
        torch.distributed.init_process_group(backend, rank=rank, world_size=world)
        torch.manual_seed(rank)  # each rank its own batches
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=8e-4, betas=(0.9, 0.95), weight_decay=0.1)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    with open(os.path.join(root, "data", "tinyshakespeare.txt"), "rb") as f:
        data = torch.tensor(list(f.read()), dtype=torch.long)
    autocast = os.environ.get("DTYPE", "float32") == "bfloat16"
    times = []
    for step in range(WARMUP + steps):
        starts = torch.randint(0, len(data) - seq - 1, (batch,))
        x = torch.stack([data[s : s + seq] for s in starts])
        y = torch.stack([data[s + 1 : s + seq + 1] for s in starts])
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= WARMUP:
            times.append(time.perf_counter() - t0)
    elapsed = torch.tensor([sum(times)])
    memory = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024])
    if world > 1:  # the slowest rank's time and the largest rank's memory
        torch.distributed.all_reduce(elapsed, op=torch.distributed.ReduceOp.MAX)
        torch.distributed.all_reduce(memory, op=torch.distributed.ReduceOp.MAX)
        if torch.distributed.get_rank() != 0:
            return
    tps = world * batch * seq * len(times) / float(elapsed)
    print(f"torch tps {tps:.0f} memory_mib {float(memory):.0f} steps {len(times)}")


def spawned(rank, args, world, port, backend):
    main(*args, rank=rank, world=world, port=port, backend=backend)


if __name__ == "__main__":
    if len(sys.argv) not in (8, 9, 10):
        sys.exit(__doc__)
    args = [int(a) for a in sys.argv[1:8]]
    ranks = int(sys.argv[8]) if len(sys.argv) >= 9 else 1
    backend = sys.argv[9] if len(sys.argv) == 10 else "gloo"
    if ranks == 1:
        main(*args)
    else:
        port = 29700 + os.getpid() % 1000
        torch.multiprocessing.spawn(spawned, args=(args, ranks, port, backend), nprocs=ranks)
