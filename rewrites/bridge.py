"""The only module that imports egglog: IR graphs -> egglog terms, pattern rules -> egglog
rules, bounded saturation, and the serialized e-graph handed back as plain Python data.

Term language (one egglog sort `Term`): the pattern ops of `rewrites.pattern.OPS`, plus three
leaves the rules never build: `Inp(i)` (graph input i), `Lit(k)` (a shaped constant, an iota or
a whole gather, kept in a Python table) and `View(x, k)` (a view the structured ops cannot express, e.g. a transpose or
slice; its ShapeTracker is kept in a Python table). Shapes live in a `dim(term, axis)` table
filled by an analysis ruleset, never in the terms.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from egglog import (EGraph, Expr, StringLike, f64, f64Like, function, i64, i64Like, relation,
                    rewrite, rule, ruleset, set_, String, union, unstable_combine_rulesets, var)
from egglog import eq as eg_eq

from ir.dtypes import DType
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.view import ShapeTracker, View
from rewrites import pattern as P


class Term(Expr):
    """A tensor-valued e-graph term."""


@function
def Inp(i: i64Like) -> Term: ...
@function
def Lit(k: i64Like) -> Term: ...
@function
def ViewT(x: Term, k: i64Like) -> Term: ...
@function
def Exp2(x: Term) -> Term: ...
@function
def Log2(x: Term) -> Term: ...
@function
def Sin(x: Term) -> Term: ...
@function
def Sqrt(x: Term) -> Term: ...
@function
def Recip(x: Term) -> Term: ...
@function
def Contig(x: Term) -> Term: ...
@function
def CastT(x: Term, d: StringLike) -> Term: ...
@function
def Add(x: Term, y: Term) -> Term: ...
@function
def Mul(x: Term, y: Term) -> Term: ...
@function
def Mod(x: Term, y: Term) -> Term: ...
@function
def Lt(x: Term, y: Term) -> Term: ...
@function
def Where(c: Term, x: Term, y: Term) -> Term: ...
@function
def AddC(x: Term, c: f64Like) -> Term: ...
@function
def MulC(x: Term, c: f64Like) -> Term: ...
@function
def SumT(x: Term, a: i64Like) -> Term: ...
@function
def MaxT(x: Term, a: i64Like) -> Term: ...
@function
def Expand(x: Term, a: i64Like, n: i64Like) -> Term: ...
@function
def Unsq(x: Term, a: i64Like) -> Term: ...
@function
def Sqz(x: Term, a: i64Like) -> Term: ...
@function
def Split(x: Term, a: i64Like, t: i64Like) -> Term: ...
@function
def Merge(x: Term, a: i64Like) -> Term: ...
@function
def Pad(x: Term, a: i64Like, p: i64Like, fill: f64Like) -> Term: ...
@function
def Contract(x: Term, y: Term, a: i64Like) -> Term: ...
@function
def Attend(x: Term, y: Term, a: i64Like) -> Term: ...
@function
def dim(x: Term, a: i64Like) -> i64: ...
@function
def Out(i: i64Like) -> Term: ...   # marks output i's e-class (survives merges, unlike let names)


tile = relation("tile", i64)
isfloat = relation("isfloat", Term)
isf32 = relation("isf32", Term)      # holds f32 values (for rules that are typed only on f32)

CTOR = {"exp2": Exp2, "log2": Log2, "sin": Sin, "sqrt": Sqrt, "recip": Recip, "contiguous": Contig,
        "cast": CastT, "add": Add, "mul": Mul, "mod": Mod, "lt": Lt, "where": Where, "addc": AddC,
        "mulc": MulC, "sum": SumT, "max": MaxT, "expand": Expand, "unsq": Unsq, "sqz": Sqz,
        "split": Split, "merge": Merge, "pad": Pad, "contract": Contract, "attend": Attend}


# --- shape analysis ------------------------------------------------------------------------

def _shape_rules():
    x, y, z, e = (var(n, Term) for n in "xyze")
    i, a, n, t, p = (var(s, i64) for s in ("i", "a", "n", "t", "p"))
    d, f = var("d", String), var("f", f64)
    rs = []

    def same(ctor_pattern, src):  # every axis of e equals that of src
        rs.append(rule(eg_eq(e).to(ctor_pattern), dim(src, i) == n).then(set_(dim(e, i)).to(n)))

    for c in (Exp2, Log2, Sin, Sqrt, Recip, Contig):
        same(c(x), x)
    same(CastT(x, d), x)
    for c in (Add, Mul, Mod, Lt):
        same(c(x, y), x)
        same(c(x, y), y)
    same(Where(x, y, z), y)
    same(Where(x, y, z), z)
    same(AddC(x, f), x)
    same(MulC(x, f), x)
    for c in (SumT, MaxT):
        rs.append(rule(eg_eq(e).to(c(x, a)), dim(x, i) == n, i != a).then(set_(dim(e, i)).to(n)))
        rs.append(rule(eg_eq(e).to(c(x, a)), dim(x, a) == n).then(set_(dim(e, a)).to(i64(1))))
    kernels = [CTOR[k] for k in P.KERNEL_OPS]     # the kernel terms: shapes and dtypes alike
    for k in kernels:
        for src in (x, y):
            rs.append(rule(eg_eq(e).to(k(x, y, a)), dim(src, i) == n, i != a).then(set_(dim(e, i)).to(n)))
        rs.append(rule(eg_eq(e).to(k(x, y, a)), dim(x, a) == n).then(set_(dim(e, a)).to(i64(1))))
    rs.append(rule(eg_eq(e).to(Expand(x, a, t)), dim(x, i) == n, i != a).then(set_(dim(e, i)).to(n)))
    rs.append(rule(eg_eq(e).to(Expand(x, a, t)), dim(x, a) == n).then(set_(dim(e, a)).to(t)))
    rs.append(rule(eg_eq(e).to(Unsq(x, a)), dim(x, i) == n, i < a).then(set_(dim(e, i)).to(n)))
    rs.append(rule(eg_eq(e).to(Unsq(x, a)), dim(x, i) == n, i >= a).then(set_(dim(e, i + 1)).to(n)))
    rs.append(rule(eg_eq(e).to(Unsq(x, a)), dim(x, i) == n).then(set_(dim(e, a)).to(i64(1))))
    rs.append(rule(eg_eq(e).to(Sqz(x, a)), dim(x, i) == n, i < a).then(set_(dim(e, i)).to(n)))
    rs.append(rule(eg_eq(e).to(Sqz(x, a)), dim(x, i) == n, i > a).then(set_(dim(e, i - 1)).to(n)))
    rs.append(rule(eg_eq(e).to(Split(x, a, t)), dim(x, i) == n, i < a).then(set_(dim(e, i)).to(n)))
    rs.append(rule(eg_eq(e).to(Split(x, a, t)), dim(x, i) == n, i > a).then(set_(dim(e, i + 1)).to(n)))
    rs.append(rule(eg_eq(e).to(Split(x, a, t)), dim(x, a) == n).then(
        set_(dim(e, a)).to(n / t), set_(dim(e, a + 1)).to(t)))
    rs.append(rule(eg_eq(e).to(Merge(x, a)), dim(x, i) == n, i < a).then(set_(dim(e, i)).to(n)))
    rs.append(rule(eg_eq(e).to(Merge(x, a)), dim(x, i) == n, i > a + 1).then(set_(dim(e, i - 1)).to(n)))
    rs.append(rule(eg_eq(e).to(Merge(x, a)), dim(x, a) == n, dim(x, a + 1) == t).then(
        set_(dim(e, a)).to(n * t)))
    rs.append(rule(eg_eq(e).to(Pad(x, a, p, f)), dim(x, i) == n, i != a).then(set_(dim(e, i)).to(n)))
    rs.append(rule(eg_eq(e).to(Pad(x, a, p, f)), dim(x, a) == n).then(set_(dim(e, a)).to(n + p)))
    # dtype analysis: which terms hold floats (leaves are seeded from Python)
    for c in (Exp2, Log2, Sin, Sqrt, Recip, Contig):
        rs.append(rule(eg_eq(e).to(c(x)), isfloat(x)).then(isfloat(e)))
    for c in (Add, Mul, Mod):
        rs.append(rule(eg_eq(e).to(c(x, y)), isfloat(x)).then(isfloat(e)))
    rs.append(rule(eg_eq(e).to(Where(x, y, z)), isfloat(y)).then(isfloat(e)))
    rs.append(rule(eg_eq(e).to(AddC(x, f))).then(isfloat(e)))
    rs.append(rule(eg_eq(e).to(MulC(x, f))).then(isfloat(e)))
    for name in ("f32", "f16", "bf16"):
        rs.append(rule(eg_eq(e).to(CastT(x, String(name)))).then(isfloat(e)))
    for c in (SumT, MaxT, Unsq, Sqz, Merge, ViewT):
        rs.append(rule(eg_eq(e).to(c(x, a)), isfloat(x)).then(isfloat(e)))
    for c in (Expand, Split):
        rs.append(rule(eg_eq(e).to(c(x, a, t)), isfloat(x)).then(isfloat(e)))
    rs.append(rule(eg_eq(e).to(Pad(x, a, p, f)), isfloat(x)).then(isfloat(e)))
    for k in kernels:
        rs.append(rule(eg_eq(e).to(k(x, y, a))).then(isfloat(e)))
    # the same for f32 exactly: every op but a cast keeps its operand's dtype
    for c in (Exp2, Log2, Sin, Sqrt, Recip, Contig):
        rs.append(rule(eg_eq(e).to(c(x)), isf32(x)).then(isf32(e)))
    for c in (Add, Mul, Mod):
        rs.append(rule(eg_eq(e).to(c(x, y)), isf32(x)).then(isf32(e)))
    rs.append(rule(eg_eq(e).to(Where(x, y, z)), isf32(y)).then(isf32(e)))
    for c in (AddC, MulC):
        rs.append(rule(eg_eq(e).to(c(x, f)), isf32(x)).then(isf32(e)))
    rs.append(rule(eg_eq(e).to(CastT(x, String("f32")))).then(isf32(e)))
    for c in (SumT, MaxT, Unsq, Sqz, Merge, ViewT):
        rs.append(rule(eg_eq(e).to(c(x, a)), isf32(x)).then(isf32(e)))
    for c in (Expand, Split):
        rs.append(rule(eg_eq(e).to(c(x, a, t)), isf32(x)).then(isf32(e)))
    rs.append(rule(eg_eq(e).to(Pad(x, a, p, f)), isf32(x)).then(isf32(e)))
    for k in kernels:
        rs.append(rule(eg_eq(e).to(k(x, y, a)), isf32(x)).then(isf32(e)))
    return rs


SHAPES = ruleset(*_shape_rules(), name="shapes")


# --- pattern -> egglog ---------------------------------------------------------------------

class _Vars:
    def __init__(self):
        self.vars = {}

    def get(self, v):
        if v.name not in self.vars:
            sort = Term if isinstance(v, P.Var) else i64 if isinstance(v, P.IntVar) else f64
            self.vars[v.name] = var(v.name, sort)
        return self.vars[v.name]


def _int(e, vs: _Vars, conds: list):
    if isinstance(e, bool):
        raise TypeError("bool is not an int expression")
    if isinstance(e, int):
        return i64(e)
    if isinstance(e, P.IntVar):
        return vs.get(e)
    if isinstance(e, P.Dim):
        return dim(vs.get(e.x), _int(e.axis, vs, conds))
    l, r = _int(e.lhs, vs, conds), _int(e.rhs, vs, conds)
    return {"+": lambda: l + r, "-": lambda: l - r, "*": lambda: l * r, "/": lambda: l / r,
            "%": lambda: l % r}[e.op]()


def _float(e, vs: _Vars, conds: list):
    if isinstance(e, (int, float)):
        return f64(float(e))
    if isinstance(e, P.FloatVar):
        return vs.get(e)
    if isinstance(e, P.ToFloat):
        return f64.from_i64(_int(e.x, vs, conds))
    l = _float(e.lhs, vs, conds)
    if e.op == "neg":
        return -l
    r = _float(e.rhs, vs, conds)
    return l * r if e.op == "*" else l + r if e.op == "+" else l - r


def to_egglog(p, vs: _Vars, conds: list | None = None):
    """A pattern as an egglog expression over egglog variables."""
    conds = [] if conds is None else conds
    if isinstance(p, P.Var):
        return vs.get(p)
    args = []
    for a, k in zip(p.args, P.OPS[p.op]):
        args.append(to_egglog(a, vs, conds) if k == "t" else _int(a, vs, conds) if k == "i"
                    else _float(a, vs, conds) if k == "f" else String(a))
    return CTOR[p.op](*args)


def _guard(g, vs: _Vars):
    if isinstance(g, P.FloatCond):
        l, r = _float(g.lhs, vs, []), _float(g.rhs, vs, [])
        return l < r if g.op == "<" else l > r
    if isinstance(g, P.IsTile):
        return tile(_int(g.t, vs, []))
    if isinstance(g, P.IsFloat):
        return isfloat(vs.get(g.x))
    if isinstance(g, P.IsF32):
        return isf32(vs.get(g.x))
    l, r = _int(g.lhs, vs, []), _int(g.rhs, vs, [])
    if g.op == "==":
        # `n == dim(x, a)`: egglog binds n from the table when written as a fact
        return l == r if not isinstance(g.lhs, P.IntVar) else r == l
    return {"!=": lambda: l != r, "<": lambda: l < r, ">": lambda: l > r, "<=": lambda: l <= r,
            ">=": lambda: l >= r}[g.op]()


def to_egglog_rule(r: P.Rule):
    vs = _Vars()
    lhs = to_egglog(r.lhs, vs)
    conds = [_guard(g, vs) for g in r.guard]
    rhs = to_egglog(r.rhs, vs)
    return rewrite(lhs).to(rhs, *conds)


def make_ruleset(name: str, rules) -> object:
    return ruleset(*[to_egglog_rule(r) for r in rules], name=name)


# --- IR graph -> terms ---------------------------------------------------------------------

@dataclass
class Tables:
    """Python-side payloads of the opaque leaves: Lit(k) constants, View(x, k) trackers."""
    inputs: tuple[Node, ...]
    lits: list[Node] = field(default_factory=list)
    views: list[ShapeTracker] = field(default_factory=list)


def _ones_reshape_steps(src: tuple, dst: tuple):
    """The fewest Sqz/Unsq steps turning shape src into dst when they differ only in size-1
    axes (each step's axis indexes the shape as it is at that step), or None."""
    if [s for s in src if s != 1] != [s for s in dst if s != 1]:
        return None
    steps, i, j = [], 0, 0
    while i < len(src) or j < len(dst):
        if i < len(src) and j < len(dst) and src[i] == dst[j]:
            i, j = i + 1, j + 1
        elif i < len(src) and src[i] == 1:
            steps.append(("sqz", j))
            i += 1
        else:
            steps.append(("unsq", j))
            j += 1
    return steps


def decompose_view(src_shape: tuple, st: ShapeTracker):
    """A view as (core, expands): core is None (identity), ('ones', steps) or ('opaque', tracker);
    expands is [(axis, size)] applied after the core."""
    if len(st.views) != 1 or st.views[0].mask is not None or st.views[0].offset != 0:
        return ("opaque", st), []
    v = st.views[0]
    exps = [(i, s) for i, (s, k) in enumerate(zip(v.shape, v.strides)) if k == 0 and s > 1]
    core_shape = tuple(1 if (i, s) in exps else s for i, s in enumerate(v.shape))
    core = View(core_shape, v.strides, 0, None).canonical()
    if core == View.contiguous(core_shape).canonical() or \
            all(c == cc for c, cc, s in zip(core.strides, View.contiguous(core_shape).strides, core_shape) if s != 1):
        if core_shape == tuple(src_shape):
            return None, exps
        steps = _ones_reshape_steps(tuple(src_shape), core_shape)
        if steps is not None and _contiguous_like(core):
            return ("ones", steps), exps
    return ("opaque", ShapeTracker((core,))), exps


def _contiguous_like(v: View) -> bool:
    ref = View.contiguous(v.shape).canonical()
    return all(a == b for a, b, s in zip(v.strides, ref.strides, v.shape) if s != 1)


class Importer:
    """Builds one egglog expression per IR node (hash-consed, so shared sub-terms stay shared)."""

    def __init__(self, egraph: EGraph, tables: Tables):
        self.eg, self.tables = egraph, tables
        self.memo: dict[Node, object] = {}
        self.count = 0
        self.lit_keys: dict[Node, int] = {}
        self.view_keys: dict[ShapeTracker, int] = {}

    def _let(self, expr, shape=None, is_float: bool = False, is_f32: bool = False):
        self.count += 1
        ref = self.eg.let(f"n{self.count}_", expr)   # (see test_bridge_import_keeps_every_term)
        if is_float:
            self.eg.register(isfloat(ref))
        if is_f32:
            self.eg.register(isf32(ref))
        if shape is not None:
            for i, s in enumerate(shape):
                self.eg.register(set_(dim(ref, i64(i))).to(i64(s)))
        return ref

    def term(self, n: Node):
        if n in self.memo:
            return self.memo[n]
        self.memo[n] = t = self._term(n)
        return t

    def _const_of(self, n: Node):
        return n.arg if n.op == Op.CONST and n.dtype.is_float else None

    def _term(self, n: Node):
        op = n.op
        if op == Op.INPUT:
            return self._let(Inp(i64(self.tables.inputs.index(n))), n.shape, n.dtype.is_float,
                             n.dtype == DType.f32)
        if op in (Op.CONST, Op.IOTA, Op.GATHER):
            # an iota or a gather (with its operands) is a leaf to the rules: no rule reads
            # through data-dependent positions; the extracted program keeps the node as it is
            key = self.lit_keys.setdefault(n, len(self.tables.lits))
            if key == len(self.tables.lits):
                self.tables.lits.append(n)
            return self._let(Lit(i64(key)), n.shape, n.dtype.is_float, n.dtype == DType.f32)
        if op in (Op.ADD, Op.MUL):
            a, b = n.srcs
            ca, cb = self._const_of(a), self._const_of(b)
            if cb is not None or ca is not None:
                x, c = (a, cb) if cb is not None else (b, ca)
                return self._let((AddC if op == Op.ADD else MulC)(self.term(x), f64(float(c))))
        if op == Op.VIEW:
            return self._view(n)
        srcs = [self.term(s) for s in n.srcs]
        simple = {Op.EXP2: Exp2, Op.LOG2: Log2, Op.SIN: Sin, Op.SQRT: Sqrt, Op.RECIP: Recip,
                  Op.CONTIGUOUS: Contig, Op.ADD: Add, Op.MUL: Mul, Op.MOD: Mod, Op.CMPLT: Lt,
                  Op.WHERE: Where}
        if op in simple:
            return self._let(simple[op](*srcs))
        if op == Op.CAST:
            return self._let(CastT(srcs[0], String(n.dtype.value)))
        if op in (Op.SUM, Op.MAX):
            ctor = SumT if op == Op.SUM else MaxT
            x = srcs[0]
            for a in n.arg:  # a multi-axis reduction becomes nested one-axis reductions
                x = self._let(ctor(x, i64(a)))
            return x
        if op == Op.CONTRACT:   # over several axes: a contraction over the first, then sums
            x = self._let(Contract(srcs[0], srcs[1], i64(n.arg[0])))
            for a in n.arg[1:]:
                x = self._let(SumT(x, i64(a)))
            return x
        if op == Op.ATTEND:
            return self._let(Attend(srcs[0], srcs[1], i64(n.arg[0])))
        raise ValueError(f"cannot import {op}")

    def _view(self, n: Node):
        src = n.srcs[0]
        x = self.term(src)
        core, exps = decompose_view(src.shape, n.arg)
        if core is not None and core[0] == "ones":
            for kind, a in core[1]:
                x = self._let((Sqz if kind == "sqz" else Unsq)(x, i64(a)))
        elif core is not None:
            st = core[1]
            key = self.view_keys.setdefault(st, len(self.tables.views))
            if key == len(self.tables.views):
                self.tables.views.append(st)
            x = self._let(ViewT(x, i64(key)), st.shape)
        for a, s in exps:
            x = self._let(Expand(x, i64(a), i64(s)))
        return x


# --- running with limits -------------------------------------------------------------------

@dataclass
class PhaseReport:
    name: str
    iterations: int
    enodes: int
    eclasses: int
    seconds: float
    stopped: str  # "saturated" | "iterations" | "node limit" | "time limit"


class EGraphSession:
    """One e-graph for one program: import, run phases under limits, serialize."""

    def __init__(self, graph: Graph, tiles: tuple[int, ...] = ()):
        self.graph = graph
        self.eg = EGraph()
        self.tables = Tables(inputs=tuple(graph.inputs))
        imp = Importer(self.eg, self.tables)
        self.roots = []
        for i, o in enumerate(graph.outputs):
            t = imp.term(o)
            self.roots.append(t)
            self.eg.register(union(Out(i64(i))).with_(t))
        for t in tiles:
            self.eg.register(tile(i64(t)))
        self.eg.run(SHAPES.saturate())

    def size(self) -> int:
        return sum(n for f, n in self.eg.all_function_sizes() if str(f) not in ("dim", "tile", "isfloat", "Out"))

    def eclasses(self) -> int:
        """Distinct tensor e-classes (from the serialized e-graph: egglog has no counter)."""
        return self.serialize().num_eclasses

    def run_phase(self, name: str, rulesets: list, *, max_iterations: int, node_limit: int,
                  deadline: float) -> PhaseReport:
        t0 = time.perf_counter()
        combined = combined_ruleset(rulesets)
        stopped, it, last = "iterations", 0, 0.0
        size, growth = self.size(), 4.0
        for it in range(1, max_iterations + 1):
            now = time.perf_counter()
            if now + 2 * last > deadline:
                stopped, it = "time limit", it - 1
                break
            # an iteration that may overshoot the node limit runs on a pushed copy and is
            # undone if it does (push copies the e-graph, so only when it is at risk)
            risky = size * max(growth, 2.0) > node_limit
            if risky:
                self.eg.push()
            report = self.eg.run(combined)
            self.eg.run(SHAPES.saturate())
            last = time.perf_counter() - now
            new_size = self.size()
            if new_size > node_limit and risky:
                self.eg.pop()
                stopped, it = "node limit", it - 1
                break
            growth, size = new_size / max(1, size), new_size
            if size > node_limit:  # grew more than `growth` predicted: stop, and say so
                stopped = "node limit (overshot)"
                break
            if not report.updated:
                stopped = "saturated"
                break
        seconds = time.perf_counter() - t0
        # counting e-classes needs a serialization (egglog has no counter): only while cheap
        classes = self.eclasses() if size <= 2000 else -1
        return PhaseReport(name, it, size, classes, seconds, stopped)

    def serialize(self) -> "SerializedEGraph":
        js = json.loads(self.eg._serialize(max_functions=None, max_calls_per_function=None).to_json())
        return SerializedEGraph.from_json(js, self)


# --- serialized e-graph as plain data ------------------------------------------------------

@dataclass
class ENode:
    op: str              # pattern op, or "inp" / "lit" / "view"
    children: tuple      # e-class ids of tensor children
    ints: tuple
    floats: tuple
    strs: tuple
    created: bool        # not part of the imported program (made by a rule)


@dataclass
class SerializedEGraph:
    classes: dict[str, list[ENode]]
    roots: list[str]
    tables: Tables

    @staticmethod
    def from_json(js: dict, session: EGraphSession) -> "SerializedEGraph":
        nodes = js["nodes"]
        names = {"Inp": "inp", "Lit": "lit", "ViewT": "view"}
        for op, f in CTOR.items():
            names[str(f)] = op
        classes: dict[str, list[ENode]] = {}
        kinds = P.OPS
        for nid, nd in nodes.items():
            fname = nd["op"]
            if fname not in names:
                continue
            op = names[fname]
            ch = nd["children"]
            sig = {"inp": "i", "lit": "i", "view": "ti"}.get(op) or kinds[op]
            ts, ints, floats, strs = [], [], [], []
            for c, k in zip(ch, sig):
                cn = nodes[c]
                if k == "t":
                    ts.append(cn["eclass"])
                elif k == "i":
                    ints.append(int(cn["op"]))
                elif k == "f":
                    floats.append(float(cn["op"]))
                else:
                    strs.append(json.loads(cn["op"]) if cn["op"].startswith('"') else cn["op"])
            classes.setdefault(nd["eclass"], []).append(
                ENode(op, tuple(ts), tuple(ints), tuple(floats), tuple(strs), False))
        # root classes: where the Out(i) markers live
        outs = {}
        for nd in nodes.values():
            if nd["op"] == "Out":
                outs[int(nodes[nd["children"][0]]["op"])] = nd["eclass"]
        roots = [outs[i] for i in range(len(session.roots))]
        return SerializedEGraph(canonical_order(classes, roots), roots, session.tables)

    @property
    def num_enodes(self) -> int:
        return sum(len(v) for v in self.classes.values())

    @property
    def num_eclasses(self) -> int:
        return len(self.classes)


def canonical_order(classes: dict[str, list[ENode]], roots: list[str]) -> dict[str, list[ENode]]:
    """`classes` with classes and e-nodes sorted by their content, not by egglog's ids or its
    serialization order (which may differ between builds and platforms): extraction breaks
    ties by position, so the same e-graph must list its nodes in the same order everywhere.
    A class's rank is refined from its e-nodes' ops, integer/float/string arguments and the
    ranks of their children (ranks, so no hashing) until a round splits no rank: a fixed
    number of rounds left classes that differ only deeper down (a transformer block needs 10)
    tied, and so in egglog's order. Classes tied at the end look the same at every depth;
    they keep the serialization's order. Roots first."""
    groups = [list(classes)]    # an ordered partition: a class's rank is its group's position
    rank = {c: 0 for c in classes}
    while True:
        # a round re-signs only the classes still tied (a group of several) and splits each
        # group by signature in signature order, so every round refines the last and a class
        # once alone is never looked at again (on a 2-layer decoder: 5x faster than re-signing
        # every class each round)
        split, refined = False, []
        for group in groups:
            if len(group) == 1:
                refined.append(group)
                continue
            by_sig: dict[tuple, list[str]] = {}
            for c in group:
                by_sig.setdefault(tuple(sorted(_node_key(e, rank) for e in classes[c])), []).append(c)
            split = split or len(by_sig) > 1
            refined.extend(by_sig[k] for k in sorted(by_sig))
        groups = refined
        rank = {c: i for i, group in enumerate(groups) for c in group}
        if not split:
            break
    first = {r: i for i, r in enumerate(roots)}
    ordered = sorted(classes, key=lambda c: (first.get(c, len(first)), rank[c]))
    return {c: sorted(classes[c], key=lambda e: _node_key(e, rank)) for c in ordered}


def _node_key(e: ENode, rank: dict[str, int]) -> tuple:
    return (e.op, e.ints, tuple(map(_float_key, e.floats)), e.strs, tuple(rank.get(k, -1) for k in e.children))


def _float_key(f: float) -> tuple:
    # a total order: NaN compares false with everything (so a sort keeps whatever order it
    # got) and -0.0 == 0.0 (a tie); the repr tells them apart
    return (f != f, 0.0 if f != f else f, repr(f))


_RULESETS: dict[tuple, object] = {}


def cached_ruleset(family: str, rules: list) -> object | None:
    """One egglog ruleset per (family, rules) — egglog rulesets are global, so build each once."""
    if not rules:
        return None
    key = (family, tuple(rules))
    if key not in _RULESETS:
        _RULESETS[key] = make_ruleset(f"{family}_{len(_RULESETS)}", rules)
    return _RULESETS[key]


_COMBINED: dict[tuple[str, ...], object] = {}


def combined_ruleset(rulesets: list) -> object:
    """One egglog ruleset running `rulesets` together, named by the names of its parts and kept
    for the process. An unnamed combination (`a | b`) is named `combined_ruleset_<id(object)>`,
    and an e-graph registers a ruleset once per name: a phase's combination that was allocated
    where an earlier phase's (already collected) one had been got its name, so the e-graph ran
    the earlier phase's rules instead, and the new family's rules never ran. That happened in
    a few processes in a hundred (wherever the allocator reused the address)."""
    if len(rulesets) == 1:
        return rulesets[0]
    key = tuple(str(r.__egg_ident__) for r in rulesets)
    if key not in _COMBINED:
        name = "combined__" + "__".join(key)
        _COMBINED[key] = unstable_combine_rulesets(*rulesets, name=name)
    return _COMBINED[key]
