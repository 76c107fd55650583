"""Programs that exercise every frontend op and the kernel templates on odd shapes and f16.

Shared by the GPU tests (tests/test_cuda_gpu.py) and the on-device suite
(benchmarks/gpu_suite.py), which compiles them all in parallel before checking them.
"""
from __future__ import annotations

import compiler
from compiler import nn
from compiler.trace import spec
from ir.graph import Graph


def _cases():
    S = spec
    odd = (7, 13)
    c = {}
    for dt in ("f32", "f16"):
        x = S(odd, dt)
        for name, fn in [("exp", lambda a: a.exp()), ("log", lambda a: (a.abs() + 0.5).log()),
                         ("sin", lambda a: a.sin()), ("cos", lambda a: a.cos()), ("sqrt", lambda a: a.abs().sqrt()),
                         ("rsqrt", lambda a: (a.abs() + 0.1).rsqrt()), ("recip", lambda a: (a.abs() + 0.5).reciprocal()),
                         ("sigmoid", lambda a: a.sigmoid()), ("tanh", lambda a: a.tanh()), ("relu", lambda a: a.relu()),
                         ("gelu", lambda a: a.gelu()), ("gelu_tanh", lambda a: a.gelu("tanh")), ("silu", lambda a: a.silu()),
                         ("erf", lambda a: a.erf()), ("pow3", lambda a: a ** 3), ("neg_abs", lambda a: -a.abs()),
                         ("clamp", lambda a: a.clamp(-0.5, 0.5)), ("square", lambda a: a.square())]:
            c[f"{name}_{dt}"] = (fn, x)
        c[f"binary_{dt}"] = (lambda a, b: (a + b) * a - b / (b.abs() + 1), x, S(odd, dt))
        c[f"broadcast_{dt}"] = (lambda a, b: a * b + b, x, S((1, 13), dt))
        c[f"minmax_{dt}"] = (lambda a, b: a.maximum(b) + a.minimum(b), x, S(odd, dt))
        c[f"compare_where_{dt}"] = (lambda a, b: (a < b).where(a, b * 2) + (a >= b).where(1.0, 0.0), x, S(odd, dt))
        c[f"mod_{dt}"] = (lambda a: a.fmod(0.75) + a % 0.5, x)
        c[f"sum_all_{dt}"] = (lambda a: a.sum(), x)
        c[f"sum0_{dt}"] = (lambda a: a.sum(0), x)
        c[f"sum1_keep_{dt}"] = (lambda a: a.sum(1, keepdim=True), x)
        c[f"max1_{dt}"] = (lambda a: a.max(-1), x)
        c[f"min0_{dt}"] = (lambda a: a.min(0), x)
        c[f"mean_var_{dt}"] = (lambda a: a.mean(1) + a.var(1), x)
        c[f"softmax_{dt}"] = (lambda a: a.softmax(-1), S((33, 1025), dt))
        c[f"softmax_axis0_{dt}"] = (lambda a: a.softmax(0), x)
        c[f"log_softmax_{dt}"] = (lambda a: a.log_softmax(-1), S((5, 77), dt))
        c[f"layernorm_{dt}"] = (lambda a, w, b: a.layer_norm((4097,), w, b), S((9, 4097), dt), S((4097,), dt), S((4097,), dt))
        c[f"rmsnorm_{dt}"] = (lambda a, w: a.rms_norm((1000,), w), S((17, 1000), dt), S((1000,), dt))
        c[f"matmul_{dt}"] = (lambda a, b: a @ b, S((33, 70), dt), S((70, 45), dt))
        c[f"matmul_aligned_{dt}"] = (lambda a, b: a @ b, S((130, 64), dt), S((64, 200), dt))
        c[f"matmul_bt_{dt}"] = (lambda a, b: a @ b.T, S((100, 96), dt), S((72, 96), dt))
        c[f"matmul_batched_{dt}"] = (lambda a, b: a @ b, S((3, 40, 32), dt), S((3, 32, 24), dt))
        c[f"matmul_bcast_{dt}"] = (lambda a, b: a @ b, S((2, 3, 40, 32), dt), S((32, 48), dt))
        c[f"matvec_{dt}"] = (lambda a, b: a @ b, S((37, 29), dt), S((29,), dt))
        c[f"linear_{dt}"] = (lambda a, w, b: a.linear(w, b), S((50, 64), dt), S((80, 64), dt), S((80,), dt))
        c[f"attention_{dt}"] = (nn.attention, S((2, 3, 50, 64), dt), S((2, 3, 70, 64), dt), S((2, 3, 70, 64), dt))
        c[f"attention_small_{dt}"] = (nn.attention, S((1, 2, 5, 8), dt), S((1, 2, 6, 8), dt), S((1, 2, 6, 8), dt))
        c[f"mlp_{dt}"] = (nn.mlp, S((40, 32), dt), S((32, 128), dt), S((128,), dt), S((128, 32), dt), S((32,), dt))
        c[f"movement_{dt}"] = (lambda a: a.T.reshape(13, 7)[1:12:2, ::3].pad(((1, 2), (0, 1)), 0.5) * 2, x)
        c[f"permute_expand_{dt}"] = (lambda a: a.reshape(7, 13, 1).expand(7, 13, 4).permute(2, 0, 1) + 1, x)
        c[f"cat_{dt}"] = (lambda a, b: compiler.tensor.cat([a, b * 2], 1) if hasattr(compiler, "tensor") else a, x, S((7, 5), dt))
        c[f"contiguous_{dt}"] = (lambda a: a.T.contiguous() + 1, x)
        c[f"block_{dt}"] = (lambda *a: nn.transformer_block(*a, heads=2), *nn.transformer_block_specs(2, 24, 64, 96, dt))
        c[f"block_odd_{dt}"] = (lambda *a: nn.transformer_block(*a, heads=3), *nn.transformer_block_specs(1, 13, 48, 40, dt))
    c["cast_f16_to_f32"] = (lambda a: a.astype("f32") * 3, S(odd, "f16"))
    c["cast_f32_to_i32"] = (lambda a: (a * 4).astype("i32") + 1, S(odd, "f32"))
    c["int_ops"] = (lambda a, b: (a * b + a) % 5 + (a < b).astype("i32"), S(odd, "i32"), S(odd, "i32"))
    c["bool_ops"] = (lambda a, b: ((a < b).logical_or(a > 0.5)).astype("f32"), S(odd), S(odd))
    c["identity_output"] = (lambda a: a, S(odd))
    c["const_output"] = (lambda a: (a * 0).sum() + 3.0, S(odd))
    c["two_outputs"] = (lambda a: (a.exp(), a.sum(-1)), S(odd))
    c["scalar_input"] = (lambda a, s: a * s, S(odd), S((), "f32"))
    c["one_element"] = (lambda a: a.softmax(-1) + a.sum(), S((1, 1)))
    c["bf16_matmul"] = (lambda a, b: a @ b, S((64, 64), "bf16"), S((64, 96), "bf16"))
    c["bf16_attention"] = (nn.attention, S((1, 2, 40, 32), "bf16"), S((1, 2, 40, 32), "bf16"), S((1, 2, 40, 32), "bf16"))
    return c


CASES = _cases()


def graph_of(name: str) -> Graph:
    fn, *specs = CASES[name]
    return compiler.trace(fn, *specs)
