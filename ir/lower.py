"""Lower a primitive `Graph` to the kernel IR (`ir.kernel.KernelProgram`).

Two decisions: which nodes are materialized in buffers (the partition into kernels), and how
each kernel computes its output (the loop nest with inlined producers).

Partitioning starts from the graph outputs and CONTIGUOUS nodes, inlines everything else into
its consumers, then repeats until no inlined node is computed more often than it has elements
in a way that costs real work:
  - a reduction evaluated more times than it has elements is materialized (for example, the
    scores of attention, read by a max, a sum and the output);
  - an elementwise subtree with transcendental work (weight >= 4) evaluated at least four times
    per element is materialized (for example, a GELU read through a broadcast by a matmul);
  - a padded (masked) read of something that is not a buffer materializes that thing, and so
    does a gather (its loads are at positions computed from data);
  - a whole-tensor reduction feeding a kernel with output axes gets its own scalar kernel
    (otherwise every parallel chunk would recompute it).
  - a second full-depth product in one kernel that the last does not read gets its own kernel
    (a contraction has one accumulator: SwiGLU's gate product is read by the up product's epilogue);
  - straight-line elementwise work deeper than MAX_DEPTH ops is split (all splits in one round).
Before the fix-point, each reduction's region down to the next reductions is judged on its own
(`_reductions_materialized_by_level`), so partitioning is linear in the program's depth.
A reduction whose result depends only on a kernel's outer output axes becomes a `Let` at that
depth, so softmax, layernorm and rmsnorm each become one kernel per row: the row reductions are
computed once per row, then the elementwise epilogue writes the row.
"""
from __future__ import annotations

import math
from collections import defaultdict

from ir.dtypes import DType
from ir.graph import Graph
from ir.online import fuse_online
from ir.kernel import (Bound, Buffer, Compute, Const, Gather, Iota, Kernel, KernelProgram, Let, Lin, Load, Online, Reduce,
                       Ref, Store, Value, Var, as_lin, bound, children, floordiv, mod, value_vars, walk)
from ir.interpreter import typed_fill
from ir.node import Node, is_pure_reshape
from ir.ops import ELEMENTWISE, REDUCING, Op

# work per element of an op, for deciding whether recomputing it is worth a buffer
_OP_WEIGHT = {Op.EXP2: 4, Op.LOG2: 4, Op.SIN: 4, Op.SQRT: 4, Op.RECIP: 4}
EXPENSIVE = 4          # an inlined subtree at least this heavy is not recomputed per broadcast...
RECOMPUTE_FACTOR = 4   # ...this many times per element (softmax's exp, recomputed twice, stays fused)
MAX_ROUNDS = 200
PRODUCT_MIN_EXTENT = 16
MAX_DEPTH = 256          # elementwise ops nested in one kernel's value at most (see _note_depth)  # a full-depth sum at least this long counts as a product (see build)

# An index is ("flat", Lin) into a node's contiguous layout or ("multi", (Lin per axis)).
Index = tuple


def row_strides(shape) -> tuple[int, ...]:
    """Contiguous element strides (size-1 axes keep their true stride, they are never used)."""
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def to_multi(shape, idx: Index) -> tuple[Lin, ...]:
    if idx[0] == "multi":
        return idx[1]
    flat = idx[1]
    return tuple(Lin() if s == 1 else mod(floordiv(flat, st), s) for s, st in zip(shape, row_strides(shape)))


def to_flat(shape, idx: Index) -> Lin:
    if idx[0] == "flat":
        return idx[1]
    out = Lin()
    for i, st in zip(idx[1], row_strides(shape)):
        out = out + i * st
    return out


def view_index(st, cur: tuple[Lin, ...]) -> tuple[Lin, list[Bound]] | None:
    """(flat offset into the source's row-major layout, the bounds that must hold for the
    element to be read rather than filled) of a ShapeTracker at multi-index `cur`; None where
    no index is valid. Views apply last to first, each flat offset unflattened into the shape
    of the view below (and simplified by the ranges of the indices)."""
    valid = []
    flat = Lin()
    for k in range(len(st.views) - 1, -1, -1):
        v = st.views[k]
        if v.mask is not None:
            for i, (lo, hi) in zip(cur, v.mask):
                b = bound(i, lo, hi)
                if b is False:
                    return None
                if b is not True:
                    valid.append(b)
        flat = Lin(const=v.offset)
        for i, s in zip(cur, v.strides):
            flat = flat + i * s
        if k > 0:
            cur = to_multi(st.views[k - 1].shape, ("flat", flat))
    return flat, valid


