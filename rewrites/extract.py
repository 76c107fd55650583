"""Extract K different programs from a serialized e-graph (plain Python, no egglog).

Each candidate comes from a bottom-up best-node choice per e-class under one node-cost
profile (a tree cost, computed to a fixed point so cycles are harmless); profiles differ in
how they price long reductions, broadcasts and materialization, plus seeded random
perturbations for diversity. Every choice is rebuilt as an ordinary IR `Graph` (hash-consed
`ir.node` constructors, so shared sub-terms stay shared) and de-duplicated by
`Graph.structural_hash()`. Ranking is left to the static cost model (`rewrites.cost`).

Every loop here walks the serialized e-graph in its content order (`bridge.canonical_order`),
an e-node's children in their own order (`dict.fromkeys`, never a set of class-id strings,
whose order changes with PYTHONHASHSEED), and cost ties go to the earlier position, so the
same e-graph gives the same candidates in every process.
"""
from __future__ import annotations

import heapq
import math
import random
import sys
import time
from dataclasses import dataclass, replace
from typing import Callable

from ir import node as N
from ir.dtypes import DType
from ir.graph import Graph
from ir.node import IRError, Node
from rewrites import pattern as P
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
    if op in P.REDUCING_OPS:
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
    """Shape and dtype of every class that has a well-formed e-node, by a worklist from the
    leaves (each e-node is tried when one of its children gets its info: linear in e-nodes)."""
    from collections import deque
    infos: dict[str, Info] = {}
    parents: dict[str, list[tuple[str, ENode]]] = {}
    ready = deque()
    for cid, nodes in eg.classes.items():
        for e in nodes:
            if e.children:
                for c in dict.fromkeys(e.children):
                    parents.setdefault(c, []).append((cid, e))
            else:
                ready.append((cid, e))
    while ready:
        cid, e = ready.popleft()
        if cid in infos:
            continue
        info = _infer(e, infos, eg)
        if info is None:
            continue
        infos[cid] = info
        for p in parents.get(cid, ()):
            if p[0] not in infos:
                ready.append(p)
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
    second_pass: float = 0.0     # per element, for a reduction along a row-wide broadcast
    jitter: float = 0.0          # random factor range for diversity
    dag: bool = False            # count a shared sub-program once (greedy DAG cost)
    seed: int = 0
    without: tuple[str, ...] = ()   # e-node ops this extraction never picks


