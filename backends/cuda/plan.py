"""Partition a primitive Graph into CUDA kernel steps.

Which values reach device memory: graph outputs, CONTIGUOUS nodes, matrix products (and their
operands), and any value read through an expanding view (recomputing it per broadcast copy
would multiply its cost); everything else is fused into the kernel that consumes it. Each
materialized value becomes one step, by the first template that fits:

  attention   an online-contraction term (ATTEND, match.attention_term), f16/bf16 operands
              -> flash kernel
              (tensor cores, running (m, l, acc) over key tiles); a term the kernel cannot
              take runs as its primitive definition (`prepare`)
  gemm        SUM(MUL(a, b)) over one axis -> tensor-core GEMM (f16/bf16, aligned) or SIMT
              GEMM; an elementwise consumer (bias, activation) is fused as its epilogue
  row         reductions over the last axis plus elementwise work on those rows (softmax,
              layernorm, rmsnorm) -> one block-per-row kernel with warp-shuffle reductions
  elementwise no reductions -> vectorized one-thread-per-VEC-elements kernel
  generic     anything else -> one thread per output element, reductions as loops
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ir.graph import Graph
from ir.node import Node
from ir.ops import ELEMENTWISE, Op
from ir.dtypes import HALVES, DType
from backends.cuda.match import (FlashMatch, GemmMatch, attention_term, contraction_axes, is_pure_reshape,
                                 is_row_broadcast)


def is_lossless_cast(n: Node) -> bool:
    return n.op == Op.CAST and n.dtype == DType.f32 and n.srcs[0].dtype in HALVES


def base_of(x: Node, stop=frozenset()) -> Node:
    """x with views and lossless up-casts peeled off: the value that must sit in memory
    (`stop`: values that sit in memory as they are, e.g. a flash output stored through a view)."""
    while (x.op == Op.VIEW or is_lossless_cast(x)) and x not in stop:
        x = x.srcs[0]
    return x


def is_buffer_read(n: Node, materialized: set[Node]) -> bool:
    """n is a buffer read through views and lossless casts only."""
    b = base_of(n, materialized)
    return b.op == Op.INPUT or b in materialized


@dataclass
class Step:
    kind: str                       # attention | gemm | row | elementwise | generic | copy
    output: Node                    # the value this step writes (contiguous, row-major)
    inputs: list[Node]              # buffers it reads: graph inputs or earlier steps' outputs
    gemm: GemmMatch | None = None   # gemm: the product (its SUM may be fused away into `output`)
    attention: FlashMatch | None = None
    reductions: list[Node] = field(default_factory=list)   # row: last-axis reductions, in order
    store: Node | None = None       # the graph output whose buffer holds `output` (a reshape of it)

    def describe(self) -> str:
        also = f" (stored as output {list(self.store.shape)})" if self.store is not None else ""
        return f"{self.kind} -> {self.output.dtype.value}{list(self.output.shape)}{also}"


def tree(root: Node, materialized: set[Node], stop: frozenset = frozenset()) -> list[Node]:
    """Nodes computed inside root's kernel (root first), stopping at buffers and leaves."""
    out, seen, stack = [], set(), [root]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        out.append(n)
        for s in n.srcs:
            if s not in materialized and s.op != Op.INPUT and s not in stop:
                stack.append(s)
    return out


def reads(nodes: list[Node], materialized: set[Node], operands: tuple[Node, ...] = ()) -> list[Node]:
    """Buffers (graph inputs and materialized nodes) read by the given kernel nodes and product
    operands (an operand is itself a buffer or a view of one), in a stable order."""
    found: dict[Node, None] = {}
    inside = set(nodes)
    for side in operands:
        for n in tree(side, materialized):
            for s in n.srcs:
                if s.op == Op.INPUT or s in materialized:
                    found[s] = None
        if side.op == Op.INPUT or side in materialized:
            found[side] = None
    for n in nodes:
        for s in n.srcs:
            if (s.op == Op.INPUT or s in materialized) and s not in inside:
                found[s] = None
    return list(found)


