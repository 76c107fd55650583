"""A static cost model that ranks candidate programs before anything is measured.

It counts passes over memory, not ops: under an additive per-op cost the online-softmax form
looks worse (it computes exp twice), while its real benefit is one pass fewer over the scores.

Model (one number, roughly "bytes moved + a little compute"):
- Materialized values are reductions, CONTIGUOUS nodes and graph outputs; everything else
  (elementwise ops, views) is fused into each consumer and recomputed there.
- Each materialized value is one kernel: it reads the memory-resident tensors its fused cone
  touches (inputs and other materialized values, at their own size, not the broadcast size)
  and writes its result.
- Reductions over the same operand shape and axes at the same dependency depth share a pass
  and are charged their reads once: e.g. sum(x) and sum(x*x) (single-pass layernorm
  statistics), or a tile's max m_b and its sum of exp(x - m_b) (online softmax). The depth
  grows by one when a kernel reads a value that folded more than TILE_LIMIT elements (a
  whole long row: x - max(x) needs the max of the row before the second pass can start);
  statistics of the same tile do not count.
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
    folded: dict[Node, int] = {}
    group_of: dict[Node, tuple] = {}
    charged: dict[tuple, set] = {}
    total = 0.0
    for m in materialized:  # toposorted: producers first
        reads: set[Node] = set()
        flops = float(_numel(m)) if m.op in ELEMENTWISE else 0.0
        stack, seen = list(m.srcs), set()
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if n.op == Op.INPUT or n in mat_set:
                reads.add(n)
                continue
            if n.op == Op.CONST:
                continue
            if n.op in ELEMENTWISE:
                flops += _numel(n)
            stack.extend(n.srcs)
        shape_key = (m.srcs[0].shape, m.arg) if m.op in REDUCE else ("own", id(m))
        # statistics of the same tiles (same operand shape and axes) share a pass
        same = [r for r in reads if r in group_of and group_of[r][:2] == shape_key
                and folded[r] <= TILE_LIMIT]
        other = [r for r in reads if r not in same]
        d = max([depth.get(r, 0) + (1 if folded.get(r, 1) > TILE_LIMIT else 0) for r in other] +
                [depth[r] for r in same], default=0)
        f = max([folded.get(r, 1) for r in other], default=1)
        if m.op in REDUCE:
            src = m.srcs[0]
            flops += _numel(src)
            f *= math.prod(src.shape[a] for a in m.arg)
        depth[m], folded[m] = d, f
        key = shape_key + (d,)
        group_of[m] = key
        seen_reads = charged.setdefault(key, set())
        for r in reads:
            if r not in seen_reads:
                seen_reads.add(r)
                total += _numel(r) * r.dtype.itemsize
        total += _numel(m) * m.dtype.itemsize + COMPUTE_WEIGHT * flops
    return total