PROFILES = (
    Profile("one-pass-dag", long_reduce=4.0, second_pass=32.0, dag=True),
    Profile("compute-dag", long_reduce=0.0, dag=True),
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
    if op in P.REDUCING_OPS:     # a contraction: the sum without a separate product
        cshape = infos[e.children[0]][0]
        cn = math.prod(cshape) or 1
        length = cshape[e.ints[0]]
        return 1.0 + cn * (1.0 + (prof.long_reduce if length > prof.long_axis else 0.0))
    return 1.0 + numel


CAP = 1 << 20


def _shift(bc: dict, at: int, by: int) -> dict:
    return {(k + by if k >= at else k): v for k, v in bc.items()}


def broadcast_analysis(eg: SerializedEGraph) -> dict[str, tuple[frozenset, dict]]:
    """Per class: (its size-1 axes that a reduction made, {axis: factor}) where factor is how
    far along that axis a reduction result has been broadcast back into this value (max over
    the class's e-nodes, so it describes the value, not one way of computing it). Only a
    broadcast along an axis that a reduction collapsed counts (`x - max(x)`), not a matmul
    operand's broadcast. `exp(x - max(x))` over a row of n has factor n on the row axis; its
    tile-local form `exp(x_b - max_b(x_b))` only the tile size. A reduction along an axis
    with a large factor is a second pass over its operand."""
    info: dict[str, tuple[frozenset, dict]] = {c: (frozenset(), {}) for c in eg.classes}

    def shift(axes, at: int, by: int) -> frozenset:
        return frozenset(k + by if k >= at else k for k in axes)

    changed = True
    while changed:
        changed = False
        for cid, nodes in eg.classes.items():
            red, bc = info[cid]
            for e in nodes:
                kids = [info[c] for c in e.children]
                op = e.op
                if op in ("inp", "lit", "view"):
                    continue
                if op in P.REDUCING_OPS:
                    a = e.ints[0]
                    r0, b0 = kids[0]
                    if op in P.KERNEL_OPS:   # the product of both operands, then the sum
                        r0, b0 = r0 | kids[1][0], {k: max(kids[0][1].get(k, 0), kids[1][1].get(k, 0))
                                                   for k in set(kids[0][1]) | set(kids[1][1])}
                    nr, nb = r0 | {a}, {k: v for k, v in b0.items() if k != a}
                elif op == "expand":
                    a, n = e.ints
                    nr, nb = kids[0][0] - {a}, dict(kids[0][1])
                    if a in kids[0][0]:
                        nb[a] = min(CAP, nb.get(a, 1) * n)
                elif op == "unsq":
                    a = e.ints[0]
                    nr, nb = shift(kids[0][0], a, 1), _shift(kids[0][1], a, 1)
                elif op == "sqz":
                    a = e.ints[0]
                    nr = shift(kids[0][0] - {a}, a + 1, -1)
                    nb = _shift({k: v for k, v in kids[0][1].items() if k != a}, a + 1, -1)
                elif op == "split":
                    a = e.ints[0]
                    nr, nb = shift(kids[0][0], a + 1, 1), _shift(kids[0][1], a + 1, 1)
                    if a in kids[0][1]:
                        nb[a + 1] = kids[0][1][a]
                elif op == "merge":
                    a = e.ints[0]
                    r0, old = kids[0]
                    nr = shift(r0 - {a, a + 1}, a + 2, -1) | ({a} if {a, a + 1} <= r0 else set())
                    nb = _shift({k: v for k, v in old.items() if k not in (a, a + 1)}, a + 2, -1)
                    if a in old or a + 1 in old:
                        nb[a] = max(old.get(a, 1), old.get(a + 1, 1))
                elif op == "pad":
                    nr, nb = kids[0]
                else:  # elementwise
                    nr, nb = frozenset().union(*(k[0] for k in kids)), {}
                    for _, kb in kids:
                        for k, v in kb.items():
                            nb[k] = max(nb.get(k, 0), v)
                if not nr <= red or any(v > bc.get(k, 0) for k, v in nb.items()):
                    red = red | nr
                    bc = {**bc, **{k: max(v, bc.get(k, 0)) for k, v in nb.items()}}
                    changed = True
            info[cid] = (red, bc)
    return info


def choose(eg: SerializedEGraph, infos: dict, prof: Profile, spread: dict | None = None) -> dict[str, ENode]:
    """Best e-node per class under `prof`: Knuth's generalization of Dijkstra (a class is
    settled by its cheapest e-node whose children are settled, so the choice is acyclic
    whatever the costs). Tree cost, or with `prof.dag` a greedy DAG cost that counts each
    class below a node once. A reduction along an axis whose broadcast factor
    (`broadcast_analysis`) exceeds `prof.long_axis` is a second sequential pass over its
    operand and pays `prof.second_pass` per element: that is what makes the tile-local
    online forms cheaper than their row-wide originals."""
    spread = spread if spread is not None else broadcast_analysis(eg)
    rng = random.Random(prof.seed)
    best: dict[str, tuple[float, ENode]] = {}
    entries = []  # (class id, e-node, own cost)
    parents: dict[str, list[int]] = {}
    for cid, nodes in eg.classes.items():
        if cid not in infos:
            continue
        for e in nodes:
            if any(c not in infos for c in e.children) or e.op in prof.without:
                continue
            c = node_cost(e, infos[cid], infos, prof)
            if e.op in P.REDUCING_OPS and \
                    max(spread[ch][1].get(e.ints[0], 1) for ch in e.children) > prof.long_axis:
                c += prof.second_pass * (math.prod(infos[e.children[0]][0]) or 1)
            if e.op == "contract" and any(spread[ch][1].get(e.ints[0], 1) > 1 for ch in e.children):
                # an operand is a reduction result broadcast along the contracted axis: a scaled
                # sum (its factor belongs outside, `sum-factor`), not a product: dearer than the
                # sum of products, so extraction never ties between the two forms
                c += (math.prod(infos[e.children[0]][0]) or 1) + 2
            if prof.jitter:
                c *= math.exp(rng.uniform(-prof.jitter, prof.jitter))
            for ch in dict.fromkeys(e.children):
                parents.setdefault(ch, []).append(len(entries))
            entries.append((cid, e, c))
    waiting = [len(set(e.children)) for _, e, _ in entries]
    heap: list = []
    paid: dict[str, dict[str, float]] = {}  # dag mode: class -> own cost of every class below

    def push(i: int) -> None:
        cid, e, own = entries[i]
        below = None
        if prof.dag:
            kids = sorted(dict.fromkeys(e.children), key=lambda c: -len(paid[c]))
            below = dict(paid[kids[0]]) if kids else {}
            for c in kids[1:]:
                below.update(paid[c])
            total = math.fsum((own, *below.values()))   # exact: the same on every Python
        else:
            total = math.fsum((own, *(best[c][0] for c in e.children)))
        heapq.heappush(heap, (total, i, below))

    for i, w in enumerate(waiting):
        if w == 0:
            push(i)
    while heap:
        total, i, below = heapq.heappop(heap)
        cid, e, own = entries[i]
        if cid in best:
            continue
        best[cid] = (total, e)
        if prof.dag:
            below[cid] = own
            paid[cid] = below
        for p in parents.get(cid, ()):
            waiting[p] -= 1
            if waiting[p] == 0:
                push(p)
    return {cid: v[1] for cid, v in best.items()}


class CycleError(IRError):
    """The chosen e-nodes refer back to their own class (only possible after a manual swap)."""


def rebuild(eg: SerializedEGraph, choice: dict[str, ENode]) -> Graph:
    """The IR program that `choice` selects for the roots."""
    memo: dict[str, Node] = {}
    active: set[str] = set()

    def go(cid: str) -> Node:
        if cid in memo:
            return memo[cid]
        if cid in active:
            raise CycleError(f"class {cid} depends on itself")
        active.add(cid)
        e = choice[cid]
        if e.op == "inp":
            n = eg.tables.inputs[e.ints[0]]
        elif e.op == "lit":
            n = eg.tables.lits[e.ints[0]]
        elif e.op == "view":
            n = N.view(go(e.children[0]), eg.tables.views[e.ints[0]])
        else:
            n = build(e.op, [go(c) for c in e.children], list(e.ints), list(e.floats), list(e.strs))
        active.discard(cid)
        memo[cid] = n
        return n

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20000))
    try:
        outs = tuple(go(r) for r in eg.roots)
    finally:
        sys.setrecursionlimit(old)
    return Graph(eg.tables.inputs, outs)


