"""Regions: a big program cut into consecutive pieces that are searched, built and cached one
by one, and put back together.

The cuts go where the fewest computed values are live (a model's layer boundaries: the residual
stream plus whatever every layer reads, such as a mask). Inputs, constants and views are not
values of their own: each region that reads one gets its own copy (a view of another region's
result reads that result as an input). A region's inputs are named by position (`r0`, `r1`, …),
so the layers of a model, which differ only in which weights they read, are the same program:
`Region.key` is equal and one search serves them all.

    cut_points(graph)         -> positions in the compute-op order after which to cut
    split(graph)              -> Split (regions in order, where each region input comes from,
                                 where each program output is), or None when there is no cut
    compose(split, graphs, inputs) -> the whole program with each region replaced by a program
                                 of the same interface (the search's choice for it)
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ir import node as N
from ir.graph import Graph, toposort
from ir.node import Node
from ir.ops import COMPUTE, LEAF, Op
from ir.view import ShapeTracker, View

MIN_REGION_OPS = 24     # compute ops: smaller pieces cost more in per-search and per-call overhead


@dataclass(frozen=True)
class Source:
    """Where a region input's value comes from: program input `index` (region -1), or output
    `index` of an earlier region. `stop` > 0: the flat elements [start, stop) of that program
    input (one layer's slice of weights stacked over layers: the layers stay identical)."""
    region: int
    index: int
    start: int = 0
    stop: int = 0


@dataclass(frozen=True)
class Region:
    graph: Graph                    # inputs r0, r1, … in first-use order
    sources: tuple[Source, ...]     # one per input of `graph`
    key: str                        # structural hash: equal for identical regions


@dataclass(frozen=True)
class Split:
    regions: tuple[Region, ...]
    outputs: tuple[Source, ...]     # the program's outputs, in order

    def groups(self) -> dict[str, list[int]]:
        """Region indices by key, in order of first appearance."""
        out: dict[str, list[int]] = {}
        for i, r in enumerate(self.regions):
            out.setdefault(r.key, []).append(i)
        return out


def _base(n: Node) -> Node:
    """The value a view chain reads (a compute node, an input, a constant or an iota)."""
    while n.op == Op.VIEW:
        n = n.srcs[0]
    return n


def _compute_uses(order: list[Node]) -> dict[Node, list[Node]]:
    """For each compute node, the compute nodes that read it (directly or through views)."""
    uses: dict[Node, list[Node]] = {n: [] for n in order if n.op in COMPUTE}
    for n in order:
        if n.op in COMPUTE:
            for s in n.srcs:
                b = _base(s)
                if b.op in COMPUTE:
                    uses[b].append(n)
    return uses


def cut_points(graph: Graph, min_ops: int = MIN_REGION_OPS) -> list[int]:
    """Positions p in the compute-op order after which the program is cut: where no more
    computed values are live than anywhere near (a layer boundary), each piece at least
    `min_ops` long. Values that every layer reads (a mask made once, live across several
    cuts) are then left out of the count and the cuts chosen again: where such a value dies
    (in the last layer) the count drops, which would move that layer's cut."""
    nodes = graph.nodes
    return _cut_points(nodes, [n for n in nodes if n.op in COMPUTE], min_ops)


def _cut_points(nodes: list[Node], order: list[Node], min_ops: int) -> list[int]:
    n = len(order)
    if n < 2 * min_ops:
        return []
    pos = {x: i for i, x in enumerate(order)}
    uses = _compute_uses(nodes)
    last = [max((pos[u] for u in uses[x]), default=i) for i, x in enumerate(order)]
    cuts = _cuts(_live(last, range(n), n), min_ops)
    lasting = {i for i in range(n) if sum(1 for c in cuts if i <= c < last[i]) >= 2}
    if lasting:
        cuts = _cuts(_live(last, [i for i in range(n) if i not in lasting], n), min_ops)
    return cuts


def _live(last: list[int], counted, n: int) -> list[int]:
    """For each position p: how many of the `counted` values are made at or before p and read after it."""
    change = [0] * (n + 1)
    for i in counted:
        change[i] += 1
        change[last[i]] -= 1
    live, k = [], 0
    for p in range(n):
        k += change[p]
        live.append(k)
    return live


def _cuts(live: list[int], min_ops: int) -> list[int]:
    """Cut where the count is as low as anywhere within min_ops, at the last of a run of such
    places (after a residual add, not before it), pieces of at least min_ops."""
    n = len(live)

    def narrowest(p: int) -> bool:
        return live[p] == min(live[max(0, p - min_ops):p + min_ops + 1])
    cuts, start = [], 0
    for p in range(min_ops - 1, n - min_ops):
        if narrowest(p) and not (narrowest(p + 1) and live[p + 1] == live[p]) and p + 1 - start >= min_ops:
            cuts.append(p)
            start = p + 1
    return cuts


def split(graph: Graph, min_ops: int = MIN_REGION_OPS) -> Split | None:
    """`graph` cut into regions (see the module docstring); None if it has no cut or an output
    that no region computes (an input or a constant returned as it is)."""
    if any(_base(o).op not in COMPUTE for o in graph.outputs):
        return None
    nodes = graph.nodes
    order = [n for n in nodes if n.op in COMPUTE]
    cuts = _cut_points(nodes, order, min_ops)
    if not cuts:
        return None
    region_of: dict[Node, int] = {}
    r = 0
    for i, x in enumerate(order):
        region_of[x] = r
        if r < len(cuts) and i == cuts[r]:
            r += 1
    count = len(cuts) + 1
    # what each region must hand on: its values read by later regions, then the program's outputs
    exported: list[dict[Node, int]] = [{} for _ in range(count)]
    for x in order:
        for s in x.srcs:
            b = _base(s)
            if b.op in COMPUTE and region_of[b] != region_of[x]:
                exported[region_of[b]].setdefault(b, len(exported[region_of[b]]))
    for o in graph.outputs:
        exported[region_of[_base(o)]].setdefault(o, len(exported[region_of[_base(o)]]))
    program_inputs = {x: i for i, x in enumerate(graph.inputs)}
    members: list[list[Node]] = [[] for _ in range(count)]
    for x in order:
        members[region_of[x]].append(x)
    regions = []
    for r in range(count):
        regions.append(_region(r, members[r], exported[r], region_of, exported, program_inputs))
    outputs = tuple(Source(region_of[_base(o)], exported[region_of[_base(o)]][o]) for o in graph.outputs)
    return Split(tuple(regions), outputs)


def _region(r: int, members: list[Node], exports: dict[Node, int], region_of, exported, program_inputs) -> Region:
    """Region r as a program of its own: outside values become inputs, leaves and views are copied."""
    new: dict[Node, Node] = {}
    inputs: list[Node] = []
    sources: list[Source] = []

    def outside(x: Node, src: Source, shape=None) -> Node:
        k = len(inputs)
        inputs.append(N.input_(k, f"r{k}", x.shape if shape is None else shape, x.dtype))
        sources.append(src)
        return inputs[-1]

    def get(x: Node) -> Node:
        if x in new:
            return new[x]
        sliced = _input_slice(x)
        if sliced is not None:
            start, stop, st = sliced
            flat = outside(x, Source(-1, program_inputs[x.srcs[0]], start, stop), (stop - start,))
            y = N.view(flat, st)
        elif x.op == Op.INPUT:
            y = outside(x, Source(-1, program_inputs[x]))
        elif x.op in LEAF:
            y = x
        elif x.op in COMPUTE and region_of[x] != r:
            y = outside(x, Source(region_of[x], exported[region_of[x]][x]))
        else:
            y = Node(x.op, x.dtype, x.shape, tuple(get(s) for s in x.srcs), x.arg)
        new[x] = y
        return y

    for x in members:               # in order, so inputs are numbered by first use
        get(x)
    outs = [get(x) for x, _ in sorted(exports.items(), key=lambda kv: kv[1])]
    g = Graph(tuple(inputs), tuple(outs))
    return Region(g, tuple(sources), g.structural_hash())


def _input_slice(x: Node):
    """(start, stop, tracker on [start, stop)) for a view that reads only part of a program
    input: a run of its flat elements, which the region takes as its own 1-D input."""
    if x.op != Op.VIEW or x.srcs[0].op != Op.INPUT:
        return None
    v0 = x.arg.views[0]
    lo = hi = v0.offset
    for i, (n, st) in enumerate(zip(v0.shape, v0.strides)):
        b, e = v0.mask[i] if v0.mask is not None else (0, n)
        if e <= b:
            return None             # reads nothing: keep the view as it is
        lo += min(st * b, st * (e - 1))
        hi += max(st * b, st * (e - 1))
    lo, hi = max(lo, 0), min(hi + 1, x.srcs[0].numel)
    if lo == 0 and hi == x.srcs[0].numel:
        return None
    st = ShapeTracker((replace(v0, offset=v0.offset - lo),) + x.arg.views[1:], x.arg.fill)
    return lo, hi, st


def compose(s: Split, graphs: list[Graph], inputs: tuple[Node, ...]) -> Graph:
    """The whole program with region i replaced by graphs[i] (same interface as
    `s.regions[i].graph`); `inputs` are the original program's input nodes."""
    made: list[list[Node]] = []
    for r, g in zip(s.regions, graphs):
        new = {x: (_slice_of(inputs[src.index], src) if src.region < 0 else made[src.region][src.index])
               for src, x in zip(r.sources, g.inputs)}
        for x in toposort(g.outputs):       # in order: every source is rebuilt before its users
            if x in new:
                continue
            srcs = tuple(new[y] for y in x.srcs)
            if x.op == Op.VIEW and srcs[0].op == Op.VIEW and srcs[0] not in g.inputs:
                new[x] = _view_of_slice(srcs[0], x.arg)
            else:
                new[x] = x if x.op in LEAF else Node(x.op, x.dtype, x.shape, srcs, x.arg)
        made.append([new[o] for o in g.outputs])
    return Graph(tuple(inputs), tuple(made[o.region][o.index] for o in s.outputs))


def _slice_of(inp: Node, src: Source) -> Node:
    """Program input `inp` as the region input `src` reads it: whole, or a flat slice."""
    if src.stop <= 0:
        return inp
    return N.view(inp, ShapeTracker((View((src.stop - src.start,), (1,), src.start),)))


def _view_of_slice(sliced: Node, st: ShapeTracker) -> Node:
    """A view of a flat slice of an input as one view of the input (its offset moved)."""
    v0 = st.views[0]
    return N.view(sliced.srcs[0], replace(st, views=(replace(v0, offset=v0.offset + sliced.arg.views[0].offset),)
                                                   + st.views[1:]))