def _row_shape(root: Node, nodes: list[Node], materialized: set[Node]) -> tuple | None:
    """The row shape S if root's kernel is a valid row region, else None."""
    reds = [n for n in nodes if n.op in (Op.SUM, Op.MAX)]
    if not reds:
        return None
    S = reds[0].srcs[0].shape
    if not S or S[-1] == 1:       # rows of one element: nothing to reduce across threads
        return None
    P = S[:-1] + (1,)
    last = (len(S) - 1,)
    for r in reds:
        if r.srcs[0].shape != S or r.arg != last:
            return None
    if root.shape not in (S, P):
        return None
    for n in nodes:
        if n.op in (Op.SUM, Op.MAX, Op.CONST) or (n is not root and is_buffer_read(n, materialized)):
            continue
        if n.op == Op.VIEW:
            src = n.srcs[0]
            if n.shape == S and is_row_broadcast(n) and src.shape == P:
                continue
            return None
        if n.op in ELEMENTWISE or n.op == Op.CONTIGUOUS:
            if n.shape not in (S, P):
                return None
            continue
        return None
    return S


def mask_access(fm: FlashMatch):
    """The additive mask as a strided read over the scores' axes (.., q, key), or None (no
    mask, or one the kernel cannot read: a float buffer through views and up-casts only)."""
    from backends.cuda.resolve import resolve
    if fm.mask is None:
        return None
    base = base_of(fm.mask)
    a = resolve(fm.mask, lambda n, base=base: n is base)
    if a is None or not a.dtype.is_float:
        return None
    return a


def flash_access(fm: FlashMatch):
    """(q, k, v) strided half-precision reads for the flash kernel, or None if it cannot take
    them. q, k index (.., q, d, key) like Q @ K^T's operands; v (.., q, key, d)."""
    from backends.cuda.resolve import resolve
    if fm.mask is not None and mask_access(fm) is None:
        return None
    acc = []
    for side in (fm.qk.a, fm.qk.b, fm.v):
        base = base_of(side)
        a = resolve(side, lambda n, base=base: n is base)
        if a is None or a.dtype not in HALVES:
            return None
        acc.append(a)
    q, k, v = acc
    nd = len(fm.qk.reduce.shape)
    # q, k: head dim (the QK reduction axis) contiguous; v: output dim contiguous
    if q.dtype != k.dtype or k.dtype != v.dtype or q.strides[nd - 2] != 1 or k.strides[nd - 2] != 1 \
            or v.strides[nd - 1] != 1:
        return None
    d, dv = fm.qk.mul.shape[nd - 2], fm.v.shape[-1]
    if d % 16 or dv % 16 or d > 128 or dv > 128:
        return None
    # 16-byte cp.async rows: every row start 8-element aligned
    rows = [q.offset, k.offset, v.offset, q.strides[nd - 3], k.strides[nd - 1], v.strides[nd - 2]]
    rows += [a.strides[i] for a in (q, k, v) for i in range(nd - 3)]
    if any(x % 8 for x in rows):
        return None
    return q, k, v


def is_layout_view(v: Node) -> bool:
    """v places every element of its source once, in another order (permutes and reshapes,
    nothing dropped, repeated or padded): each of its views addresses every element of the
    one before exactly once."""
    if v.op != Op.VIEW or v.numel != v.srcs[0].numel:
        return False
    for w in v.arg.views:
        if w.offset != 0 or w.mask is not None:
            return False
        # every address 0..numel-1 once: by stride, each is the product of the sizes below it
        step = 1
        for n, st in sorted((st, n) for n, st in zip(w.shape, w.strides) if n > 1):
            if n != step:
                return False
            step *= st
        if step != v.numel:
            return False
    return True


def _flash_output(out: Node, consumers, outputs) -> Node:
    """The node the flash kernel writes: out, or its single consumer chain of reshapes,
    layout views (heads moved back beside each other: the kernel stores in any order) and
    float casts (it stores any float dtype), stopping before an exact up-cast (a product reads
    through those)."""
    while out not in outputs and len(consumers[out]) == 1:
        c = consumers[out][0]
        if (c.op == Op.VIEW and is_layout_view(c)) or (c.op == Op.CAST and c.dtype.is_float and not is_lossless_cast(c)):
            out = c
        else:
            break
    return out


