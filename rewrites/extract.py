"""Extract K different programs from a serialized e-graph (plain Python, no egglog).

Each candidate comes from a bottom-up best-node choice per e-class under one node-cost
profile (a tree cost, computed to a fixed point so cycles are harmless); profiles differ in
how they price long reductions, broadcasts and materialization, plus seeded random
perturbations for diversity. Every choice is rebuilt as an ordinary IR `Graph` (hash-consed
`ir.node` constructors, so shared sub-terms stay shared) and de-duplicated by
`Graph.structural_hash()`. Ranking is left to the static cost model (`rewrites.cost`).
"""
from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass
from typing import Callable

from ir import node as N
from ir.dtypes import DType
from ir.graph import Graph
from ir.node import IRError, Node
from rewrites.build import build
from rewrites.bridge import ENode, SerializedEGraph

Info = tuple[tuple[int, ...], DType]


def _infer(e: ENode, infos: dict, eg: SerializedEGraph) -> Info | None:
    """Shape and dtype of the value an e-node computes, or None while a child is unknown."""
    if e.op == "inp":
        n = eg.tables.inputs[e.ints[0]]
        return n.shape, n.dtype
    if e.op == "lit":
        n = eg.tables.lits[e.ints[0]]
        return n.shape, n.dtype
    ch = [infos.get(c) for c in e.children]
    if any(c is None for c in ch):
        return None
    shape, dt = ch[0]
    s = list(shape)
    op = e.op
    if op == "view":
        return eg.tables.views[e.ints[0]].shape, dt
    if op == "lt":
        return shape, DType.bool
    if op == "where":
        return ch[1]
    if op == "cast":
        return shape, DType(e.strs[0])
    if op in ("sum", "max"):
        if e.ints[0] >= len(s):
            return None
        s[e.ints[0]] = 1
    elif op == "expand":
        s[e.ints[0]] = e.ints[1]
    elif op == "unsq":
        s.insert(e.ints[0], 1)
    elif op == "sqz":
        s.pop(e.ints[0])
    elif op == "split":
        a, t = e.ints
        s[a:a + 1] = [s[a] // t, t]
    elif op == "merge":
        a = e.ints[0]
        s[a:a + 2] = [s[a] * s[a + 1]]
    elif op == "pad":
        s[e.ints[0]] += e.ints[1]
    return tuple(s), dt


def class_infos(eg: SerializedEGraph) -> dict[str, Info]:
    infos: dict[str, Info] = {}
    changed = True
    while changed:
        changed = False
        for cid, nodes in eg.classes.items():
            if cid in infos:
                continue
            for e in nodes:
                info = _infer(e, infos, eg)
                if info is not None:
                    infos[cid] = info
                    changed = True
                    break
    return infos


# --- node-cost profiles --------------------------------------------------------------------

@dataclass(frozen=True)
class Profile:
    """How one extraction prices e-nodes (a tree cost; the ranking uses `rewrites.cost`)."""
    name: str
    long_reduce: float = 4.0     # extra cost per element for a reduction over a long axis
    long_axis: int = 128         # longer reduced axes count as a separate pass over memory
    view: float = 0.05           # views are index arithmetic
    materialize: float = 2.0     # CONTIGUOUS writes and re-reads
    second_pass: float = 0.0     # per element, for a reduction over an already long-folded operand
    jitter: float = 0.0          # random factor range for diversity
    seed: int = 0


PROFILES = (
    Profile("compute", long_reduce=0.0),
    Profile("one-pass", long_reduce=4.0, second_pass=32.0),
    Profile("one-pass-light", long_reduce=0.0, second_pass=16.0),
    Profile("tiled", long_reduce=16.0),
    Profile("materialize", long_reduce=4.0, second_pass=32.0, materialize=-0.5),
    Profile("balanced", long_reduce=4.0, second_pass=4.0),
)


def node_cost(e: ENode, info: Info, infos: dict, prof: Profile) -> float:
    numel = math.prod(info[0]) or 1
    op = e.op
    if op in ("inp", "lit"):
        return 1.0
    if op in ("view", "expand", "unsq", "sqz", "split", "merge", "pad"):
        return 1.0 + prof.view * numel
    if op == "contiguous":
        return 1.0 + prof.materialize * numel
    if op in ("sum", "max"):
        cshape = infos[e.children[0]][0]
        cn = math.prod(cshape) or 1
        length = cshape[e.ints[0]]
        return 1.0 + cn * (1.0 + (prof.long_reduce if length > prof.long_axis else 0.0))
    return 1.0 + numel


def choose(eg: SerializedEGraph, infos: dict, prof: Profile) -> dict[str, ENode]:
    """Best e-node per class under `prof` (fixed point of the tree cost).

    Besides its tree cost each choice carries `folded`: how many elements a reduction chain
    has folded into one value. A reduction whose operand already depends on a long fold
    (folded > long_axis, e.g. x - max(x) over a whole row) is a second sequential pass over
    that operand and pays `prof.second_pass` per element; per-tile statistics (the online
    form) fold only a tile before they are reused, so they do not pay it."""
    rng = random.Random(prof.seed)
    best: dict[str, tuple[float, ENode, int]] = {}
    own: dict[int, float] = {}
    for cid, nodes in eg.classes.items():
        if cid not in infos:
            continue
        for e in nodes:
            if any(c not in infos for c in e.children):
                continue
            c = node_cost(e, infos[cid], infos, prof)
            if prof.jitter:
                c *= math.exp(rng.uniform(-prof.jitter, prof.jitter))
            own[id(e)] = c
    changed = True
    while changed:
        changed = False
        for cid, nodes in eg.classes.items():
            for e in nodes:
                if id(e) not in own or any(c not in best for c in e.children):
                    continue
                total = own[id(e)] + sum(best[c][0] for c in e.children)
                folded = max((best[c][2] for c in e.children), default=1)
                if e.op in ("sum", "max"):
                    cshape = infos[e.children[0]][0]
                    if folded > prof.long_axis:
                        total += prof.second_pass * (math.prod(cshape) or 1)
                    folded *= cshape[e.ints[0]]
                if cid not in best or total < best[cid][0] - 1e-9:
                    best[cid] = (total, e, folded)
                    changed = True
    return {cid: v[1] for cid, v in best.items()}


def rebuild(eg: SerializedEGraph, choice: dict[str, ENode]) -> Graph:
    """The IR program that `choice` selects for the roots."""
    memo: dict[str, Node] = {}

    def go(cid: str) -> Node:
        if cid in memo:
            return memo[cid]
        e = choice[cid]
        if e.op == "inp":
            n = eg.tables.inputs[e.ints[0]]
        elif e.op == "lit":
            n = eg.tables.lits[e.ints[0]]
        elif e.op == "view":
            n = N.view(go(e.children[0]), eg.tables.views[e.ints[0]])
        else:
            n = build(e.op, [go(c) for c in e.children], list(e.ints), list(e.floats), list(e.strs))
        memo[cid] = n
        return n

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20000))
    try:
        outs = tuple(go(r) for r in eg.roots)
    finally:
        sys.setrecursionlimit(old)
    return Graph(eg.tables.inputs, outs)


def extract_candidates(eg: SerializedEGraph, k: int, profiles=PROFILES, random_rounds: int = 24,
                       on_profile: Callable[[str, Graph], None] | None = None) -> list[tuple[str, Graph]]:
    """Up to `k * 3` distinct programs (by structural hash), each labelled by its profile."""
    infos = class_infos(eg)
    out: list[tuple[str, Graph]] = []
    seen: set[str] = set()
    plan = list(profiles)
    base = list(profiles)
    for i in range(random_rounds):
        p = base[i % len(base)]
        plan.append(Profile(f"{p.name}~{i}", p.long_reduce, p.long_axis, p.view, p.materialize,
                            p.second_pass, jitter=0.7, seed=i + 1))
    for prof in plan:
        if len(out) >= 3 * k:
            break
        choice = choose(eg, infos, prof)
        if any(r not in choice for r in eg.roots):
            continue
        try:
            g = rebuild(eg, choice)
        except IRError:
            continue
        h = g.structural_hash()
        if h in seen:
            continue
        seen.add(h)
        out.append((prof.name, g))
        if on_profile:
            on_profile(prof.name, g)
    return out
