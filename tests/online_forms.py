"""Structural detectors for the forms the e-graph is expected to produce (used by tests)."""
from __future__ import annotations

from ir.graph import Graph
from ir.node import Node
from ir.ops import REDUCING as REDUCE, Op

SUMS = (Op.SUM, Op.CONTRACT)   # a contraction term is a sum of products


def cone(n: Node) -> set[Node]:
    """Nodes computed inside n's kernel: its sources, through elementwise ops and views,
    stopping at (and including) reductions and inputs."""
    out, stack = set(), list(n.srcs)
    while stack:
        x = stack.pop()
        if x in out:
            continue
        out.add(x)
        if x.op not in REDUCE and x.op != Op.INPUT:
            stack.extend(x.srcs)
    return out


def online_softmax_stats(g: Graph) -> list[tuple[Node, Node, Node, Node]]:
    """(m_b, l_b, m, combine): m_b = max over an inner tile axis k, l_b = a sum over the same
    axis whose operand uses m_b, m = max over the tile axis k-1 of m_b, and combine = a sum
    over axis k-1 whose operand uses both l_b (or an accumulator like it) and m."""
    found = []
    reds = [n for n in g.nodes if n.op in REDUCE and len(n.arg) == 1]
    for mb in (n for n in reds if n.op == Op.MAX):
        k = mb.arg[0]
        if k == 0:
            continue
        for lb in (n for n in reds if n.op in SUMS and n.arg == (k,) and mb in cone(n)):
            for comb in (n for n in reds if n.op in SUMS and n.arg == (k - 1,) and lb in cone(n)):
                for m in cone(comb):
                    if m.op == Op.MAX and m.arg == (k - 1,) and mb in cone(m) | {m.srcs[0]}:
                        found.append((mb, lb, m, comb))
    return found


def single_pass_statistics(g: Graph, big: int) -> bool:
    """Every reduction over a large operand (numel >= big) reads only inputs: no statistic
    has to be complete before another pass over the data can start."""
    for n in g.nodes:
        if n.op in REDUCE and n.srcs[0].numel >= big:
            if any(x.op in REDUCE for x in cone(n)):
                return False
    return True