def _fill_value(fill: float, dtype):
    if dtype.is_float:
        return float(fill)
    return typed_fill(fill, dtype.np)     # integers: +-inf saturate to the type's range, NaN is 0


class _KernelBuilder:
    """Builds one kernel: the value of `root` at every index of its shape."""

    def __init__(self, name: str, root: Node, buffers: dict[Node, str], needs: set[Node]):
        self.name, self.root, self.buffers, self.needs = name, root, buffers, needs
        self.memo: dict[tuple, Value] = {}
        self.origin: dict[Value, Node] = {}
        self.lets: list[Let] = []
        self.let_vars: dict[str, set[Var]] = {}
        self.let_of: dict[Value, Ref] = {}
        self.counter = 0
        self.axes = tuple(Var(f"i{a}", s) for a, s in enumerate(root.shape) if s != 1)
        self.axis_pos = {v: p for p, v in enumerate(self.axes)}
        self.online_tiles: set[Node] = set()   # tile maxes computed inside an Online loop
        self.depth: dict[Value, int] = {}      # elementwise ops nested in a value (see _note_depth)
        self.splits: set[Node] = set()         # nodes past that depth: materialized all at once

    def build(self, out_buffer: str) -> Kernel:
        it = iter(self.axes)
        idx = tuple(Lin() if s == 1 else as_lin(next(it)) for s in self.root.shape)
        value = self.value(self.root, ("multi", idx), root=True)
        store = Store(out_buffer, to_flat(self.root.shape, ("multi", idx)), value)
        if self.axes:
            # a whole-tensor reduction (depth 0) inside a kernel with a parallel loop would be
            # recomputed by every chunk: give it its own (scalar) kernel instead
            # (unless it is the kernel's own node, e.g. a sum over a broadcast axis: stored per element)
            self.needs |= {self.origin[l.value] for l in self.lets if l.depth == 0 and l.value in self.origin
                           and self.origin[l.value] is not self.root}
            # a contraction kernel has one accumulator per output element: a second product at
            # full depth (SwiGLU's silu(x @ w_gate) * (x @ w_up)) gets its own kernel, and the
            # last becomes the kernel's product with the first read as its epilogue's operand
            products = [l for l in self.lets if l.depth == len(self.axes) and isinstance(l.value, Reduce)
                        and l.value.contraction and l.value in self.origin
                        and math.prod(v.extent for v in l.value.vars) >= PRODUCT_MIN_EXTENT]
            last = products[-1].value if products else None
            used_by_last = {x.name for x in walk(last) if isinstance(x, Ref)} if last is not None else set()
            self.needs |= {self.origin[l.value] for l in products[:-1]
                           if self.origin[l.value] is not self.root and l.name not in used_by_last}
        before = {l.name: l for l in self.lets}
        self.lets, tiles, runs = fuse_online(self.lets, self.axes)
        for run, name in runs.items():        # a separate running max has its max's variables
            self.let_vars[run] = self.let_vars[name]
        # an online loop whose tile is itself a product that the kernel computes again outside
        # the loop (a one-pass softmax of q @ k^T with the scale moved into an operand: the
        # store recomputes exp(s - m)) would compute every dot product twice with no product
        # kernel: the product gets its own kernel. (Computed only inside the loop, as in the
        # deferred-normalization form, it stays there: scores never reach memory.)
        tracked = {runs.get(l.name, l.name) for l in self.lets if isinstance(l, Online)}   # their maxes
        outside = [store.value] + [l.value for l in self.lets if not isinstance(l, Online) and l.name not in tracked]
        again = {self.origin[x] for v in outside for x in walk(v)
                 if isinstance(x, Reduce) and x.contraction and x in self.origin}
        for l in self.lets:
            if isinstance(l, Online):
                body = before[runs.get(l.name, l.name)].value.body
                node = self.origin.get(body) if isinstance(body, Reduce) and body.contraction else None
                if node is not None and node is not self.root and node in again \
                        and math.prod(v.extent for v in body.vars) >= PRODUCT_MIN_EXTENT:
                    self.needs.add(node)
        self.online_tiles = {self.origin[t] for t in tiles if t in self.origin}
        return Kernel(self.name, self.axes, tuple(self.lets), (store,))

    # --- values -----------------------------------------------------------------------------
    def value(self, n: Node, idx: Index, root: bool = False) -> Value:
        """The value of node n at idx. Sub-values are requested by `_value` generators (a yield of
        (node, index)) and built with an explicit stack, so program depth is not limited by Python's
        recursion limit (a chain of 10,000 ops lowers)."""
        key = self._key(n, idx, root)
        if key in self.memo:
            return self.memo[key]
        stack = [(key, self._value(n, idx, root))]
        sent = None
        while stack:
            key, gen = stack[-1]
            try:
                child, child_idx = gen.send(sent)
            except StopIteration as done:
                stack.pop()
                sent = self.memo[key] = done.value
                self.origin.setdefault(sent, key[0])
                self._note_depth(sent, key[0])
                continue
            ckey = self._key(child, child_idx, False)
            if ckey in self.memo:
                sent = self.memo[ckey]
            else:
                stack.append((ckey, self._value(child, child_idx, False)))
                sent = None
        return self.memo[self._key(n, idx, root)]

    def _note_depth(self, v: Value, n: Node) -> None:
        """Track how deep elementwise work nests; a node past MAX_DEPTH is materialized (LLVM's
        optimizer time grows faster than linearly with one kernel's straight-line code: a
        10,000-op chain in one kernel took minutes to compile)."""
        if isinstance(v, Compute):
            d = 1 + max((self.depth.get(c, 0) for c in v.srcs), default=0)
            if d > MAX_DEPTH and n is not self.root and n.op in ELEMENTWISE:
                self.splits.add(n)
                d = 0
            self.depth[v] = d

    @staticmethod
    def _key(n: Node, idx: Index, root: bool) -> tuple:
        return (n, to_flat(n.shape, idx), root)   # one canonical key per element, however addressed

    def _value(self, n: Node, idx: Index, root: bool):
        """A generator: yields the (node, index) pairs whose values it needs, returns its value."""
        if n in self.buffers and not root:
            return Load(self.buffers[n], n.dtype, to_flat(n.shape, idx))
        if n.op == Op.CONST:
            return Const(n.arg, n.dtype)
        if n.op == Op.IOTA:
            return Iota(to_flat(n.shape, idx), n.dtype)
        if n.op == Op.GATHER:
            return (yield from self._gather(n, idx))
        if n.op == Op.VIEW:
            return (yield from self._view(n, idx))
        if n.op == Op.CONTIGUOUS:
            return (yield n.srcs[0], idx)
        if n.op in ELEMENTWISE:
            srcs = []
            for s in n.srcs:
                srcs.append((yield s, idx))
            return Compute(n.op, n.dtype, tuple(srcs))
        if n.op in REDUCING:
            return (yield from self._reduce(n, idx))
        raise ValueError(f"cannot lower {n.op} (is an INPUT missing from the graph's inputs?)")

    def _view(self, n: Node, idx: Index):
        st = n.arg
        got = view_index(st, to_multi(n.shape, idx))
        if got is None:
            return Const(_fill_value(st.fill, n.dtype), n.dtype)
        flat, valid = got
        src = n.srcs[0]
        if not valid:
            return (yield src, ("flat", flat))
        if src in self.buffers:
            return Load(self.buffers[src], src.dtype, flat, tuple(dict.fromkeys(valid)),
                        _fill_value(st.fill, n.dtype))
        if src.op == Op.CONST:         # a padded constant: a select on the bounds, no buffer
            return _inside(tuple(dict.fromkeys(valid)), Const(src.arg, n.dtype), Const(_fill_value(st.fill, n.dtype), n.dtype))
        self.needs.add(src)            # a padded read of a computed value: materialize it
        return Const(_fill_value(st.fill, n.dtype), n.dtype)

    def _gather(self, n: Node, idx: Index):
        """A load of the gathered buffer at a computed position (the source is materialized)."""
        x, at = n.srcs
        position = yield at, idx
        zero = Const(_fill_value(0.0, n.dtype), n.dtype)
        if x.numel == 0:
            return zero
        if x not in self.buffers:
            self.needs.add(x)
            return zero
        multi = list(to_multi(n.shape, idx))
        multi[n.arg] = Lin()
        base = to_flat(x.shape, ("multi", tuple(multi)))
        return Gather(self.buffers[x], x.dtype, base, row_strides(x.shape)[n.arg], x.shape[n.arg], position)

    def _reduce(self, n: Node, idx: Index):
        src = n.srcs[0]
        src_idx = list(to_multi(n.shape, idx))
        rvars = []
        for a in n.arg:
            if src.shape[a] == 1:
                continue
            v = Var(f"r{self.counter}", src.shape[a])
            self.counter += 1
            rvars.append(v)
            src_idx[a] = as_lin(v)
        if any(src.shape[a] == 0 for a in n.arg):   # an empty reduction is its identity
            if n.op in (Op.SUM, Op.CONTRACT):
                return Const(0.0 if n.dtype.is_float else (False if n.dtype.name == "bool" else 0), n.dtype)
            return Const(n.dtype.lowest, n.dtype)
        at = ("multi", tuple(src_idx))
        if n.op == Op.CONTRACT:   # the product of the two operands in f32, summed in f32 (f64: in f64)
            f32 = n.dtype.compute
            operands = []
            for s in n.srcs:
                x = yield s, at
                operands.append(x if n.dtype == f32 else Compute(Op.CAST, f32, (x,)))
            a, b = operands
            red = Reduce(Op.SUM, f32, tuple(rvars), Compute(Op.MUL, f32, (a, b)), contraction=True) \
                if rvars else Compute(Op.MUL, f32, (a, b))
            return self._hoist(red, n) if n.dtype == f32 else Compute(Op.CAST, n.dtype, (self._hoist(red, n),))
        body = yield src, at
        if not rvars:
            return body
        return self._hoist(Reduce(n.op, n.dtype, tuple(rvars), body), n)

    def _hoist(self, red: Value, n: Node) -> Value:
        """A reduction as a Let computed once per iteration of the axes it depends on."""
        if not isinstance(red, Reduce):
            return red
        free = value_vars(red, self.let_vars)
        if not free <= set(self.axes):
            return red                 # depends on an enclosing reduction's variable: stays nested
        if red in self.let_of:
            return self.let_of[red]
        depth = 1 + max((self.axis_pos[v] for v in free), default=-1)
        name = f"acc{len(self.lets)}"
        self.lets.append(Let(name, depth, red))
        self.let_vars[name] = free
        ref = Ref(name, red.dtype)
        self.let_of[red] = ref
        self.origin.setdefault(red, n)
        return ref

    # --- how often each inlined node is evaluated ------------------------------------------
    def count_evaluations(self, kernel: Kernel, counts: dict[Node, int]) -> None:
        """Add to counts[node] how often each inlined node is computed, assuming loop-invariant
        code is hoisted to just inside the innermost loop it depends on (as LICM does)."""
        memo: dict = {}
        for let in kernel.lets:
            if isinstance(let, Online):
                # the loop computes each tile max once and its terms reuse it: count the rest
                inner: dict[Node, int] = defaultdict(int)
                for v in let.values():
                    self._count(v, kernel.axes[:let.depth] + (let.var,), inner, memo)
                for node, c in inner.items():
                    if node not in self.online_tiles:
                        counts[node] += c
            else:
                self._count(let.value, kernel.axes[:let.depth], counts, memo)
        for st in kernel.stores:
            self._count(st.value, kernel.axes, counts, memo)

    def _count(self, e: Value, loops: tuple[Var, ...], counts, memo) -> None:
        stack, seen = [(e, loops)], set()
        while stack:
            e, loops = stack.pop()
            if (e, loops) in seen or isinstance(e, Ref):
                continue
            seen.add((e, loops))
            node = self.origin.get(e)
            if node is not None and node is not self.root:
                free = value_vars(e, self.let_vars, memo)
                inner = max((p for p, v in enumerate(loops) if v in free), default=-1)
                counts[node] += math.prod(v.extent for v in loops[:inner + 1])
            if isinstance(e, Reduce):
                stack.append((e.body, loops + e.vars))
            else:
                stack.extend((c, loops) for c in children(e))


