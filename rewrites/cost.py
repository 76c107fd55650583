"""A static cost model that ranks candidate programs before anything is measured.

It counts passes over memory, not ops: under an additive per-op cost the online-softmax form
looks worse (it computes exp twice), while its real benefit is one pass fewer over the scores.

Model (one number, roughly "bytes moved + a little compute"):
- Materialized values are reductions, CONTIGUOUS nodes and graph outputs; everything else
  (elementwise ops, views) is fused into each consumer and recomputed there.
- Each materialized value is one kernel: it reads the memory-resident tensors its fused cone
  touches (inputs and other materialized values, at their own size, not the broadcast size)
  and writes its result.
- Reductions that run in the same loop nest (same output dims up to the reduced axis, same
  reduced length) at the same dependency depth share a pass and are charged their reads
  once: e.g. sum(x) and sum(x*x) (single-pass layernorm statistics), or a tile's max m_b,
  its sum of exp(s - m_b) and its exp(s - m_b) @ v_b (online softmax / flash attention). The depth
  grows by one when a kernel reads a reduction result broadcast back over more than
  TILE_LIMIT elements (x - max(x) over a whole long row needs the row's max before the
  second pass can start); a tile's own statistics, broadcast over the tile, do not count.
- Compute adds 1/4 per element per elementwise op (recomputation is charged per consumer).
Measured runtime decides in the end; this only orders candidates.
"""
from __future__ import annotations

from ir.graph import Graph
from ir.node import Node
from ir.ops import ELEMENTWISE, REDUCING, Op

TILE_LIMIT = 256
COMPUTE_WEIGHT = 0.25


def _kernel_reads(m: Node, mat_set: set) -> tuple[dict[Node, float], float]:
    """Memory-resident tensors read by m's fused cone, with the largest factor by which the
    path to m broadcasts each; and the elementwise work in the cone."""
    reads: dict[Node, float] = {}
    flops = float(m.numel) if m.op in ELEMENTWISE else 0.0
    stack, seen = [(s, 1.0) for s in m.srcs], {}
    while stack:
        n, spread = stack.pop()
        if seen.get(n, 0.0) >= spread:
            continue
        first = n not in seen
        seen[n] = spread
        if n.op == Op.INPUT or n in mat_set:
            reads[n] = max(reads.get(n, 0.0), spread)
            continue
        if n.op == Op.CONST:
            continue
        if n.op in ELEMENTWISE and first:
            flops += n.numel
        if n.op == Op.VIEW:
            spread *= max(1.0, n.numel / max(1, n.srcs[0].numel))
        stack.extend((s, spread) for s in n.srcs)
    if m.op in REDUCING:   # a contraction: a multiply and an add per element, as its sum of products
        flops += m.srcs[0].numel * (2 if m.op in (Op.CONTRACT, Op.ATTEND) else 1)
    return reads, flops


def _combines_tiles(c: Node, r: Node) -> bool:
    """c reduces, across tiles, r's per-tile result (r reduced axis k, c reduces k - 1)."""
    return (c.op in REDUCING and r.op in REDUCING and len(r.arg) == 1 and c.arg == (r.arg[0] - 1,))


def static_cost(graph: Graph) -> float:
    outputs = set(graph.outputs)
    materialized = [n for n in graph.nodes if n.op in REDUCING or n.op == Op.CONTIGUOUS or n in outputs]
    mat_set = set(materialized)
    kernels = {m: _kernel_reads(m, mat_set) for m in materialized}
    consumers: dict[Node, list[Node]] = {}
    for m, (reads, _) in kernels.items():
        for r in reads:
            consumers.setdefault(r, []).append(m)
    depth: dict[Node, int] = {}
    key_of: dict[Node, tuple] = {}
    charged: dict[tuple, set] = {}
    total = 0.0
    for m in materialized:  # toposorted: producers first
        reads, flops = kernels[m]
        in_registers = {r for r in reads if r in key_of and _combines_tiles(m, r)}
        # a value broadcast back over more than a tile must be complete before this pass;
        # a running combine across tiles (online softmax) does not wait
        d = max((depth.get(r, 0) + (1 if r in depth and f > TILE_LIMIT and not in_registers else 0)
                 for r, f in reads.items()), default=0)
        if m.op in REDUCING:
            last = max(m.arg)  # one tile loop: same leading output dims, same reduced length
            key = (m.shape[:last + 1], tuple(m.srcs[0].shape[a] for a in m.arg), d)
        else:
            key = ("own", id(m))
        depth[m], key_of[m] = d, key
        seen_reads = charged.setdefault(key, set())
        for r in reads:
            if r not in seen_reads and r not in in_registers:
                seen_reads.add(r)
                total += r.numel * r.dtype.itemsize
        # per-tile results that only their own tile loop and a running cross-tile combine
        # read stay in registers: no write
        stays = m.op in REDUCING and m not in outputs and consumers.get(m) and all(
            key_of.get(c, key) == key or _combines_tiles(c, m) for c in consumers[m])
        if not stays:
            total += m.numel * m.dtype.itemsize
        total += COMPUTE_WEIGHT * flops
    return total