def _reachable(eg: SerializedEGraph, choice: dict[str, ENode]) -> list[str]:
    order, seen, stack = [], set(), list(eg.roots)
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        order.append(c)
        stack.extend(choice[c].children)
    return order


def improve(eg: SerializedEGraph, choice: dict[str, ENode], cost: Callable[[Graph], float],
            evaluations: int = 200, on_better: Callable[[Graph], None] | None = None,
            deadline: float = math.inf, without: tuple[str, ...] = ()) -> dict[str, ENode]:
    """Hill-climb on the real (DAG) cost: swap one chosen class to another of its e-nodes
    (its new children keep their tree-cost choices; never an op in `without`) while that
    lowers `cost`. The tree cost counts a shared sub-program once per use; this step sees
    sharing. Bounded by the number of programs evaluated (so it ends in the same place on any
    machine); `deadline` is only an emergency stop."""
    current = cost(rebuild(eg, choice))
    improved, left = True, evaluations
    while improved and left > 0:
        improved = False
        for cid in _reachable(eg, choice):
            for e in eg.classes[cid]:
                if e is choice[cid] or e.op in without or any(c not in choice for c in e.children):
                    continue
                if left <= 0 or time.perf_counter() > deadline:
                    return choice
                left -= 1
                trial = dict(choice)
                trial[cid] = e
                try:
                    g = rebuild(eg, trial)
                except IRError:
                    continue
                c = cost(g)
                if c < current * (1 - 1e-9):
                    choice, current, improved = trial, c, True
                    if on_better:
                        on_better(g)
                    break
    return choice


