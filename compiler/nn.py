"""Model building blocks written with the frontend (used by the demo, tests and benchmarks)."""
from __future__ import annotations

import math

from compiler.errors import ShapeError
from compiler.tensor import Tensor


def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Naive scaled dot-product attention: softmax(q @ k^T * scale) @ v over the last two axes."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    return ((q @ k.transpose(-1, -2)) * scale).softmax(-1) @ v


def mlp(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
    """gelu(x @ w1 + b1) @ w2 + b2 (weights stored (in, out))."""
    return (x @ w1 + b1).gelu() @ w2 + b2


def transformer_block(x, ln1_w, ln1_b, wq, wk, wv, wo, ln2_w, ln2_b, w1, b1, w2, b2, heads: int):
    """Pre-norm block: x + attn(ln1(x)); then + mlp(ln2(.)). x: (batch, seq, dim)."""
    if x.ndim != 3:
        raise ShapeError(f"x must be (batch, seq, dim), got shape {x.shape}", "transformer_block")
    b, s, d = x.shape
    if heads < 1 or d % heads:
        raise ShapeError(f"model width {d} is not divisible by heads={heads}", "transformer_block")
    hd = d // heads
    h = x.layer_norm((d,), ln1_w, ln1_b)

    def split(t):  # (b, s, d) -> (b, heads, s, hd)
        return t.reshape(b, s, heads, hd).permute(0, 2, 1, 3)

    q, k, v = split(h @ wq), split(h @ wk), split(h @ wv)
    a = attention(q, k, v).permute(0, 2, 1, 3).reshape(b, s, d)
    x = x + a @ wo
    return x + mlp(x.layer_norm((d,), ln2_w, ln2_b), w1, b1, w2, b2)


def transformer_block_specs(batch: int, seq: int, dim: int, hidden: int, dtype="f32"):
    """Input specs for `transformer_block` (everything but `heads`)."""
    from compiler.trace import spec
    return [spec((batch, seq, dim), dtype, "x"), spec((dim,), dtype, "ln1_w"), spec((dim,), dtype, "ln1_b"),
            spec((dim, dim), dtype, "wq"), spec((dim, dim), dtype, "wk"), spec((dim, dim), dtype, "wv"),
            spec((dim, dim), dtype, "wo"), spec((dim,), dtype, "ln2_w"), spec((dim,), dtype, "ln2_b"),
            spec((dim, hidden), dtype, "w1"), spec((hidden,), dtype, "b1"), spec((hidden, dim), dtype, "w2"),
            spec((dim,), dtype, "b2")]