def _subtree_weight(n: Node, buffers, memo) -> int:
    """The work per element of n's inlined subtree (post-order with an explicit stack)."""
    stack = [n]
    while stack:
        x = stack[-1]
        if x in memo:
            stack.pop()
            continue
        if x in buffers or x.op in (Op.CONST, Op.INPUT):
            memo[x] = 0
        elif x.op in REDUCING:
            memo[x] = 0   # a reduction is judged by its own count (it is hoisted into a Let where it can be)
        else:
            pending = [s for s in x.srcs if s not in memo]
            if pending:
                stack.extend(pending)
                continue
            memo[x] = _OP_WEIGHT.get(x.op, 1 if x.op in ELEMENTWISE else 0) + sum(memo[s] for s in x.srcs)
        stack.pop()
    return memo[n]


def _inlined_below(n: Node, buffers) -> set[Node]:
    out, stack = set(), list(n.srcs)
    while stack:
        x = stack.pop()
        if x in out or x in buffers:
            continue
        out.add(x)
        stack.extend(x.srcs)
    return out


def _reductions_below(c: Node) -> set[Node]:
    """The reductions c's source reaches without passing through another reduction."""
    out, seen, stack = set(), set(), list(c.srcs)
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        if x.op in REDUCING:
            out.add(x)
        else:
            stack.extend(x.srcs)
    return out


