"""Rules applied straight to a program, without an e-graph: one bottom-up pass that rewrites
every node a rule's left side matches into its right side.

This is how the program a user wrote gets its kernel terms (the kernels family) for the
candidate that keeps its algorithm, and for a program too big to explore: the same rules as
data, not a second matcher. Rules over the primitive ops, casts, the scalar forms (`addc`,
`mulc`), kernel terms and the views `expand`, `unsq` and `sqz` apply here (a VIEW node is read
as the e-graph reads it, `bridge.decompose_view`: size-1 reshapes, then broadcasts); `split`,
`merge` and `pad` are for the e-graph only. The guard may test dtypes (`IsFloat`, `IsF32`).
"""
from __future__ import annotations

from ir.dtypes import DType
from ir.graph import Graph, toposort
from ir.node import IRError, Node
from ir.ops import Op
from rewrites import pattern as P
from rewrites.build import build

# pattern op -> the IR op it matches (reductions and contractions over exactly one axis)
_MATCHES = {"exp2": Op.EXP2, "log2": Op.LOG2, "sin": Op.SIN, "sqrt": Op.SQRT, "recip": Op.RECIP,
            "contiguous": Op.CONTIGUOUS, "add": Op.ADD, "mul": Op.MUL, "mod": Op.MOD, "lt": Op.CMPLT,
            "where": Op.WHERE, "sum": Op.SUM, "max": Op.MAX, "contract": Op.CONTRACT, "attend": Op.ATTEND,
            "addc": Op.ADD, "mulc": Op.MUL}
_VIEWS = ("expand", "unsq", "sqz")
_GUARDS = (P.IsFloat, P.IsF32)


def applicable(rule: P.Rule) -> bool:
    """Whether `rule` can run here: its left side uses only primitive ops, its guard dtypes."""
    def ok(p) -> bool:
        return isinstance(p, P.Var) or (p.op in _MATCHES or p.op in _VIEWS or p.op == "cast") and all(
            ok(a) for a, k in zip(p.args, P.OPS[p.op]) if k == "t")
    return ok(rule.lhs) and all(isinstance(g, _GUARDS) for g in rule.guard)


def _match(p, n: Node, env: dict) -> bool:
    if isinstance(p, P.Var):
        if p.name in env:
            return env[p.name] is n
        env[p.name] = n
        return True
    if p.op in ("addc", "mulc"):          # x + c, x * c: one source a float constant
        if n.op != _MATCHES[p.op] or not n.dtype.is_float:
            return False
        for x, k in (n.srcs, n.srcs[::-1]):
            if k.op == Op.CONST and _match_float(p.args[1], float(k.arg), env) and _match(p.args[0], x, env):
                return True
        return False
    if p.op in _VIEWS:
        peeled = _outer_view(n)
        if peeled is None or peeled[0] != p.op or len(peeled[1]) != len(p.args) - 1:
            return False
        return all(_match_int(q, v, env) for q, v in zip(p.args[1:], peeled[1])) and \
            _match(p.args[0], peeled[2], env)
    if p.op == "cast":
        return n.op == Op.CAST and n.dtype.value == p.args[1] and _match(p.args[0], n.srcs[0], env)
    if n.op != _MATCHES[p.op] or len(n.srcs) != sum(k == "t" for k in P.OPS[p.op]):
        return False
    if p.op in P.REDUCING_OPS:
        if len(n.arg) != 1 or not _match_int(p.args[-1], n.arg[0], env):
            return False
    tensors = [a for a, k in zip(p.args, P.OPS[p.op]) if k == "t"]
    return all(_match(a, s, env) for a, s in zip(tensors, n.srcs))


