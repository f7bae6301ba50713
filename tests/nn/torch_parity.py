#!/usr/bin/env python3
"""weft's Llama against the same model written in PyTorch.

Reads what llama_parity_dump wrote into DIR (initial weights, one batch, weft's logits, loss
and gradients, and the losses of ten AdamW steps), builds the model in PyTorch from the same
weights and checks, in float32:
  - the loss to 1e-5 relative, the logits to 1e-4, every parameter's gradient to 1e-4
    (relative to the largest entry of that gradient);
  - the losses of ten torch.optim.AdamW steps to 1e-4 relative.
When weft ran its products in bfloat16 (the metadata's matmul_dtype), PyTorch runs the model
under torch.autocast("cpu", torch.bfloat16) and the tolerances are bf16's (BF16_TOLERANCES):
autocast also rounds the products' outputs to bf16, where weft keeps them float32.
Exits 77 (ctest: skipped) when torch or numpy is missing: apt-get install python3-torch.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
try:
    import torch
    import torch.nn.functional as F
    from torch_llama import Llama, load
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"torch_parity: skipped, {e}: apt-get install python3-torch python3-numpy")
    sys.exit(77)

FLOAT32_TOLERANCES = {"loss": 1e-5, "logits": 1e-4, "grad": 1e-4, "step": 1e-4}
BF16_TOLERANCES = {"loss": 5e-4, "logits": 1.5e-2, "grad": 3e-2, "step": 5e-4}


def relative_error(a, b):
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-30))


def main(directory):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    init, meta = load(f"{directory}/init.safetensors")
    step0, _ = load(f"{directory}/step0.safetensors")
    train, _ = load(f"{directory}/train.safetensors")
    c = json.loads(meta["config"])
    bf16 = c.get("matmul_dtype", "float32") == "bfloat16"
    tolerance = BF16_TOLERANCES if bf16 else FLOAT32_TOLERANCES
    autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)  # noqa: E731
    model = Llama(c)
    params = dict(model.named_parameters())
    assert set(params) == set(init), f"parameter names differ: {set(params) ^ set(init)}"
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(init[name])

    tokens = step0["__tokens"].long()
    targets = step0["__targets"].long()
    with autocast():
        logits = model(tokens).float()
        loss = F.cross_entropy(logits.reshape(-1, c["vocab_size"]), targets.reshape(-1))
    loss.backward()
    failures = []

    def check(what, error, tolerance):
        status = "ok" if error <= tolerance else "FAILED"
        print(f"{what:45s} relative error {error:.2e} (tolerance {tolerance:.0e}) {status}")
        if error > tolerance:
            failures.append(what)

    check("loss", abs(float(loss) - float(step0["__loss"][0])) / float(loss), tolerance["loss"])
    check("logits", relative_error(step0["__logits"], logits.detach().reshape(-1, c["vocab_size"])),
          tolerance["logits"])
    for name, p in params.items():
        check(f"grad {name}", relative_error(step0[name], p.grad), tolerance["grad"])

    with torch.no_grad():
        for name, p in params.items():
            p.copy_(init[name])
    optimizer = torch.optim.AdamW(model.parameters(), lr=c["lr"], betas=(c["beta1"], c["beta2"]),
                                  eps=c["eps"], weight_decay=c["weight_decay"])
    for step, weft_loss in enumerate(train["losses"].tolist()):
        optimizer.zero_grad()
        with autocast():
            step_loss = F.cross_entropy(model(tokens).float().reshape(-1, c["vocab_size"]),
                                        targets.reshape(-1))
        step_loss.backward()
        optimizer.step()
        check(f"AdamW step {step} loss", abs(weft_loss - float(step_loss)) / float(step_loss),
              tolerance["step"])
    if failures:
        print(f"torch_parity: {len(failures)} checks failed: {', '.join(failures)}")
        return 1
    print("torch_parity: weft matches PyTorch")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: torch_parity.py DIR  (written by llama_parity_dump)")
    sys.exit(main(sys.argv[1]))
