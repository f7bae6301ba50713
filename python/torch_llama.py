"""The Llama that weft trains, written in PyTorch (TorchTitan's formulation, weft's parameter
names), and a minimal safetensors reader. Used by tests/nn/torch_parity.py (correctness) and
bench/train/torch_train.py (speed)."""
import json
import math
import struct

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def load(path):
    """A minimal safetensors reader (the format is 8 bytes + JSON + raw data)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[base + begin : base + end], dtype=DTYPES[info["dtype"]])
        tensors[name] = torch.from_numpy(array.copy()).reshape(info["shape"])
    return tensors, meta


class Llama(torch.nn.Module):
    """Llama as TorchTitan writes it, with weft's parameter names."""

    def __init__(self, c):
        """c: dim, n_layers, n_heads, n_kv_heads, vocab_size, hidden_dim, rope_theta, norm_eps."""
        super().__init__()
        self.c = c
        dim, hd = c["dim"], c["dim"] // c["n_heads"]
        self.tok_embeddings = torch.nn.Embedding(c["vocab_size"], dim)
        self.layers = torch.nn.ModuleList()
        for _ in range(c["n_layers"]):
            layer = torch.nn.Module()
            layer.attention = torch.nn.Module()
            layer.attention.wq = torch.nn.Linear(dim, c["n_heads"] * hd, bias=False)
            layer.attention.wk = torch.nn.Linear(dim, c["n_kv_heads"] * hd, bias=False)
            layer.attention.wv = torch.nn.Linear(dim, c["n_kv_heads"] * hd, bias=False)
            layer.attention.wo = torch.nn.Linear(c["n_heads"] * hd, dim, bias=False)
            layer.feed_forward = torch.nn.Module()
            layer.feed_forward.w1 = torch.nn.Linear(dim, c["hidden_dim"], bias=False)
            layer.feed_forward.w2 = torch.nn.Linear(c["hidden_dim"], dim, bias=False)
            layer.feed_forward.w3 = torch.nn.Linear(dim, c["hidden_dim"], bias=False)
            layer.attention_norm = torch.nn.Module()
            layer.attention_norm.weight = torch.nn.Parameter(torch.ones(dim))
            layer.ffn_norm = torch.nn.Module()
            layer.ffn_norm.weight = torch.nn.Parameter(torch.ones(dim))
            self.layers.append(layer)
        self.norm = torch.nn.Module()
        self.norm.weight = torch.nn.Parameter(torch.ones(dim))
        self.output = torch.nn.Linear(dim, c["vocab_size"], bias=False)

    def rms_norm(self, x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c["norm_eps"]) * weight

    def rope(self, x, seq):
        hd = x.shape[-1]
        # The angles in float64, then cast (as weft computes its cos/sin table).
        freqs = self.c["rope_theta"] ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        angles = torch.outer(torch.arange(seq, dtype=torch.float64), freqs)
        cos, sin = angles.cos().float(), angles.sin().float()
        pairs = x.reshape(*x.shape[:-1], hd // 2, 2)
        x0, x1 = pairs[..., 0], pairs[..., 1]
        cos, sin = cos[None, :, None, :], sin[None, :, None, :]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(3)

    def attention(self, layer, x):
        b, t, _ = x.shape
        nh, nkv = self.c["n_heads"], self.c["n_kv_heads"]
        hd = self.c["dim"] // nh
        q = layer.attention.wq(x).view(b, t, nh, hd)
        k = layer.attention.wk(x).view(b, t, nkv, hd)
        v = layer.attention.wv(x).view(b, t, nkv, hd)
        q, k = self.rope(q, t), self.rope(k, t)
        k = k.repeat_interleave(nh // nkv, dim=2)
        v = v.repeat_interleave(nh // nkv, dim=2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(hd)
        mask = torch.full((t, t), float("-inf")).triu(1)
        out = torch.softmax(scores + mask, dim=-1) @ v
        return layer.attention.wo(out.transpose(1, 2).reshape(b, t, nh * hd))

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = x + self.attention(layer, self.rms_norm(x, layer.attention_norm.weight))
            h = self.rms_norm(x, layer.ffn_norm.weight)
            ff = layer.feed_forward
            x = x + ff.w2(F.silu(ff.w1(h)) * ff.w3(h))
        return self.output(self.rms_norm(x, self.norm.weight))
