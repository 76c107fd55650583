"""The interpreter's evaluation without materializing broadcasts: the same ops in the same
types, with sums of products as matrix products of their operands' distinct elements.

`ir.interpreter.evaluate` reads views in place and runs a CONTRACT as `BroadcastProduct` too,
but forms every product of a SUM over a MUL (a contraction before the rules make it one) and
every score of an ATTEND: a decoder layer at s250 d384 was 1.5e9 element-ops (minutes), too
slow to run a big program in its own types, which verification needs
(`compiler.verify.reference`'s calibration). Here a SUM of a float product that only sums read
runs as `BroadcastProduct` as well, and an ATTEND takes its softmax over the scores' distinct
elements. Sums are then taken in another order (the matrix product's), so results differ from
`evaluate`'s by the accumulation type's roundings, not bit for bit.

    evaluate_lean(graph, args, wide=False)   -> outputs, like evaluate(graph, args, wide=False)
"""
from __future__ import annotations

import math

import numpy as np

from ir.broadcast_product import BroadcastProduct, distinct, varying_axes
from ir.dtypes import DType
from ir.graph import Graph, toposort
from ir.interpreter import _eval_node, apply_view
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
        elif n.op == Op.CONTRACT:
            env[n] = _summed(n, vals[0], vals[1], wide)
        elif n.op == Op.ATTEND and vals[0].size:
            env[n] = _attend(n, vals[0], vals[1], wide)
        elif n.op == Op.VIEW:
            env[n] = _view(n, vals[0])
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


def _view(n: Node, x: np.ndarray) -> np.ndarray:
    for v in n.arg.views:
        x = apply_view(v, np.ascontiguousarray(x).reshape(-1), n.arg.fill)
    x = x.view()
    x.flags.writeable = False       # (a strided view of its source: nothing may write through it)
    return x


def _accumulator(dt: DType, wide: bool):
    """What `evaluate` multiplies and sums a contraction of this type in."""
    if dt == DType.f64:
        return np.float64
    return np.float64 if wide and dt == DType.f32 else np.float32


def _summed(n: Node, a: np.ndarray, b: np.ndarray, wide: bool) -> np.ndarray:
    """A CONTRACT (or SUM of a product) `n` of operands `a`, `b`, in the type `evaluate` sums it in."""
    acc = _accumulator(n.dtype, wide)
    out = _sum_of_products(n.srcs[0].shape, tuple(n.arg), a, b, acc)
    with np.errstate(over="ignore"):
        return out.astype(n.dtype.np)


def _sum_of_products(shape, axes, a: np.ndarray, b: np.ndarray, acc) -> np.ndarray:
    """sum over `axes` of a * b (both broadcast to `shape`), multiplied and summed in `acc`."""
    a, b = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
    ca, cb = distinct(a).astype(acc), distinct(b).astype(acc)
    with np.errstate(all="ignore"):
        if math.prod(shape) < 4 * (ca.size + cb.size) or 0 in shape:   # little broadcast: as `evaluate` does it
            out = (np.broadcast_to(ca, shape) * np.broadcast_to(cb, shape)).sum(axis=axes, keepdims=True)
        else:
            out = BroadcastProduct(shape, axes, varying_axes([a], shape), varying_axes([b], shape))(ca, cb)
    return np.asarray(out)


def _attend(n: Node, scores: np.ndarray, values: np.ndarray, wide: bool) -> np.ndarray:
    """softmax2 of the scores over the axis, then the weighted sum of the values, with the
    softmax computed once per distinct score (scores broadcast over the value's axes)."""
    acc = _accumulator(n.dtype, wide)
    shape = n.srcs[0].shape
    scores = np.broadcast_to(scores, shape)
    s = distinct(scores).astype(acc)
    with np.errstate(all="ignore"):
        p = np.exp2(s - s.max(axis=n.arg, keepdims=True))
        out = _sum_of_products(shape, tuple(n.arg), p, values, acc) / p.sum(axis=n.arg, keepdims=True)
    return np.broadcast_to(out, n.shape).astype(n.dtype.np)