def flash_output_strides(start: Node, out: Node) -> tuple[int, ...]:
    """Element strides in `out`'s buffer of the axes of `start` (an attend term; `out` the
    node `_flash_output` chose): the views between are applied to the element numbers."""
    import numpy as np
    from ir.interpreter import apply_tracker
    chain, n = [], out
    while n is not start:
        if n.op == Op.VIEW:
            chain.append(n.arg)
        n = n.srcs[0]
    ids = np.arange(start.numel, dtype=np.int64).reshape(start.shape)
    for st in reversed(chain):
        ids = apply_tracker(st, ids)
    where = np.empty(start.numel, np.int64)
    where[ids.reshape(-1)] = np.arange(start.numel)      # source element -> its place in out
    where = where.reshape(start.shape)
    strides = tuple(int(where[tuple(1 if a == i else 0 for a in range(len(start.shape)))]) if start.shape[i] > 1 else 0
                    for i in range(len(start.shape)))
    grid = sum(np.arange(n_).reshape([-1 if a == i else 1 for a in range(len(start.shape))]) * st
               for i, (n_, st) in enumerate(zip(start.shape, strides)))
    assert np.array_equal(where, np.broadcast_to(grid, start.shape)), "a layout view that is not strided"
    return strides


def _chain(start: Node, end: Node) -> set[Node]:
    """Nodes from end down its first sources to start (the reshape/cast chain _flash_output took)."""
    out, n = set(), end
    while n is not start:
        out.add(n)
        n = n.srcs[0]
    return out | {start}


def _pads_only(n: Node, src: Node) -> bool:
    """A view that only pads (and slices, permutes, reshapes) its source: no element is read
    twice, so computing the source inside the reading kernel costs nothing extra (the halves
    of RoPE's rotate_half, padded into place by cat)."""
    for v in n.arg.views:
        region = v.shape if v.mask is None else tuple(hi - lo for lo, hi in v.mask)
        if any(st == 0 and sz > 1 for st, sz in zip(v.strides, region)):
            return False
        if v.mask is not None and any(lo < 0 or hi > sz for (lo, hi), sz in zip(v.mask, v.shape)):
            return False
        if _prod(region) > src.numel:
            return False
    return True


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _epilogue_end(r: Node, consumers, outputs, M: set[Node], order: dict[Node, int], limit: int = 48) -> Node:
    """The last value of r's elementwise consumers that a product's epilogue can compute and
    store instead of r: past r's reshape, a region of same-shape elementwise ops and casts
    (other operands: any kernel-computable values) whose values are read only inside it, up to
    its one exit e (a chain, or a value read several times that joins again: SiLU's x *
    sigmoid(x) in f32 between casts from and to f16). e is no value another kernel writes (a
    gated MLP's product of its two projections stays the kernel that reads the finished gate),
    no up-cast and no wider than the value the program first takes from the product; r itself
    when there is no such e."""
    if r in outputs or len(consumers[r]) != 1:
        return r
    v = consumers[r][0]
    if not (v.op == Op.VIEW and is_pure_reshape(v)) or v in M or v in outputs:
        return r
    region, stack = {v}, [v]
    while stack and len(region) < limit:
        for c in consumers[stack.pop()]:
            if c not in region and c not in M and c.op != Op.VIEW and c.op in ELEMENTWISE and c.shape == v.shape:
                region.add(c)
                stack.append(c)
    first = consumers[v][0] if len(consumers[v]) == 1 else v
    width = (first if first.op == Op.CAST else r).dtype.itemsize
    best = r
    for e in sorted(region - {v}, key=order.__getitem__):
        if is_lossless_cast(e) or e.dtype.itemsize > width:
            continue
        inside, todo = {e}, [e]              # e's sources that depend on r's value, back to v
        while todo:
            for s in todo.pop().srcs:
                if s in region and s not in inside:
                    inside.add(s)
                    todo.append(s)
        if v in inside and all(x not in outputs and all(c in inside for c in consumers[x])
                               for x in inside if x is not e):
            best = e
    return best


