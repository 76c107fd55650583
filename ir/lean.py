"""The interpreter's evaluation with sums of products as matrix products: the same ops in the
same types.

`ir.interpreter.evaluate` reads views in place and runs a CONTRACT and an ATTEND's weighted sum
as matrix products of their operands' distinct elements (`interpreter.contract`), but forms
every product of a SUM over a MUL (a contraction before the rules make it one): a decoder layer
at s250 d384 was 1.5e9 element-ops (minutes), too slow to run a big program in its own types,
which verification needs (`compiler.verify.reference`'s calibration). Here a SUM of a float
product that only sums read is a `contract` as well; its sum is then taken in another order
(the matrix product's), so results differ from `evaluate`'s by the accumulation type's
roundings, not bit for bit.

    evaluate_lean(graph, args, wide=False)   -> outputs, like evaluate(graph, args, wide=False)
"""
from __future__ import annotations

import numpy as np

from ir.dtypes import DType
from ir.graph import Graph, toposort
from ir.interpreter import _eval_node, accumulator, contract
from ir.node import Node
from ir.ops import Op


class _Product:
    """A float product that only sums read: its operands, multiplied when summed."""

    def __init__(self, a: np.ndarray, b: np.ndarray):
        self.a, self.b = a, b


def evaluate_lean(graph: Graph, args, wide: bool = True, after=None) -> list[np.ndarray]:
    """`graph` on numpy `args` as `ir.interpreter.evaluate(graph, args, wide, after)` computes
    it, without materializing broadcast operands (see the module docstring)."""
    env: dict[Node, object] = {}
    for node, a in zip(graph.inputs, args):
        env[node] = np.ascontiguousarray(a, dtype=node.dtype.np).reshape(node.shape)
    order = toposort(graph.outputs)
    summed = _summed_products(order, set(graph.outputs))
    for n in order:
        if n in env:
            continue
        if n.op == Op.INPUT:
            raise KeyError(f"no value given for input {n.arg}")
        vals = [env[s] for s in n.srcs]
        if n in summed:
            env[n] = _Product(*vals)
        elif n.op == Op.SUM and isinstance(vals[0], _Product):
            env[n] = _summed(n, vals[0].a, vals[0].b, wide)
        else:
            env[n] = _eval_node(n, vals, wide)
        if after is not None and not isinstance(env[n], _Product):
            env[n] = after(n, env[n])
    return [np.array(env[o], order="C", copy=True) for o in graph.outputs]


def _summed_products(order: list[Node], outputs: set[Node]) -> set[Node]:
    """The MULs of f32 or f64 values that only SUMs read (a half product rounds to its type
    before the sum: those are formed as `evaluate` forms them)."""
    readers: dict[Node, list[Node]] = {}
    for n in order:
        for s in n.srcs:
            readers.setdefault(s, []).append(n)
    return {n for n in order if n.op == Op.MUL and n.dtype in (DType.f32, DType.f64) and n not in outputs
            and readers.get(n) and all(r.op == Op.SUM for r in readers[n])}


def _summed(n: Node, a: np.ndarray, b: np.ndarray, wide: bool) -> np.ndarray:
    """A CONTRACT (or SUM of a product) `n` of operands `a`, `b`, in the type `evaluate` sums it in."""
    with np.errstate(all="ignore"):
        return contract(a, b, tuple(n.arg), accumulator(n.dtype, wide)).astype(n.dtype.np)
