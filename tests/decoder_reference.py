"""Independent float64 numpy references for compiler.nn's decoders, and their test inputs."""
from __future__ import annotations

import math

import numpy as np


def causal_mask(s: int) -> np.ndarray:
    return np.triu(np.full((s, s), -np.inf), 1)


def rope_tables(s: int, hd: int, base: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    inv = base ** (-np.arange(0, hd, 2) / hd)
    ang = np.outer(np.arange(s), inv)
    ang = np.concatenate([ang, ang], -1)
    return np.cos(ang), np.sin(ang)


def _rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _ln(x, w, b, eps):
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps) * w + b


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _attention(q, k, v, mask):  # q (b, h, s, hd); k, v (b, kvh, s, hd)
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, 1), np.repeat(v, rep, 1)
    return _softmax(q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1]) + mask) @ v


def _rot(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


def llama(x, mask, cos, sin, attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down, heads, kv_heads, eps=1e-5):
    b, s, d = x.shape
    hd = d // heads
    for l in range(attn_norm.shape[0]):
        h = _rms(x, attn_norm[l], eps)
        q = (h @ wq[l]).reshape(b, s, heads, hd).transpose(0, 2, 1, 3)
        k = (h @ wk[l]).reshape(b, s, kv_heads, hd).transpose(0, 2, 1, 3)
        v = (h @ wv[l]).reshape(b, s, kv_heads, hd).transpose(0, 2, 1, 3)
        q, k = q * cos + _rot(q) * sin, k * cos + _rot(k) * sin
        a = _attention(q, k, v, mask).transpose(0, 2, 1, 3).reshape(b, s, d)
        x = x + a @ wo[l]
        h = _rms(x, mlp_norm[l], eps)
        g = h @ w_gate[l]
        x = x + (g / (1 + np.exp(-g)) * (h @ w_up[l])) @ w_down[l]
    return x


def gpt2(x, mask, ln1_w, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_w, ln2_b, w_fc, b_fc, w_proj, b_proj, heads, eps=1e-5):
    b, s, d = x.shape
    hd = d // heads
    for l in range(ln1_w.shape[0]):
        qkv = (_ln(x, ln1_w[l], ln1_b[l], eps) @ w_qkv[l] + b_qkv[l]).reshape(b, s, 3, heads, hd).transpose(2, 0, 3, 1, 4)
        a = _attention(qkv[0], qkv[1], qkv[2], mask).transpose(0, 2, 1, 3).reshape(b, s, d)
        x = x + a @ w_o[l] + b_o[l]
        f = _ln(x, ln2_w[l], ln2_b[l], eps) @ w_fc[l] + b_fc[l]
        f = 0.5 * f * (1 + np.tanh(math.sqrt(2 / math.pi) * (f + 0.044715 * f ** 3)))
        x = x + f @ w_proj[l] + b_proj[l]
    return x


def decoder_inputs(specs, rng: np.random.Generator) -> list[np.ndarray]:
    """Inputs at the scale of a trained model: unit activations, weights ~ 1/sqrt(fan-in), norm
    weights near 1, a causal mask and real RoPE tables (by input name)."""
    out = []
    seq = specs[0].shape[1]
    for sp in specs:
        if sp.name == "mask":
            a = causal_mask(seq)
        elif sp.name in ("cos", "sin"):
            a = rope_tables(seq, sp.shape[1])[sp.name == "sin"]
        elif sp.name.endswith("norm") or sp.name.endswith("_w"):
            a = 1 + 0.1 * rng.standard_normal(sp.shape)
        elif len(sp.shape) == 3 and sp.name != "x":
            a = rng.standard_normal(sp.shape) / math.sqrt(sp.shape[1])
        else:
            a = rng.standard_normal(sp.shape) * (1.0 if sp.name == "x" else 0.1)
        out.append(a.astype(sp.dtype.np))
    return out