def _keeps_the_element(o: Node, v: Node, t) -> bool:
    """Every node between `o` and `v` is elementwise or a pure reshape, so o's element at a flat
    index reads v at that same index: the epilogue takes the accumulator there as v's value. (A
    transpose of a square product passed the shape checks and was stored untransposed; fuzz
    seed 342715, H200)"""
    inside, reach = set(t), {}

    def reaches(n: Node) -> bool:
        if n not in reach:
            reach[n] = n is v or any(reaches(s) for s in n.srcs if s in inside)
        return reach[n]

    reaches(o)
    for n in t:
        if n is not v and reach.get(n, False) and n.op == Op.VIEW and not is_pure_reshape(n):
            return False
    return True


def _fuse_epilogues(nodes, M, gemms, attns, consumers, outputs, operands) -> dict[Node, Node]:
    """Epilogue output -> the product it absorbs, for elementwise kernels (no reductions, one
    shape) reading a product through a pure reshape that no other kernel reads (and that is
    not itself an operand another product reads from memory)."""
    trees = {o: tree(o, M) for o in M if o not in gemms and o not in attns}
    in_trees: dict[Node, int] = {}
    for t in trees.values():
        for n in t:
            in_trees[n] = in_trees.get(n, 0) + 1
    order = {n: i for i, n in enumerate(nodes)}
    fused: dict[Node, Node] = {}
    for o, t in trees.items():
        if any(n.op in (Op.SUM, Op.MAX) for n in t):
            continue
        if any(n.shape != o.shape for n in t if n.op in ELEMENTWISE):
            continue
        cands = sorted((n for n in t if n.op == Op.VIEW and n.srcs[0] in gemms), key=lambda v: -order[v.srcs[0]])
        for v in cands:
            r = v.srcs[0]
            if (r in outputs or r in operands or len(consumers[r]) != 1 or not is_pure_reshape(v) or v.shape != o.shape
                    or in_trees.get(v, 0) != 1 or r in fused.values() or not _keeps_the_element(o, v, t)):
                continue
            fused[o] = r
            break
    return fused


# ops and dtypes the templates have no form for: a program holding one is rendered from the
# kernel IR (backends/cuda/kir.py), whose Iota and Gather values and C types cover them
KERNEL_IR_ONLY = frozenset({Op.IOTA, Op.GATHER})
TEMPLATE_DTYPES = frozenset({DType.f32, DType.f16, DType.bf16, DType.i32, DType.bool})


def needs_kernel_ir(graph: Graph) -> bool:
    return any(n.op in KERNEL_IR_ONLY or n.dtype not in TEMPLATE_DTYPES for n in graph.nodes)


def expand_contractions(graph: Graph) -> tuple[Graph, frozenset]:
    """`graph` with each contraction term (CONTRACT) written as the SUM(MUL) of f32 operands
    the templates read, and the set of those SUM nodes: the products the plan runs as GEMMs
    (a sum of products that is not a contraction term stays a reduction). Nodes are
    hash-consed, so expanding the same graph twice gives the same nodes (the executable's
    graph and the plan's steps agree)."""
    from ir import node as N
    if not any(n.op == Op.CONTRACT for n in graph.nodes):
        return graph, frozenset()
    new: dict[Node, Node] = {}
    products = set()
    for n in graph.nodes:
        srcs = tuple(new[s] for s in n.srcs)
        if n.op == Op.CONTRACT:
            a, b = (s if s.dtype == DType.f32 else N.cast(s, DType.f32) for s in srcs)
            r = N.reduce(Op.SUM, N.binary(Op.MUL, a, b), n.arg)
            products.add(r)
            new[n] = r if n.dtype == DType.f32 else N.cast(r, n.dtype)
        else:
            new[n] = n if srcs == n.srcs else Node(n.op, n.dtype, n.shape, srcs, n.arg)
    return Graph(graph.inputs, tuple(new[o] for o in graph.outputs)), frozenset(products)