def _violators(counts: dict[Node, int], realized: set[Node], buffers, weights: dict) -> set[Node]:
    """Inlined nodes computed too often for what they cost (see the module's docstring)."""
    out = set()
    for n, c in counts.items():
        if n in realized or n.op in (Op.CONST, Op.INPUT, Op.VIEW) or n.numel == 0:
            continue
        if n.op in REDUCING and c > n.numel:
            out.add(n)
        elif c >= RECOMPUTE_FACTOR * n.numel and _subtree_weight(n, buffers, weights) >= EXPENSIVE:
            out.add(n)
    return out


def _outermost(violators: set[Node], buffers) -> set[Node]:
    below = set()
    for v in violators:
        below |= _inlined_below(v, buffers)
    return {v for v in violators if v not in below} or violators


def _reductions_materialized_by_level(graph: Graph, topo: dict[Node, int]) -> set[Node]:
    """What the fix-point would materialize between each reduction and the reductions directly
    below it (a product feeding a product, a norm's statistics feeding a product), found level by
    level: each reduction is built once with only the region down to the next reductions inlined,
    the deeper reductions read from buffers, and so is what the levels below already chose
    (reductions in topological order: a residual stream's adds, once chosen, are not inlined again
    into every later layer's region). This keeps partitioning near linear in the depth of the
    program; the fix-point alone first builds one kernel inlining every layer of a model, then
    peels one level per round."""
    reductions = [n for n in graph.nodes if n.op in REDUCING]
    buffers = {n: "in" for n in graph.inputs} | {r: f"b{topo[r]}" for r in reductions}
    out: set[Node] = set()
    for c in reductions:
        below = _reductions_below(c)
        if not below or c.numel == 0:
            continue
        local = {n: v for n, v in buffers.items() if n not in below} | {n: f"b{topo[n]}" for n in out}
        needs: set[Node] = set()
        b = _KernelBuilder("k", c, local, needs)
        counts: dict[Node, int] = defaultdict(int)
        b.count_evaluations(b.build("out"), counts)
        violators = _violators(counts, set(local), local, {}) | (needs - set(local))
        if violators:
            out |= _outermost(violators, local)
    return out


