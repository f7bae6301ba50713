"""DistributedDataParallel on the weft backend trains as it does on gloo: two copies of one
model, one wrapped over a weft group and one over a gloo group, see the same batches and must
have the same losses and parameters after every step (float tolerance: the backends may sum
in different orders). Under weftrun:

    PYTHONPATH=build/release/python weftrun --nproc-per-node 2 \
        /usr/bin/python3 tests/python/ddp_parity.py
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import weft.torch  # noqa: F401  (registers the backend)

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from torch_llama import Llama  # noqa: E402

STEPS = 6


def model():
    torch.manual_seed(0)
    config = dict(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=64, hidden_dim=96,
                  rope_theta=10000.0, norm_eps=1e-5)
    return Llama(config)


def main():
    dist.init_process_group("weft")
    rank = dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    # Small buckets, so that the reducer runs several all-reduces per step, overlapping backward.
    on_weft = DDP(model(), bucket_cap_mb=0.01)
    on_gloo = DDP(model(), process_group=gloo, bucket_cap_mb=0.01)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (on_weft, on_gloo)]
    torch.manual_seed(1 + rank)  # each rank its own batches
    for step in range(STEPS):
        x = torch.randint(0, 64, (4, 16))
        y = torch.randint(0, 64, (4, 16))
        losses = []
        for m, opt in zip((on_weft, on_gloo), opts):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(m(x).reshape(-1, 64), y.reshape(-1))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        print(f"rank {rank} step {step}: loss weft {losses[0]:.6f} gloo {losses[1]:.6f}",
              flush=True)
        if abs(losses[0] - losses[1]) > 1e-5 * abs(losses[1]):
            print(f"rank {rank}: FAILED: the losses differ", flush=True)
            return 1
    for (name, a), b in zip(on_weft.module.named_parameters(), on_gloo.module.parameters()):
        if not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
            print(f"rank {rank}: FAILED: {name} differs by {(a - b).abs().max():.3g}", flush=True)
            return 1
    # The replicas agree across ranks (DDP's all-reduced gradients kept them in step).
    flat = torch.cat([p.detach().reshape(-1) for p in on_weft.module.parameters()])
    first = flat.clone()
    dist.broadcast(first, src=0)
    if not torch.equal(flat, first):
        print(f"rank {rank}: FAILED: the replicas differ across ranks", flush=True)
        return 1
    dist.destroy_process_group()
    print(f"rank {rank}: ok ({STEPS} steps)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