def _consumers(graph: Graph) -> dict[Node, list[Node]]:
    consumers: dict[Node, list[Node]] = {n: [] for n in graph.nodes}
    for n in graph.nodes:
        for s in n.srcs:
            consumers[s].append(n)
    return consumers


def _flash_step(n: Node, products, consumers, outputs) -> tuple[Node, FlashMatch] | None:
    """(the node the flash kernel writes, its match) for an attention at n, or None: n is not
    one, the kernel cannot read its operands, or a value it computes inside is read elsewhere."""
    fm = attention_term(n, products)          # (None unless n is an attend term)
    if fm is None or flash_access(fm) is None:
        return None
    o = _flash_output(n, consumers, outputs)
    inside = (fm.internal | _chain(n, o)) - {o}
    ok = all(c in inside or c is o for x in inside for c in consumers.get(x, ()))
    if not ok or inside & outputs:
        return None
    return o, replace(fm, internal=frozenset(inside))


def prepare(graph: Graph) -> tuple[Graph, frozenset]:
    """The graph the plan runs and the products it runs as GEMMs: contraction terms expanded
    (`expand_contractions`), and each online-contraction term the flash kernel cannot take
    written as its primitive definition (ir.terms). The executable's launches name its nodes."""
    from ir.terms import expand_terms
    graph, products = expand_contractions(graph)
    while True:          # (a term's definition holds a contraction term: expanded on the next round)
        consumers, outputs = _consumers(graph), set(graph.outputs)
        bad = [n for n in graph.nodes if n.op == Op.ATTEND and _flash_step(n, products, consumers, outputs) is None]
        if not bad:
            return graph, products
        graph, more = expand_contractions(expand_terms(graph, lambda n: n is bad[0]))
        products = products | more