def partition(graph: Graph) -> list[Node]:
    """The nodes to materialize (besides inputs), in execution order."""
    nodes = graph.nodes
    topo = {n: i for i, n in enumerate(nodes)}
    realized = {n for n in graph.outputs if n.op != Op.INPUT}
    realized |= {n for n in nodes if n.op == Op.CONTIGUOUS}
    realized |= _reductions_materialized_by_level(graph, topo)
    # per materialized node: (nodes its kernel inlines, its evaluation counts, its needs); a
    # kernel is rebuilt only when something it inlined became materialized
    built: dict[Node, tuple[set, dict, set, set]] = {}
    for _ in range(MAX_ROUNDS):
        buffers = {n: f"b{topo[n]}" for n in realized} | {n: "in" for n in graph.inputs}
        needs: set[Node] = set()
        splits: set[Node] = set()
        counts: dict[Node, int] = defaultdict(int)
        for n in realized:
            if n.numel == 0:
                continue                    # an empty tensor has no kernel
            if n not in built or built[n][0] & realized:
                kneeds: set[Node] = set()
                kcounts: dict[Node, int] = defaultdict(int)
                b = _KernelBuilder("k", n, buffers, kneeds)
                b.count_evaluations(b.build("out"), kcounts)
                # what it inlined: a node it read from a buffer stays a buffer, so only these can change it
                built[n] = (({key[0] for key in b.memo} | kneeds) - {n} - buffers.keys(), kcounts, kneeds, b.splits)
            _, kcounts, kneeds, ksplits = built[n]
            needs |= kneeds
            splits |= ksplits
            for node, c in kcounts.items():
                counts[node] += c
        violators = (needs - realized) | _violators(counts, realized, buffers, {})
        if not violators and splits <= realized:
            return sorted(realized, key=topo.__getitem__)
        # realize the outermost violators first; the ones they contain are re-judged next round
        realized |= (_outermost(violators, buffers) if violators else set()) | splits
    raise RuntimeError("partitioning did not converge")


