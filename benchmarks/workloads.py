"""The benchmark workloads, each defined once with the Saturn frontend and once in PyTorch.

A `Workload` has a name, a builder that turns size parameters into a `Case` (input specs,
the Saturn function, the PyTorch function, bytes moved and FLOPs), and the sizes to run per
target family ("cpu" or "cuda") and per suite ("full", "odd", "quick", "tiny"). "odd" sizes
are not multiples of any tile (e.g. 1000x4097) and run with the full suite.

PyTorch functions receive torch tensors and are only called when torch is installed; this
module imports neither torch nor any backend, so it loads on a bare install.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from compiler import conv, nn
from ir.dtypes import as_dtype


@dataclass(frozen=True)
class Input:
    """One input array: shape, dtype, name, and the scale of its random values (normal * scale + shift).
    `fill` other than "normal" gives structured values instead: "causal_mask" (0 on and below the
    diagonal, -inf above), "rope_cos" / "rope_sin" (rotary tables, positions x head dim)."""
    shape: tuple[int, ...]
    dtype: str
    name: str
    scale: float = 1.0
    shift: float = 0.0
    fill: str = "normal"

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * as_dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Case:
    """One workload at one size: everything the runner needs to check and time it."""
    workload: str
    variant: str                 # "full", "odd", "quick" or "tiny"
    label: str                   # e.g. "softmax f32 2048x2048"
    inputs: tuple[Input, ...]
    saturn_fn: Callable          # lazy Tensors -> Tensor
    torch_fn: Callable           # torch tensors -> torch tensor
    out_shape: tuple[int, ...]
    out_dtype: str
    flops: int | None            # useful floating-point operations (None for memory-bound work)
    extra_peers: dict = field(default_factory=dict)  # other PyTorch formulations, e.g. {"sdpa": fn}
    many_kernels: bool = False   # a model whose PyTorch program launches many kernels: on CUDA,
                                 # torch.compile with CUDA graphs is timed too ("compile-graphs")

    @property
    def bytes(self) -> int:
        """The fewest bytes any implementation must move: each input read once, the output written once."""
        return sum(i.nbytes for i in self.inputs) + math.prod(self.out_shape) * as_dtype(self.out_dtype).itemsize

    @property
    def dtype(self) -> str:
        return self.inputs[0].dtype


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    build: Callable[..., Case]                  # build(variant, **params) -> Case
    sizes: dict[str, dict[str, dict | None]]    # sizes[family][suite] -> params (None: not run)

    def cases(self, family: str, suite: str) -> list[Case]:
        """The cases of one size entry: its params, or a list of params (several shapes)."""
        params = self.sizes.get(family, {}).get(suite)
        if params is None:
            return []
        return [self.build(suite, **p) for p in (params if isinstance(params, list) else [params])]

    def case(self, family: str, suite: str) -> Case | None:
        """The first case of one size entry (None if the workload has none there)."""
        cases = self.cases(family, suite)
        return cases[0] if cases else None


def structured_values(inp: Input):
    """The float64 values of an Input whose fill is not "normal" (numpy array)."""
    import numpy as np
    if inp.fill == "causal_mask":
        s = inp.shape[-1]
        return np.triu(np.full((s, s), -np.inf), 1)
    if inp.fill in ("rope_cos", "rope_sin"):
        s, hd = inp.shape
        ang = np.outer(np.arange(s), 10000.0 ** (-np.arange(0, hd, 2) / hd))
        ang = np.concatenate([ang, ang], -1)
        return np.cos(ang) if inp.fill == "rope_cos" else np.sin(ang)
    raise ValueError(f"unknown input fill {inp.fill!r}")


def _dims(shape) -> str:
    """'2048x2048'; a 1-D power-of-two size in M reads better: '4M'."""
    if len(shape) == 1 and shape[0] >= 1 << 20 and shape[0] % (1 << 20) == 0:
        return f"{shape[0] >> 20}M"
    return "x".join(map(str, shape))


def _torch():
    import torch
    return torch


def _F():
    import torch.nn.functional as F
    return F


# --- elementwise chain: gelu(1.7 x + 0.3) -----------------------------------------------------
def elementwise(variant: str, shape, dtype="f32") -> Case:
    shape = tuple(shape)
    return Case("elementwise", variant, f"gelu(1.7x+0.3) {dtype} {_dims(shape)}",
                (Input(shape, dtype, "x"),),
                lambda x: (x * 1.7 + 0.3).gelu(),
                lambda x: _F().gelu(x * 1.7 + 0.3),
                shape, dtype, None)


# --- softmax over the last axis -----------------------------------------------------------------
def softmax(variant: str, rows: int, cols: int, dtype="f32") -> Case:
    return Case("softmax", variant, f"softmax {dtype} {rows}x{cols}",
                (Input((rows, cols), dtype, "x", 2.0),),
                lambda x: x.softmax(-1),
                lambda x: _torch().softmax(x, -1),
                (rows, cols), dtype, None)


# --- layernorm with weight and bias -------------------------------------------------------------
def layernorm(variant: str, rows: int, cols: int, dtype="f32") -> Case:
    return Case("layernorm", variant, f"layernorm {dtype} {rows}x{cols}",
                (Input((rows, cols), dtype, "x", 1.0, 0.5), Input((cols,), dtype, "w", 0.1, 1.0),
                 Input((cols,), dtype, "b", 0.1)),
                lambda x, w, b: x.layer_norm((cols,), w, b, eps=1e-5),
                lambda x, w, b: _F().layer_norm(x, (cols,), w, b, 1e-5),
                (rows, cols), dtype, None)


# --- rmsnorm with weight ------------------------------------------------------------------------
def _torch_rmsnorm(x, w, eps=1e-6):
    F = _F()
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    return x * _torch().rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rmsnorm(variant: str, rows: int, cols: int, dtype="f16") -> Case:
    return Case("rmsnorm", variant, f"rmsnorm {dtype} {rows}x{cols}",
                (Input((rows, cols), dtype, "x"), Input((cols,), dtype, "w", 0.1, 1.0)),
                lambda x, w: x.rms_norm((cols,), w, eps=1e-6),
                lambda x, w: _torch_rmsnorm(x, w, 1e-6),
                (rows, cols), dtype, None)


# --- matmul -------------------------------------------------------------------------------------
def matmul(variant: str, m: int, k: int, n: int, dtype="f32") -> Case:
    return Case(f"matmul_{dtype}", variant, f"matmul {dtype} {m}x{k}x{n}",
                (Input((m, k), dtype, "a"), Input((k, n), dtype, "b", 1.0 / math.sqrt(k))),
                lambda a, b: a @ b,
                lambda a, b: a @ b,
                (m, n), dtype, 2 * m * n * k)


# --- convolution (NCHW, "same" padding) -------------------------------------------------------------
def conv2d(variant: str, n: int, c: int, hw: int, k: int, r: int, stride: int = 1, dtype="f32") -> Case:
    pad, out = r // 2, (hw + 2 * (r // 2) - r) // stride + 1
    return Case("conv2d", variant, f"conv2d {dtype} {r}x{r} b{n} {hw}x{hw}x{c}->{k}" + (f" s{stride}" if stride > 1 else ""),
                (Input((n, c, hw, hw), dtype, "x"), Input((k, c, r, r), dtype, "w", 1.0 / math.sqrt(c * r * r))),
                lambda x, w: conv.conv2d(x, w, stride=stride, padding=pad),
                lambda x, w: _F().conv2d(x, w, stride=stride, padding=pad),
                (n, k, out, out), dtype, 2 * n * k * out * out * c * r * r)


# --- attention: naive softmax(q k^T / sqrt(d)) v ------------------------------------------------
def _torch_attention(q, k, v):
    scale = 1.0 / math.sqrt(q.shape[-1])
    return _torch().softmax((q @ k.transpose(-1, -2)) * scale, -1) @ v


def _torch_sdpa(q, k, v):
    return _F().scaled_dot_product_attention(q, k, v)


def attention(variant: str, b: int, h: int, s: int, d: int, dtype="f32") -> Case:
    shape = (b, h, s, d)
    return Case("attention", variant, f"attention {dtype} b{b} h{h} s{s} d{d}",
                tuple(Input(shape, dtype, name) for name in "qkv"),
                nn.attention, _torch_attention,
                shape, dtype, 4 * b * h * s * s * d, {"sdpa": _torch_sdpa})


# --- MLP: gelu(x @ w1 + b1) @ w2 + b2 -------------------------------------------------------------
def _torch_mlp(x, w1, b1, w2, b2):
    return _F().gelu(x @ w1 + b1) @ w2 + b2


def mlp(variant: str, m: int, d: int, hidden: int, dtype="f32") -> Case:
    return Case("mlp", variant, f"mlp {dtype} {m}x{d}x{hidden}",
                (Input((m, d), dtype, "x"), Input((d, hidden), dtype, "w1", 1.0 / math.sqrt(d)),
                 Input((hidden,), dtype, "b1", 0.1), Input((hidden, d), dtype, "w2", 1.0 / math.sqrt(hidden)),
                 Input((d,), dtype, "b2", 0.1)),
                nn.mlp, _torch_mlp,
                (m, d), dtype, 4 * m * d * hidden)


# --- pre-norm transformer block (compiler.nn.transformer_block) --------------------------------
def _torch_block(x, ln1_w, ln1_b, wq, wk, wv, wo, ln2_w, ln2_b, w1, b1, w2, b2, heads: int):
    F = _F()
    bsz, s, d = x.shape
    hd = d // heads

    def split(t):
        return t.reshape(bsz, s, heads, hd).permute(0, 2, 1, 3)

    h = F.layer_norm(x, (d,), ln1_w, ln1_b, 1e-5)
    q, k, v = split(h @ wq), split(h @ wk), split(h @ wv)
    a = _torch_attention(q, k, v).permute(0, 2, 1, 3).reshape(bsz, s, d)
    x = x + a @ wo
    return x + _torch_mlp(F.layer_norm(x, (d,), ln2_w, ln2_b, 1e-5), w1, b1, w2, b2)


def block(variant: str, b: int, s: int, d: int, heads: int, hidden: int, dtype="f32") -> Case:
    scales = {"x": 1.0, "ln1_w": 0.1, "ln1_b": 0.1, "ln2_w": 0.1, "ln2_b": 0.1, "b1": 0.1, "b2": 0.1,
              "w1": 1.0 / math.sqrt(d), "w2": 1.0 / math.sqrt(hidden)}
    shifts = {"ln1_w": 1.0, "ln2_w": 1.0}
    inputs = tuple(Input(sp.shape, dtype, sp.name, scales.get(sp.name, 1.0 / math.sqrt(d)), shifts.get(sp.name, 0.0))
                   for sp in nn.transformer_block_specs(b, s, d, hidden, dtype))

    def saturn_block(*xs):
        return nn.transformer_block(*xs, heads=heads)

    def torch_block(*xs):
        return _torch_block(*xs, heads=heads)

    flops = 8 * b * s * d * d + 4 * b * s * s * d + 4 * b * s * d * hidden
    return Case("block", variant, f"transformer block {dtype} b{b} s{s} d{d} heads{heads} ff{hidden}",
                inputs, saturn_block, torch_block, (b, s, d), dtype, flops, many_kernels=True)


# --- decoders (compiler.nn.llama_decoder / gpt2_decoder), plain PyTorch ops (no SDPA) -------------
def _decoder_inputs(specs) -> tuple[Input, ...]:
    """Inputs at a trained model's scale: unit activations, weights ~ 1/sqrt(fan-in), norm
    weights near 1, small biases, a causal mask and real RoPE tables."""
    out = []
    for sp in specs:
        shape, dt, name = tuple(sp.shape), sp.dtype.value, sp.name
        if name == "mask":
            out.append(Input(shape, dt, name, fill="causal_mask"))
        elif name in ("cos", "sin"):
            out.append(Input(shape, dt, name, fill=f"rope_{name}"))
        elif name.endswith("norm") or name.endswith("_w"):
            out.append(Input(shape, dt, name, 0.1, 1.0))
        elif len(shape) == 3 and name != "x":
            out.append(Input(shape, dt, name, 1.0 / math.sqrt(shape[1])))
        else:
            out.append(Input(shape, dt, name, 1.0 if name == "x" else 0.1))
    return tuple(out)


def _torch_grouped_attention(q, k, v, mask):
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    return _torch().softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + mask, -1) @ v


def _torch_rms(x, w, eps):
    return x * _torch().rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def _torch_rope(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + _torch().cat([-x[..., h:], x[..., :h]], -1) * sin


def _torch_llama(x, mask, cos, sin, attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down, heads, kv_heads,
                 eps=1e-5):
    F = _F()
    b, s, d = x.shape
    hd = d // heads
    for layer in range(attn_norm.shape[0]):
        h = _torch_rms(x, attn_norm[layer], eps)
        q = _torch_rope((h @ wq[layer]).reshape(b, s, heads, hd).transpose(1, 2), cos, sin)
        k = _torch_rope((h @ wk[layer]).reshape(b, s, kv_heads, hd).transpose(1, 2), cos, sin)
        v = (h @ wv[layer]).reshape(b, s, kv_heads, hd).transpose(1, 2)
        a = _torch_grouped_attention(q, k, v, mask).transpose(1, 2).reshape(b, s, d)
        x = x + a @ wo[layer]
        h = _torch_rms(x, mlp_norm[layer], eps)
        x = x + (F.silu(h @ w_gate[layer]) * (h @ w_up[layer])) @ w_down[layer]
    return x


def _torch_gpt2(x, mask, ln1_w, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_w, ln2_b, w_fc, b_fc, w_proj, b_proj, heads,
                eps=1e-5):
    F = _F()
    b, s, d = x.shape
    hd = d // heads
    for layer in range(ln1_w.shape[0]):
        h = F.layer_norm(x, (d,), ln1_w[layer], ln1_b[layer], eps)
        qkv = (h @ w_qkv[layer] + b_qkv[layer]).reshape(b, s, 3, heads, hd).permute(2, 0, 3, 1, 4)
        a = _torch_grouped_attention(qkv[0], qkv[1], qkv[2], mask).transpose(1, 2).reshape(b, s, d)
        x = x + a @ w_o[layer] + b_o[layer]
        h = F.layer_norm(x, (d,), ln2_w[layer], ln2_b[layer], eps)
        x = x + F.gelu(h @ w_fc[layer] + b_fc[layer], approximate="tanh") @ w_proj[layer] + b_proj[layer]
    return x


def decoder(variant: str, layers: int, b: int, s: int, d: int, heads: int, kv_heads: int, ffn: int,
            dtype="f32") -> Case:
    inputs = _decoder_inputs(nn.llama_decoder_specs(layers, b, s, d, heads, kv_heads, ffn, dtype))
    hd = d // heads
    per_layer = 2 * b * s * d * (d + 2 * kv_heads * hd) + 2 * b * s * d * d + 6 * b * s * d * ffn + 4 * b * s * s * d
    return Case("decoder", variant, f"llama decoder {dtype} L{layers} b{b} s{s} d{d} h{heads}/{kv_heads} ff{ffn}",
                inputs, lambda *xs: nn.llama_decoder(*xs, heads=heads, kv_heads=kv_heads),
                lambda *xs: _torch_llama(*xs, heads=heads, kv_heads=kv_heads),
                (b, s, d), dtype, layers * per_layer, many_kernels=True)


def gpt2(variant: str, layers: int, b: int, s: int, d: int, heads: int, ffn: int, dtype="f32") -> Case:
    inputs = _decoder_inputs(nn.gpt2_decoder_specs(layers, b, s, d, ffn, dtype))
    per_layer = 2 * b * s * d * 3 * d + 2 * b * s * d * d + 4 * b * s * d * ffn + 4 * b * s * s * d
    return Case("gpt2", variant, f"gpt2 decoder {dtype} L{layers} b{b} s{s} d{d} h{heads} ff{ffn}",
                inputs, lambda *xs: nn.gpt2_decoder(*xs, heads=heads),
                lambda *xs: _torch_gpt2(*xs, heads=heads),
                (b, s, d), dtype, layers * per_layer, many_kernels=True)


# --- the suite ----------------------------------------------------------------------------------
# Sizes: "cpu" for this 2-core machine (and the reference target), "cuda" for an H200.
# full/odd run together by default; quick is the --quick suite; tiny is for smoke tests.
WORKLOADS: list[Workload] = [
    Workload("elementwise", "elementwise chain gelu(1.7x+0.3), f32", elementwise, {
        "cpu": {"full": dict(shape=(4 << 20,)), "odd": dict(shape=(1000, 4097)),
                "quick": dict(shape=(1 << 20,)), "tiny": dict(shape=(1000,))},
        "cuda": {"full": dict(shape=(64 << 20,)), "odd": dict(shape=(8191, 4097)),
                 "quick": dict(shape=(16 << 20,)), "tiny": dict(shape=(1000,))}}),
    Workload("softmax", "softmax over the last axis, f32", softmax, {
        "cpu": {"full": dict(rows=2048, cols=2048), "odd": dict(rows=1000, cols=4097),
                "quick": dict(rows=1000, cols=1027), "tiny": dict(rows=4, cols=37)},
        "cuda": {"full": dict(rows=8192, cols=8192), "odd": dict(rows=8191, cols=8193),
                 "quick": dict(rows=4096, cols=4096), "tiny": dict(rows=4, cols=37)}}),
    Workload("layernorm", "layernorm with weight and bias, f32", layernorm, {
        "cpu": {"full": dict(rows=4096, cols=1024), "odd": dict(rows=1000, cols=4097),
                "quick": dict(rows=1024, cols=1024), "tiny": dict(rows=8, cols=33)},
        "cuda": {"full": dict(rows=16384, cols=4096), "odd": dict(rows=16383, cols=4097),
                 "quick": dict(rows=4096, cols=4096), "tiny": dict(rows=8, cols=33)}}),
    Workload("rmsnorm", "rmsnorm with weight, f16", rmsnorm, {
        "cpu": {"full": dict(rows=4096, cols=1024), "odd": dict(rows=1000, cols=4097),
                "quick": dict(rows=1024, cols=1024), "tiny": dict(rows=8, cols=33)},
        "cuda": {"full": dict(rows=16384, cols=4096), "odd": dict(rows=16383, cols=4097),
                 "quick": dict(rows=4096, cols=4096), "tiny": dict(rows=8, cols=33)}}),
    Workload("matmul_f32", "matrix product, f32", matmul, {
        "cpu": {"full": dict(m=1024, k=1024, n=1024), "odd": dict(m=1000, k=1023, n=1025),
                "quick": dict(m=256, k=256, n=256), "tiny": dict(m=9, k=17, n=13)},
        "cuda": {"full": dict(m=4096, k=4096, n=4096), "odd": dict(m=4095, k=4097, n=4099),
                 "quick": dict(m=2048, k=2048, n=2048), "tiny": dict(m=9, k=17, n=13)}}),
    Workload("matmul_f16", "matrix product, f16", matmul, {
        "cpu": {"full": dict(m=512, k=512, n=512, dtype="f16"), "odd": dict(m=500, k=511, n=513, dtype="f16"),
                "quick": dict(m=255, k=256, n=257, dtype="f16"), "tiny": dict(m=9, k=17, n=13, dtype="f16")},
        "cuda": {"full": dict(m=4096, k=4096, n=4096, dtype="f16"),
                 "odd": dict(m=4095, k=4097, n=4099, dtype="f16"),
                 "quick": dict(m=2048, k=2048, n=2048, dtype="f16"), "tiny": dict(m=9, k=17, n=13, dtype="f16")}}),
    Workload("attention", "naive attention softmax(q k^T / sqrt(d)) v", attention, {
        "cpu": {"full": dict(b=1, h=8, s=1024, d=64), "odd": dict(b=1, h=8, s=1001, d=64),
                "quick": dict(b=1, h=4, s=256, d=64), "tiny": dict(b=1, h=2, s=16, d=8)},
        "cuda": {"full": dict(b=4, h=16, s=2048, d=64, dtype="f16"), "odd": dict(b=4, h=16, s=2047, d=64, dtype="f16"),
                 "quick": dict(b=2, h=8, s=1024, d=64, dtype="f16"), "tiny": dict(b=1, h=2, s=16, d=8, dtype="f16")}}),
    Workload("mlp", "MLP gelu(x @ w1 + b1) @ w2 + b2", mlp, {
        "cpu": {"full": dict(m=512, d=512, hidden=2048), "odd": dict(m=1000, d=511, hidden=2047),
                "quick": dict(m=256, d=256, hidden=1024), "tiny": dict(m=8, d=16, hidden=32)},
        "cuda": {"full": dict(m=4096, d=1024, hidden=4096, dtype="f16"),
                 "odd": dict(m=4095, d=1023, hidden=4097, dtype="f16"),
                 "quick": dict(m=2048, d=1024, hidden=4096, dtype="f16"), "tiny": dict(m=8, d=16, hidden=32, dtype="f16")}}),
    Workload("block", "pre-norm transformer block (layernorm, attention, MLP, residuals)", block, {
        "cpu": {"full": dict(b=1, s=256, d=512, heads=8, hidden=2048),
                "odd": dict(b=1, s=250, d=384, heads=6, hidden=1537),
                "quick": dict(b=1, s=64, d=128, heads=4, hidden=512),
                "tiny": dict(b=1, s=8, d=16, heads=2, hidden=32)},
        "cuda": {"full": dict(b=4, s=1024, d=1024, heads=16, hidden=4096, dtype="f16"),
                 "odd": dict(b=1, s=1000, d=1024, heads=16, hidden=4097, dtype="f16"),
                 "quick": dict(b=1, s=512, d=512, heads=8, hidden=2048, dtype="f16"),
                 "tiny": dict(b=1, s=8, d=16, heads=2, hidden=32, dtype="f16")}}),
    Workload("decoder", "Llama-style decoder (RMSNorm, GQA attention with RoPE and a causal mask, SiLU-gated MLP)",
             decoder, {
        "cpu": {"full": dict(layers=2, b=1, s=256, d=512, heads=8, kv_heads=2, ffn=1376),
                "odd": dict(layers=2, b=1, s=250, d=384, heads=6, kv_heads=2, ffn=1000),
                "quick": dict(layers=1, b=1, s=64, d=128, heads=4, kv_heads=2, ffn=344),
                "tiny": dict(layers=1, b=1, s=8, d=16, heads=2, kv_heads=1, ffn=40)},
        "cuda": {"full": dict(layers=2, b=1, s=1024, d=2048, heads=16, kv_heads=4, ffn=5632, dtype="f16"),
                 "odd": dict(layers=2, b=1, s=1000, d=1536, heads=12, kv_heads=4, ffn=4100, dtype="f16"),
                 "quick": dict(layers=1, b=1, s=512, d=1024, heads=8, kv_heads=2, ffn=2816, dtype="f16"),
                 "tiny": dict(layers=1, b=1, s=8, d=16, heads=2, kv_heads=1, ffn=40, dtype="f16")}}),
    Workload("gpt2", "GPT-2-style decoder (LayerNorm, fused qkv with bias, causal mask, tanh-GELU MLP)", gpt2, {
        "cpu": {"full": dict(layers=2, b=1, s=256, d=512, heads=8, ffn=2048),
                "odd": dict(layers=2, b=1, s=250, d=384, heads=6, ffn=1537),
                "quick": dict(layers=1, b=1, s=64, d=128, heads=4, ffn=512),
                "tiny": dict(layers=1, b=1, s=8, d=16, heads=2, ffn=32)},
        "cuda": {"full": dict(layers=2, b=1, s=1024, d=1024, heads=16, ffn=4096, dtype="f16"),
                 "odd": dict(layers=2, b=1, s=1000, d=1152, heads=18, ffn=4100, dtype="f16"),
                 "quick": dict(layers=1, b=1, s=512, d=768, heads=12, ffn=3072, dtype="f16"),
                 "tiny": dict(layers=1, b=1, s=8, d=16, heads=2, ffn=32, dtype="f16")}}),
    Workload("conv2d", "2-D convolution, NCHW, same padding (CUDA full: ResNet-50's 3x3 and 1x1 layers at batch 32)",
             conv2d, {
        "cpu": {"full": dict(n=8, c=64, hw=28, k=64, r=3), "odd": dict(n=3, c=31, hw=27, k=33, r=3),
                "quick": dict(n=2, c=32, hw=28, k=32, r=3), "tiny": dict(n=1, c=3, hw=7, k=4, r=3)},
        "cuda": {"full": [dict(n=32, c=64, hw=56, k=64, r=3, dtype="f16"),
                          dict(n=32, c=128, hw=28, k=128, r=3, dtype="f16"),
                          dict(n=32, c=256, hw=14, k=256, r=3, dtype="f16"),
                          dict(n=32, c=256, hw=56, k=64, r=1, dtype="f16")],
                 "odd": dict(n=31, c=63, hw=55, k=65, r=3, dtype="f16"),
                 "quick": dict(n=8, c=64, hw=56, k=64, r=3, dtype="f16"),
                 "tiny": dict(n=1, c=3, hw=7, k=4, r=3, dtype="f16")}}),
]

SUITES = {"full": ("full", "odd"), "quick": ("quick",), "tiny": ("tiny",)}


def workload_names() -> list[str]:
    return [w.name for w in WORKLOADS]


def select_cases(family: str, suite: str, names: list[str] | None = None) -> list[Case]:
    """The cases to run, main sizes first (so a time limit cuts odd sizes before main ones)."""
    if names:
        unknown = sorted(set(names) - set(workload_names()))
        if unknown:
            raise ValueError(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(workload_names())}")
    chosen = [w for w in WORKLOADS if not names or w.name in names]
    cases = []
    for sub in SUITES[suite]:
        for w in chosen:
            cases.extend(w.cases(family, sub))
    return cases