def extract_candidates(eg: SerializedEGraph, k: int, profiles=PROFILES, random_rounds: int = 24,
                       cost: Callable[[Graph], float] | None = None, climb_evaluations: int = 200,
                       random_work: int | None = None, deadline: float | None = None) -> list[tuple[str, Graph]]:
    """Distinct programs (by structural hash), each labelled by how it was found: one per
    node-cost profile, seeded random perturbations of them, and, when `cost` is given, every
    step of a hill-climb on that cost from the first profiles' choices. Every part is bounded
    by counts, so the same e-graph gives the same programs on any machine; `deadline` is an
    emergency stop (past it only the first two profiles still run)."""
    infos = class_infos(eg)
    spread = broadcast_analysis(eg)
    out: list[tuple[str, Graph]] = []
    seen: set[str] = set()

    def add(label: str, g: Graph) -> None:
        h = g.structural_hash()
        if h not in seen:
            seen.add(h)
            out.append((label, g))

    deadline = deadline if deadline is not None else time.perf_counter() + 60.0
    late = lambda: time.perf_counter() > deadline
    # 1. one choice per profile (the first two whatever the clock says), then the same without
    # the online-contraction term: its static cost is low wherever it appears, but a target
    # that runs it as its definition may be faster with the e-graph's other forms of the same
    # softmax (tiled online loops, one-pass rows), so measurement must see those too
    base = []
    # extraction work is bounded in (extractions x e-nodes): each one visits every e-node
    rounds = None if random_work is None else random_work // max(1, eg.num_enodes)
    if any(e.op == "attend" for nodes in eg.classes.values() for e in nodes):
        profiles = tuple(profiles) + tuple(replace(p, name=f"{p.name}-plain", without=("attend",))
                                           for p in profiles)
    for n, prof in enumerate(profiles):
        if n >= 2 and (late() or (rounds is not None and n >= rounds)):
            break
        choice = choose(eg, infos, prof, spread)
        if any(r not in choice for r in eg.roots):
            continue
        try:
            g = rebuild(eg, choice)
        except IRError:
            continue
        add(prof.name, g)
        base.append((prof, choice, g))
    # 2. hill-climb on the real cost from the two best of them
    if cost is not None and base:
        ranked = sorted(base, key=lambda b: cost(b[2]))
        starts = [b for b in ranked if b[0].second_pass > 0][:1] + ranked[:1] + \
            [b for b in ranked if b[0].without and b[0].second_pass > 0][:1]     # (and one without the term)
        for prof, choice, _ in starts:
            steps: list[Graph] = []
            if late():
                break
            improve(eg, choice, cost, climb_evaluations, steps.append, deadline, prof.without)
            for g in steps[-3:]:           # the end point and the two steps before it
                add(f"{prof.name}+climb", g)
    # 3. seeded random perturbations for diversity
    random_rounds = min(random_rounds, max(4, 300_000 // max(1, eg.num_enodes)))
    if rounds is not None:
        random_rounds = min(random_rounds, max(0, rounds - len(profiles)))
    for i in range(random_rounds):
        if len(out) >= 3 * k or late():
            break
        p = profiles[i % len(profiles)]
        prof = replace(p, name=f"{p.name}~{i}", jitter=0.7, seed=i + 1)
        choice = choose(eg, infos, prof, spread)
        if any(r not in choice for r in eg.roots):
            continue
        try:
            add(prof.name, rebuild(eg, choice))
        except IRError:
            continue
    return out
