"""A static cost model that ranks candidate programs before anything is measured.

It counts passes over memory, not ops: under an additive per-op cost the online-softmax form
looks worse (it computes exp twice), while its real benefit is one pass fewer over the scores.

Model (one number, roughly "bytes moved + a little compute"):
- Materialized values are reductions, CONTIGUOUS nodes and graph outputs; everything else
  (elementwise ops, views) is fused into each consumer and recomputed there.
- Each materialized value is one kernel: it reads the memory-resident tensors its fused cone
  touches (inputs and other materialized values, at their own size, not the broadcast size)
  and writes its result.
- Reductions that share a pass are charged their reads once: reductions over the same input
  shape and axis either fit a tile (axis length <= TILE_LIMIT: a tile is loaded once and all
  its statistics computed from registers) or are independent streaming passes at the same
  dependency depth (e.g. sum(x) and sum(x*x) in single-pass layernorm statistics).
- Compute adds 1/4 per element per elementwise op (recomputation is charged per consumer).
Measured runtime decides in the end; this only orders candidates.
"""
from __future__ import annotations

import math

from ir.graph import Graph
from ir.node import Node
from ir.ops import ELEMENTWISE, REDUCE, Op

TILE_LIMIT = 256
COMPUTE_WEIGHT = 0.25


def _numel(n: Node) -> int:
    return math.prod(n.shape) if n.shape else 1


def static_cost(graph: Graph) -> float:
    outputs = set(graph.outputs)
    nodes = graph.nodes
    materialized = [n for n in nodes if n.op in REDUCE or n.op == Op.CONTIGUOUS or n in outputs]
    mat_set = set(materialized)
    depth: dict[Node, int] = {}
    groups: dict[tuple, set] = {}
    total = 0.0
    for m in materialized:  # toposorted: producers first
        reads: set[Node] = set()
        flops = 0.0
        stack, seen = list(m.srcs), set()
        if m.op in ELEMENTWISE:
            flops += _numel(m)
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if n.op == Op.INPUT or (n in mat_set and n is not m):
                reads.add(n)
                continue
            if n.op == Op.CONST:
                continue
            if n.op in ELEMENTWISE:
                flops += _numel(n)
            stack.extend(n.srcs)
        long_deps = [depth[r] for r in reads if r in depth]
        d = 1 + max(long_deps, default=0)
        if m.op in REDUCE:
            src = m.srcs[0]
            length = max(src.shape[a] for a in m.arg)
            flops += _numel(src)
            if length <= TILE_LIMIT:
                key = ("tile", src.shape, m.arg)
                depth[m] = max(long_deps, default=0)
            else:
                key = ("long", src.shape, m.arg, d)
                depth[m] = d
        else:
            key = ("own", id(m))
            depth[m] = max(long_deps, default=0)
        charged = groups.setdefault(key, set())
        for r in reads:
            if r not in charged:
                charged.add(r)
                total += _numel(r) * r.dtype.itemsize
        total += _numel(m) * m.dtype.itemsize + COMPUTE_WEIGHT * flops
    return total