def plan(graph: Graph) -> list[Step]:
    """The steps of `graph` (as `prepare` writes it)."""
    if needs_kernel_ir(graph):
        raise ValueError("the CUDA templates cannot plan iota, gather or the dtypes f64, i64, i8, u8: "
                         "use Schedule(lowering='kernel_ir')")
    graph, products = prepare(graph)
    nodes = graph.nodes
    consumers = _consumers(graph)
    outputs = set(graph.outputs)

    gemms: dict[Node, GemmMatch] = {}
    for n in nodes:
        g = contraction_axes(n) if n in products else None
        if g is not None:
            gemms[n] = g
    attns: dict[Node, FlashMatch] = {}
    for n in nodes:
        found = _flash_step(n, products, consumers, outputs)
        if found is not None:
            attns[found[0]] = found[1]
    internal = frozenset().union(*(a.internal for a in attns.values())) if attns else frozenset()

    M: set[Node] = set()
    for o in graph.outputs:
        if o.op != Op.INPUT:          # an output that is an input is copied by the executable
            M.add(o)
    for n in nodes:
        if n in internal:
            continue
        if n.op == Op.CONTIGUOUS or n in gemms or n in attns:
            M.add(n)
    # operands of products are read from memory, as they are (never an epilogue's output)
    operands: set[Node] = set()
    for r, g in gemms.items():
        if r in internal or r in attns:
            continue
        for side in (g.a, g.b):
            src = base_of(side, attns.keys())
            if src.op not in (Op.INPUT, Op.CONST):
                operands.add(src)
    for r, a in attns.items():
        for side in (a.qk.a, a.qk.b, a.v) + ((a.mask,) if a.mask is not None else ()):
            src = base_of(side, attns.keys())
            if src.op not in (Op.INPUT, Op.CONST):
                operands.add(src)
    M |= operands
    # values read through an expanding view (other than a per-row broadcast) are materialized
    for n in nodes:
        if n.op == Op.VIEW and n not in internal:
            src = base_of(n.srcs[0], attns.keys())
            if src.op in (Op.INPUT, Op.CONST):
                continue
            if n.numel > src.numel and not is_row_broadcast(n) and not _pads_only(n, src):
                M.add(src)
            if src.op in (Op.SUM, Op.MAX) and not is_row_broadcast(n):
                M.add(src)
    # reductions that are not over the last axis get their own kernel
    for n in nodes:
        if n.op in (Op.SUM, Op.MAX) and n not in internal and n.arg != (len(n.shape) - 1,):
            M.add(n)

    # fixed point: a kernel whose inner reductions do not form a row region gets them materialized
    changed = True
    while changed:
        changed = False
        for o in [n for n in nodes if n in M]:
            if o in gemms or o in attns:
                continue
            t = tree(o, M)
            inner = [n for n in t if n.op in (Op.SUM, Op.MAX) and n is not o]
            if inner and _row_shape(o, t, M) is None:
                M.update(inner)
                changed = True

    # epilogue fusion: an elementwise kernel reading a product through a reshape takes that
    # product as its epilogue (with several, the last one computed; the others are buffers).
    # A product no kernel can take this way (RoPE reads its output twice, once shifted; a
    # residual sum is read by a norm and by the next residual) gets the end of its
    # elementwise consumer chain as its epilogue output instead of writing the f32 sum
    fused = _fuse_epilogues(nodes, M, gemms, attns, consumers, outputs, operands)
    order = {n: i for i, n in enumerate(nodes)}
    ends = set()
    for r in gemms:
        if r in internal or r in attns or r not in M or r in fused.values() or r in operands:
            continue
        end = _epilogue_end(r, consumers, outputs, M, order)
        if end is not r and end not in M and not any(x.op in (Op.SUM, Op.MAX) for x in tree(end, M | {r})):
            ends.add(end)
    if ends:
        M |= ends
        fused = _fuse_epilogues(nodes, M, gemms, attns, consumers, outputs, operands)
    for r in fused.values():
        M.discard(r)

    steps: list[Step] = []
    for n in nodes:
        if n not in M:
            continue
        if n in attns:
            a = attns[n]
            sides = (a.qk.a, a.qk.b, a.v) + tuple(x for x in (a.mask, a.keep) if x is not None)
            steps.append(Step("attention", n, reads([], M, sides), attention=a))
        elif n in gemms:
            g = gemms[n]
            steps.append(Step("gemm", n, reads([], M, (g.a, g.b)), gemm=g))
        elif n in fused:
            g = gemms[fused[n]]
            t = tree(n, M, stop=frozenset({fused[n]}))
            ins = reads([x for x in t if x is not fused[n]], M, (g.a, g.b))
            steps.append(Step("gemm", n, ins, gemm=g))
        else:
            t = tree(n, M)
            ins = reads(t, M)
            reds = [x for x in reversed(t) if x.op in (Op.SUM, Op.MAX)]
            if reds and _row_shape(n, t, M) is not None:
                order = [x for x in nodes if x in set(reds)]
                steps.append(Step("row", n, ins, reductions=order))
            elif reds:
                steps.append(Step("generic", n, ins))
            else:
                steps.append(Step("elementwise", n, ins))
    return _store_reshaped_outputs(steps, graph)


def _store_reshaped_outputs(steps: list[Step], graph: Graph) -> list[Step]:
    """A graph output that only reshapes a value another step writes (a convolution's
    (n, o, h*w) product returned as (n, o, h, w)) would be a copy kernel of its own: instead the
    value's step writes into the output's buffer, whose bytes are the same, and the copy goes.
    Not for a value that is itself an output, nor for an output listed twice (each output
    needs a buffer of its own when the caller's arrays receive them)."""
    by_output = {s.output: s for s in steps}
    outputs = graph.outputs
    taken: dict[Node, Node] = {}
    for o in outputs:
        if not is_pure_reshape(o) or outputs.count(o) > 1 or o.numel == 0:
            continue
        src = o.srcs[0]
        step = by_output.get(o)
        if src in by_output and src not in outputs and src not in taken and src.dtype == o.dtype \
                and step is not None and step.kind == "elementwise" and step.inputs == [src]:
            taken[src] = o
    if not taken:
        return steps
    return [replace(s, store=taken[s.output]) if s.output in taken else s
            for s in steps if s.output not in set(taken.values())]