def _int_value(p, env: dict):
    """The value of an integer pattern expression under env, or None while a variable is unbound."""
    if isinstance(p, int):
        return p
    if isinstance(p, P.IntVar):
        return env.get(p.name)
    if isinstance(p, P.IntOp):
        lhs, rhs = _int_value(p.lhs, env), _int_value(p.rhs, env)
        if lhs is None or rhs is None or (p.op in "/%" and rhs == 0):
            return None
        return {"+": lhs + rhs, "-": lhs - rhs, "*": lhs * rhs, "/": lhs // rhs, "%": lhs % rhs}[p.op]
    return None


def _match_int(p, value: int, env: dict) -> bool:
    if isinstance(p, P.IntVar) and p.name not in env:
        env[p.name] = value
        return True
    return _int_value(p, env) == value


def _outer_view(n: Node):
    """A VIEW node as (op, ints, inner): its outermost structured step and the view below it
    (a broadcast after the size-1 reshapes, as `bridge.decompose_view` orders them); None for
    a view with no such form (a permute, slice, pad) or a node that is no view."""
    from rewrites.bridge import decompose_view
    if n.op != Op.VIEW:
        return None
    core, exps = decompose_view(n.srcs[0].shape, n.arg)
    if core is not None and core[0] == "opaque":
        return None
    steps = [(kind, (ax,)) for kind, ax in (core[1] if core else [])] + [("expand", e) for e in exps]
    inner = n.srcs[0]
    for kind, ints in steps[:-1]:
        inner = build(kind, [inner], list(ints), [], [])
    return steps[-1][0], steps[-1][1], inner


def _match_float(p, value: float, env: dict) -> bool:
    if isinstance(p, P.FloatVar):
        return env.setdefault(p.name, value) == value
    return isinstance(p, (int, float)) and float(p) == value


def _guarded(rule: P.Rule, env: dict) -> bool:
    for g in rule.guard:
        x = env[g.x.name]
        if isinstance(g, P.IsFloat) and not x.dtype.is_float:
            return False
        if isinstance(g, P.IsF32) and x.dtype != DType.f32:
            return False
    return True


def _build(p, env: dict) -> Node:
    if isinstance(p, P.Var):
        return env[p.name]
    ts, ints, floats, strs = [], [], [], []
    for a, k in zip(p.args, P.OPS[p.op]):
        if k == "t":
            ts.append(_build(a, env))
        elif k == "i":
            v = _int_value(a, env)
            if v is None:
                raise IRError(f"integer expression {a} in a directly applied rule")
            ints.append(v)
        elif k == "f":
            if isinstance(a, P.FloatVar):
                floats.append(env[a.name])
            elif isinstance(a, (int, float)):
                floats.append(float(a))
            else:
                raise IRError(f"float expression {a} in a directly applied rule")
        else:
            strs.append(a)
    return build(p.op, ts, ints, floats, strs)


def apply_rules(graph: Graph, rules) -> Graph:
    """`graph` with every node that a rule of `rules` matches rewritten (bottom up; at each node
    the first matching rule, again on its result, up to `len(rules)` times; iteratively: any
    depth). Inputs and output order are kept."""
    rules = [r for r in rules if applicable(r)]
    if not rules:
        return graph
    new: dict[Node, Node] = {}
    for n in toposort(graph.outputs):
        srcs = tuple(new[s] for s in n.srcs)
        m = n if srcs == n.srcs else Node(n.op, n.dtype, n.shape, srcs, n.arg)
        for _ in rules:
            out = _rewrite_once(m, rules)
            if out is None:
                break
            m = out
        new[n] = m
    return Graph(graph.inputs, tuple(new[o] for o in graph.outputs))


def _rewrite_once(m: Node, rules) -> Node | None:
    for rule in rules:
        env: dict = {}
        if _match(rule.lhs, m, env) and _guarded(rule, env):
            try:
                out = _build(rule.rhs, env)
            except IRError:
                continue
            if out.shape == m.shape and out.dtype == m.dtype:
                return out
    return None


def kernel_terms(graph: Graph) -> Graph:
    """`graph` with the kernels family's term-making rules applied: its sums of products as
    contraction terms, its products of a softmax as online contractions (the rules that write a
    term as its definition, `kernels.DEFINITIONS`, are for the e-graph only: applied here they
    would undo what the others make)."""
    from rewrites.kernels import DEFINITIONS
    from rewrites.registry import family_rules
    return apply_rules(graph, [r for r in family_rules("kernels") if r.name not in DEFINITIONS])
