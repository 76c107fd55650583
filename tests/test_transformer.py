"""compiler.nn.transformer_block run by the reference target, against an independent PyTorch
implementation (torch.nn.functional) and, without torch, an independent numpy one."""
from __future__ import annotations

import math

import numpy as np
import pytest

import compiler
from compiler.nn import transformer_block, transformer_block_specs
from tolerances import assert_close

# (batch, seq, dim, hidden, heads): odd sizes and a single head/batch included
CONFIGS = [(2, 7, 16, 32, 2), (1, 5, 12, 24, 3), (1, 1, 8, 8, 1)]


def make_inputs(batch, seq, dim, hidden, dtype="f32", seed=0):
    specs = transformer_block_specs(batch, seq, dim, hidden, dtype)
    rng = np.random.default_rng(seed)
    arrays = []
    for s in specs:
        scale = 1.0 if s.name in ("x",) else 1.0 / math.sqrt(s.shape[0]) if len(s.shape) == 2 else 0.5
        a = rng.standard_normal(s.shape) * scale
        if s.name in ("ln1_w", "ln2_w"):
            a = 1.0 + 0.1 * a
        arrays.append(a.astype(s.dtype.np))
    return specs, arrays


def compiled_block(specs, heads):
    def block(*xs):
        return transformer_block(*xs, heads=heads)
    return compiler.compile(block, *specs, target="reference")


def numpy_block(x, ln1_w, ln1_b, wq, wk, wv, wo, ln2_w, ln2_b, w1, b1, w2, b2, heads):
    from math import erf
    x = x.astype(np.float64)

    def ln(t, w, b):
        mu = t.mean(-1, keepdims=True)
        return (t - mu) / np.sqrt(((t - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b

    b_, s, d = x.shape
    hd = d // heads
    h = ln(x, ln1_w, ln1_b)
    q, k, v = (np.swapaxes((h @ w).reshape(b_, s, heads, hd), 1, 2) for w in (wq, wk, wv))
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(hd)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    attn = np.swapaxes(p @ v, 1, 2).reshape(b_, s, d)
    x = x + attn @ wo
    u = ln(x, ln2_w, ln2_b) @ w1 + b1
    gelu = 0.5 * u * (1 + np.vectorize(erf)(u / math.sqrt(2)))
    return x + gelu @ w2 + b2


def torch_block(x, ln1_w, ln1_b, wq, wk, wv, wo, ln2_w, ln2_b, w1, b1, w2, b2, heads):
    import torch.nn.functional as F
    b_, s, d = x.shape
    h = F.layer_norm(x, (d,), ln1_w, ln1_b, eps=1e-5)

    def split(t):
        return t.view(b_, s, heads, d // heads).transpose(1, 2)

    attn = F.scaled_dot_product_attention(split(h @ wq), split(h @ wk), split(h @ wv))
    x = x + attn.transpose(1, 2).reshape(b_, s, d) @ wo
    return x + F.linear(F.gelu(F.layer_norm(x, (d,), ln2_w, ln2_b, eps=1e-5) @ w1 + b1), w2.T, b2)


@pytest.mark.parametrize("config", CONFIGS, ids=[str(c) for c in CONFIGS])
def test_transformer_block_matches_numpy(config):
    *sizes, heads = config
    specs, arrays = make_inputs(*sizes)
    out = compiled_block(specs, heads)(*arrays)
    assert out.shape == arrays[0].shape and out.dtype == np.float32
    assert_close(out, numpy_block(*(a.astype(np.float64) for a in arrays), heads), "f32", scale=4)


@pytest.mark.parametrize("config", CONFIGS, ids=[str(c) for c in CONFIGS])
def test_transformer_block_matches_torch(config):
    torch = pytest.importorskip("torch")
    *sizes, heads = config
    specs, arrays = make_inputs(*sizes)
    out = compiled_block(specs, heads)(*arrays)
    expected = torch_block(*(torch.from_numpy(a) for a in arrays), heads).numpy()
    assert_close(out, expected, "f32", scale=4)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_transformer_block_in_half_precision_matches_torch(dtype):
    torch = pytest.importorskip("torch")
    specs, arrays = make_inputs(2, 7, 16, 32, dtype)
    out = compiled_block(specs, 2)(*arrays)
    assert out.dtype == specs[0].dtype.np
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    expected = torch_block(*(torch.from_numpy(a.astype(np.float32)).to(tdt) for a in arrays), 2)
    # PyTorch rounds every intermediate matmul/add to the half type as Saturn does; allow a few ulps
    assert_close(out.astype(np.float32), expected.float().numpy(), dtype, scale=4)


def test_transformer_block_rejects_bad_heads():
    specs, _ = make_inputs(1, 3, 10, 8)
    with pytest.raises(compiler.ShapeError, match="divisible by heads=3"):
        compiled_block(specs, 3)
