"""The CUDA plan counted in the cost model's vocabulary (ir/kernel_cost.FEATURES).

The CUDA backend runs its own plan (plan.py: attention, gemm, row, elementwise, generic and
copy steps) rather than the kernel IR, so it counts what that plan runs: each step reads its
input buffers once and writes its output; a product's multiply-accumulates go to the
tensor-core count when its operands are half, a flash step's two products too (its scores
never reach memory), everything else is scalar work per element of the nodes the step computes.
"""
from __future__ import annotations

import math

from backends.cuda.plan import is_lossless_cast, plan, tree
from ir.graph import Graph
from ir.kernel_cost import FEATURES, HEAVY
from ir.ops import Op


def _bytes(n) -> int:
    return n.numel * n.dtype.itemsize


def _half(*nodes) -> bool:
    """Operands read from half buffers (through views and widening casts)."""
    def source(n):
        while n.op == Op.VIEW or (n.op == Op.CAST and is_lossless_cast(n)):
            n = n.srcs[0]
        return n
    return all(source(n).dtype.itemsize == 2 for n in nodes)


def plan_features(graph: Graph) -> tuple[float, ...]:
    steps = plan(graph)
    materialized = {s.output for s in steps}
    acc = dict.fromkeys(FEATURES, 0.0)
    for s in steps:
        acc["kernels"] += 1
        acc["bytes"] += sum(_bytes(x) for x in s.inputs) + _bytes(s.output)
        inside = tree(s.output, materialized)
        if s.kind == "attention":
            a = s.attention
            scores = a.qk.reduce
            macs = scores.numel * scores.srcs[0].shape[a.qk.k_axis]
            acc["mm_half" if _half(a.qk.a, a.qk.b) else "mm_f32"] += macs
            acc["mm_half" if _half(a.v) else "mm_f32"] += scores.numel * s.output.shape[-1]   # P V
            acc["scalar"] += 6 * scores.numel
            continue
        if s.kind == "gemm":
            g = s.gemm
            macs = g.reduce.numel * g.mul.shape[g.k_axis]
            acc["mm_half" if _half(g.a, g.b) else "mm_f32"] += macs
            inside = [n for n in tree(s.output, materialized, stop=frozenset({g.reduce})) if n is not g.reduce]
        for n in inside:
            if n.op in (Op.SUM, Op.MAX):
                acc["scalar"] += n.srcs[0].numel
            elif n.op not in (Op.VIEW, Op.CONST, Op.INPUT, Op.CONTIGUOUS):
                acc["scalar"] += n.numel * HEAVY.get(n.op, 1)
    return tuple(acc[f] for f in FEATURES)
