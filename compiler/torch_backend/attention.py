"""Scaled dot-product attention and the triangular masks it needs, in Saturn's frontend."""
from __future__ import annotations

import math

from compiler.creation import lower_triangle
from compiler.errors import UnsupportedError
from compiler.nn import attention_with_scores
from compiler.tensor import Tensor
from compiler.torch_backend.aten import _cast, logsumexp
from compiler.torch_backend.registry import Unsupported, op
from ir.dtypes import DType


@op("tril.default")
def tril(self, diagonal=0):
    return lower_triangle(*self.shape[-2:], diagonal).where(self, Tensor.full((), 0, self.dtype))


@op("triu.default")
def triu(self, diagonal=0):
    return lower_triangle(*self.shape[-2:], diagonal - 1).where(Tensor.full((), 0, self.dtype), self)


@op("_safe_softmax.default")
def safe_softmax(self, dim, dtype=None):
    """softmax, with 0 (not NaN) for rows that are entirely -inf (masked out)."""
    x = _cast(self, dtype)
    empty = (x == -math.inf).min(dim, keepdim=True)
    return empty.where(0.0, x.softmax(dim)).astype(x.dtype if x.dtype.is_float else DType.f32)


def attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    """compiler.nn.attention_with_scores; what it cannot take falls back to PyTorch (Unsupported)."""
    try:
        return attention_with_scores(query, key, value, attn_mask, is_causal, scale)
    except UnsupportedError as e:
        raise Unsupported(str(e)) from None


@op("scaled_dot_product_attention.default")
def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p:
        raise Unsupported(f"attention dropout_p={dropout_p}")
    return attention(query, key, value, attn_mask, is_causal, scale)[0]


@op("_scaled_dot_product_flash_attention_for_cpu.default")
def sdpa_flash_cpu(query, key, value, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None):
    if dropout_p:
        raise Unsupported(f"attention dropout_p={dropout_p}")
    out, scores = attention(query, key, value, attn_mask, is_causal, scale)
    return out, logsumexp(scores, [-1])


@op("_scaled_dot_product_flash_attention.default")
def sdpa_flash_cuda(query, key, value, dropout_p=0.0, is_causal=False, return_debug_mask=False, scale=None):
    """CUDA's flash kernel (what SDPA dispatches to for halves without a mask): the output and
    its log-sum-exp; the sequence bookkeeping, RNG state and debug mask are not computed."""
    if dropout_p:
        raise Unsupported(f"attention dropout_p={dropout_p}")
    out, scores = attention(query, key, value, None, is_causal, scale)
    return (out, logsumexp(scores, [-1])) + (None,) * 7


@op("_scaled_dot_product_efficient_attention.default")
def sdpa_efficient_cuda(query, key, value, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False,
                        scale=None):
    """CUDA's memory-efficient kernel (SDPA with a mask): the output only (its log-sum-exp is
    padded to a multiple of 32 rows; RNG state is not computed)."""
    if dropout_p:
        raise Unsupported(f"attention dropout_p={dropout_p}")
    return attention(query, key, value, attn_bias, is_causal, scale)[0], None, None, None
