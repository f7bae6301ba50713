#!/usr/bin/env python3
"""weft-ckpt consolidate's Hugging Face folder, run as transformers' LlamaForCausalLM computes
(HF's names, rotate_half RoPE on the permuted q/k rows, config.json's sizes), gives the logits
that weft's own layout gives under weft's Llama (adjacent-pair RoPE): the permutation and the
names are HF's. The model is written out here after transformers' modeling_llama.py, since
transformers is not installed.

Usage: hf_layout_parity.py WEFT_TRAIN WEFT_CKPT SOURCE_DIR
Trains a small GQA model for 2 steps, consolidates it both ways, compares in float32."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
try:
    import torch
    import torch.nn.functional as F
    from torch_llama import Llama, load
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"hf_layout_parity: skipped, {e}: apt-get install python3-torch python3-numpy")
    sys.exit(77)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def hf_forward(c, w, tokens):
    """LlamaForCausalLM's forward, as transformers writes it, from HF's tensor names."""
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c["hidden_size"] // nh
    b, t = tokens.shape
    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = torch.outer(torch.arange(t, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().float()[None, None], emb.sin().float()[None, None]
    x = F.embedding(tokens, w["model.embed_tokens.weight"])
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], c["rms_norm_eps"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(b, t, nh, hd).transpose(1, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(b, t, nkv, hd).transpose(1, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(b, t, nkv, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
        scores = q @ k.transpose(-2, -1) / hd**0.5 + torch.full((t, t), float("-inf")).triu(1)
        out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, nh * hd)
        x = x + out @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], c["rms_norm_eps"])
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (F.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], c["rms_norm_eps"])
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T


def main(train, ckpt, source):
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        run = [train, "--config", f"{source}/configs/debug.toml", "--model.dim", "64",
               "--model.n_layers", "2", "--model.n_heads", "4", "--model.n_kv_heads", "2",
               "--model.max_seq_len", "32", "--training.seq_len", "32", "--training.steps", "2",
               "--training.dataset_path", f"{source}/data/tinyshakespeare.txt",
               "--checkpoint.enable", "true", "--checkpoint.folder", f"{d}/ckpt",
               "--validation.enable", "false", "--metrics.peak_gflops", "100"]
        subprocess.run(run, check=True, capture_output=True)
        subprocess.run([ckpt, "consolidate", f"{d}/ckpt", f"{d}/hf"], check=True, capture_output=True)
        subprocess.run([ckpt, "consolidate", "--names", "weft", f"{d}/ckpt", f"{d}/weft"], check=True,
                       capture_output=True)
        hf, _ = load(f"{d}/hf/model.safetensors")
        own, _ = load(f"{d}/weft/model.safetensors")
        with open(f"{d}/hf/config.json") as f:
            c = json.load(f)
    assert c["architectures"] == ["LlamaForCausalLM"] and c["num_key_value_heads"] == 2, c
    model = Llama({"dim": c["hidden_size"], "n_layers": c["num_hidden_layers"],
                   "n_heads": c["num_attention_heads"], "n_kv_heads": c["num_key_value_heads"],
                   "vocab_size": c["vocab_size"], "hidden_dim": c["intermediate_size"],
                   "rope_theta": c["rope_theta"], "norm_eps": c["rms_norm_eps"]})
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(own[name])
        tokens = torch.randint(0, c["vocab_size"], (3, 32))
        want = model(tokens)
        got = hf_forward(c, hf, tokens)
    error = float((got - want).abs().max() / want.abs().max())
    print(f"hf_layout_parity: logits relative error {error:.2e}")
    # Unpermuted q and k rows give 2e-4 here (two steps from the init): the bound is far below.
    assert error < 1e-5, error


if __name__ == "__main__":
    main(*sys.argv[1:4])