def _inside(bounds, value: Value, fill: Value) -> Value:
    """`value` where every bound holds (lo <= expr < hi), else `fill`: selects on the index."""
    for b in bounds:
        i = Iota(b.expr, DType.i32)
        below = Compute(Op.CMPLT, DType.bool, (i, Const(b.lo, DType.i32)))
        inside = Compute(Op.CMPLT, DType.bool, (i, Const(b.hi, DType.i32)))
        value = Compute(Op.WHERE, value.dtype, (below, fill, Compute(Op.WHERE, value.dtype, (inside, value, fill))))
    return value


def _outputs_in_place(graph: Graph, realized: list[Node]) -> dict[Node, Node]:
    """{computed value: output} for each output that only reshapes a value computed into a
    buffer of its own: that value's kernel writes the output's buffer, and no copy follows (a
    convolution's (N, O, P) product read as (N, O, H, W))."""
    done = set(realized)
    placed: dict[Node, Node] = {}
    for n in graph.outputs:
        if not is_pure_reshape(n) or n.numel == 0:
            continue
        m = n.srcs[0]
        if m in done and m not in graph.outputs and m not in placed and n not in placed.values():
            placed[m] = n
    return placed


def lower(graph: Graph) -> KernelProgram:
    """The kernels that compute `graph`, in execution order, with their buffers (an
    online-contraction term as its primitive definition: no kernel IR kind for it yet)."""
    from ir.terms import expand_terms
    graph = expand_terms(graph)
    realized = partition(graph)
    placed = _outputs_in_place(graph, realized)
    realized = [n for n in realized if n not in placed.values()]
    buffers: dict[Node, str] = {n: f"in{i}" for i, n in enumerate(graph.inputs)}
    buffer_list = [Buffer(f"in{i}", n.dtype, n.numel, "input") for i, n in enumerate(graph.inputs)]
    outputs: list[str] = []
    out_names: dict[Node, str] = {}
    copies: list[tuple[Node, str]] = []
    for i, n in enumerate(graph.outputs):
        if n in out_names:
            outputs.append(out_names[n])
            continue
        name = f"out{i}"
        out_names[n] = name
        outputs.append(name)
        buffer_list.append(Buffer(name, n.dtype, n.numel, "output"))
        if n.op == Op.INPUT:
            copies.append((n, name))
    temps = 0
    for n in realized:
        if n in out_names or n in placed:
            buffers[n] = out_names[placed.get(n, n)]
        else:
            buffers[n] = f"t{temps}"
            temps += 1
            buffer_list.append(Buffer(buffers[n], n.dtype, n.numel, "temp"))
    kernels = []
    for n, name in copies:
        b = _KernelBuilder(f"k{len(kernels)}_copy", n, {}, set())
        it = iter(b.axes)
        idx = tuple(Lin() if s == 1 else as_lin(next(it)) for s in n.shape)
        flat = to_flat(n.shape, ("multi", idx))
        kernels.append(Kernel(b.name, b.axes, (), (Store(name, flat, Load(buffers[n], n.dtype, flat)),)))
    for n in realized:
        if n.numel == 0:
            continue
        kname = f"k{len(kernels)}_{n.op.value}"
        needs: set[Node] = set()
        kernels.append(_KernelBuilder(kname, n, buffers, needs).build(buffers[n]))
        assert not needs, "partition left a padded read of a computed value"
    return KernelProgram(tuple(buffer_list), tuple(kernels), tuple(buffers[n] for n in graph.inputs),
                         tuple(outputs), tuple(n.shape for n in graph.outputs))
