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


# --- decoders: N layers, per-layer weights stacked on a leading layer axis -----------------------

def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) over the last axis (the rotary embedding's pairing of halves)."""
    from compiler.tensor import cat
    h = x.shape[-1] // 2
    return cat([-x[..., h:], x[..., :h]], -1)


def rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary position embedding: x * cos + rotate_half(x) * sin; cos/sin of shape (seq, head_dim)."""
    return x * cos + rotate_half(x) * sin


def _check_decoder(x: Tensor, heads: int, kv_heads: int, op: str) -> tuple[int, int, int, int]:
    if x.ndim != 3:
        raise ShapeError(f"x must be (batch, seq, dim), got shape {x.shape}", op)
    b, s, d = x.shape
    if heads < 1 or d % heads:
        raise ShapeError(f"model width {d} is not divisible by heads={heads}", op)
    if kv_heads < 1 or heads % kv_heads:
        raise ShapeError(f"heads={heads} is not a multiple of kv_heads={kv_heads}", op)
    if (d // heads) % 2:
        raise ShapeError(f"head dim {d // heads} must be even for the rotary embedding", op)
    return b, s, d, d // heads


def attention_with_scores(query, key, value, attn_mask=None, is_causal=False, scale=None):
    """(softmax(q k^T * scale + mask) v, the masked scores) over the last two axes, as PyTorch's
    scaled_dot_product_attention: grouped heads (GQA) when key and value have fewer heads than
    the query (query head h reads key head h // group); a bool mask keeps where True, a float
    mask is added; `is_causal` keeps j <= i."""
    from compiler.creation import lower_triangle
    from compiler.errors import UnsupportedError
    from ir.dtypes import DType
    *batch, heads, rows, d = query.shape
    kv_heads = key.shape[-3] if key.ndim >= 3 else heads
    cols = key.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    q, k, v = query, key, value
    group = heads // kv_heads if kv_heads and heads % kv_heads == 0 else None
    if kv_heads != heads:
        if group is None:
            raise UnsupportedError(f"{heads} query heads over {kv_heads} key heads: not a whole group each", "attention")
        q = q.reshape(*batch, kv_heads, group, rows, d)
        k = k.unsqueeze(-3)
        v = v.unsqueeze(-3)
    # with grouped heads the scores stay (.., kv_heads, group, rows, cols) through the softmax
    # and the masks are viewed that way (softmax and the product in one shape: one flash term)
    scores = (q._float() @ k._float().transpose(-1, -2)) * scale
    if is_causal:
        scores = lower_triangle(rows, cols).where(scores, -math.inf)
    if attn_mask is not None:
        m = attn_mask
        if kv_heads != heads:
            m = m.expand(*batch, heads, rows, cols).reshape(*batch, kv_heads, group, rows, cols)
        scores = m.where(scores, -math.inf) if m.dtype == DType.bool else scores + m
    probs = scores.softmax(-1)
    out = (probs.astype(value.dtype) @ v) if value.dtype != DType.f32 else probs @ v
    out = out.reshape(*batch, heads, rows, value.shape[-1])
    if kv_heads != heads:
        scores = scores.reshape(*batch, heads, rows, cols)
    return out.astype(query.dtype), scores


def grouped_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, kv_heads: int) -> Tensor:
    """Attention of (b, heads, s, hd) queries over (b, kv_heads, s, hd) keys and values, each group
    of heads // kv_heads query heads sharing one key/value head (GQA), through broadcasting (the
    keys are never copied per head). `mask` is added to the scores (0 or -inf, shape (s, s))."""
    b, heads, s, hd = q.shape
    rep = heads // kv_heads
    qg = q.reshape(b, kv_heads, rep, s, hd)
    kg, vg = k.reshape(b, kv_heads, 1, s, hd), v.reshape(b, kv_heads, 1, s, hd)
    scores = (qg @ kg.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
    if mask is not None:
        scores = scores + mask
    return (scores.softmax(-1) @ vg).reshape(b, heads, s, hd)


def llama_decoder(x, mask, cos, sin, attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down,
                  heads: int, kv_heads: int, eps: float = 1e-5):
    """A Llama-style decoder: per layer x += attn(rms_norm(x)) with GQA, RoPE and an additive mask,
    then x += w_down(silu(w_gate h) * w_up h) on h = rms_norm(x). Weights stored (in, out), one
    slice per layer on axis 0: wq (L, d, heads*hd), wk/wv (L, d, kv_heads*hd), w_gate (L, d, ffn)."""
    b, s, d, hd = _check_decoder(x, heads, kv_heads, "llama_decoder")
    for layer in range(attn_norm.shape[0]):
        h = x.rms_norm((d,), attn_norm[layer], eps)

        def heads_of(t, n):  # (b, s, n*hd) -> (b, n, s, hd)
            return t.reshape(b, s, n, hd).permute(0, 2, 1, 3)

        q = rope(heads_of(h @ wq[layer], heads), cos, sin)
        k = rope(heads_of(h @ wk[layer], kv_heads), cos, sin)
        v = heads_of(h @ wv[layer], kv_heads)
        a = grouped_attention(q, k, v, mask, kv_heads).permute(0, 2, 1, 3).reshape(b, s, d)
        x = x + a @ wo[layer]
        h = x.rms_norm((d,), mlp_norm[layer], eps)
        x = x + ((h @ w_gate[layer]).silu() * (h @ w_up[layer])) @ w_down[layer]
    return x


def llama_decoder_specs(layers: int, batch: int, seq: int, dim: int, heads: int, kv_heads: int, ffn: int,
                        dtype="f16"):
    """Input specs for `llama_decoder` (everything but heads/kv_heads/eps)."""
    from compiler.trace import spec
    hd = dim // heads
    return [spec((batch, seq, dim), dtype, "x"), spec((seq, seq), dtype, "mask"),
            spec((seq, hd), dtype, "cos"), spec((seq, hd), dtype, "sin"),
            spec((layers, dim), dtype, "attn_norm"), spec((layers, dim, heads * hd), dtype, "wq"),
            spec((layers, dim, kv_heads * hd), dtype, "wk"), spec((layers, dim, kv_heads * hd), dtype, "wv"),
            spec((layers, heads * hd, dim), dtype, "wo"), spec((layers, dim), dtype, "mlp_norm"),
            spec((layers, dim, ffn), dtype, "w_gate"), spec((layers, dim, ffn), dtype, "w_up"),
            spec((layers, ffn, dim), dtype, "w_down")]


def gpt2_decoder(x, mask, ln1_w, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_w, ln2_b, w_fc, b_fc, w_proj, b_proj,
                 heads: int, eps: float = 1e-5):
    """A GPT-2-style decoder: per layer x += attn(layer_norm(x)) (fused qkv projection with bias,
    multi-head, additive mask) + output bias, then x += gelu_tanh(ln(x) @ w_fc + b_fc) @ w_proj + b_proj.
    Weights stored (in, out), one slice per layer on axis 0: w_qkv (L, d, 3d), w_fc (L, d, ffn)."""
    b, s, d, hd = _check_decoder(x, heads, heads, "gpt2_decoder")
    for layer in range(ln1_w.shape[0]):
        h = x.layer_norm((d,), ln1_w[layer], ln1_b[layer], eps)
        qkv = (h @ w_qkv[layer] + b_qkv[layer]).reshape(b, s, 3, heads, hd).permute(2, 0, 3, 1, 4)
        a = grouped_attention(qkv[0], qkv[1], qkv[2], mask, heads).permute(0, 2, 1, 3).reshape(b, s, d)
        x = x + a @ w_o[layer] + b_o[layer]
        h = x.layer_norm((d,), ln2_w[layer], ln2_b[layer], eps)
        x = x + (h @ w_fc[layer] + b_fc[layer]).gelu("tanh") @ w_proj[layer] + b_proj[layer]
    return x


def gpt2_decoder_specs(layers: int, batch: int, seq: int, dim: int, ffn: int, dtype="f16"):
    """Input specs for `gpt2_decoder` (everything but heads/eps)."""
    from compiler.trace import spec
    return [spec((batch, seq, dim), dtype, "x"), spec((seq, seq), dtype, "mask"),
            spec((layers, dim), dtype, "ln1_w"), spec((layers, dim), dtype, "ln1_b"),
            spec((layers, dim, 3 * dim), dtype, "w_qkv"), spec((layers, 3 * dim), dtype, "b_qkv"),
            spec((layers, dim, dim), dtype, "w_o"), spec((layers, dim), dtype, "b_o"),
            spec((layers, dim), dtype, "ln2_w"), spec((layers, dim), dtype, "ln2_b"),
            spec((layers, dim, ffn), dtype, "w_fc"), spec((layers, ffn), dtype, "b_fc"),
            spec((layers, ffn, dim), dtype, "w_proj"), spec((layers, dim), dtype, "b_proj")]
