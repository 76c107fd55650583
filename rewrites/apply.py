"""Rules applied straight to a program, without an e-graph: one bottom-up pass that rewrites
every node a rule's left side matches into its right side.

This is how the program a user wrote gets its kernel terms (the kernels family) for the
candidate that keeps its algorithm, and for a program too big to explore: the same rules as
data, not a second matcher. Only rules over the primitive ops, the scalar forms (`addc`,
`mulc`) and kernel terms apply here (a left side with a structured view such as `expand` or
`split` needs the e-graph's view decomposition); the guard may test dtypes (`IsFloat`, `IsF32`).
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
            "where": Op.WHERE, "sum": Op.SUM, "max": Op.MAX, "contract": Op.CONTRACT,
            "addc": Op.ADD, "mulc": Op.MUL}
_GUARDS = (P.IsFloat, P.IsF32)


def applicable(rule: P.Rule) -> bool:
    """Whether `rule` can run here: its left side uses only primitive ops, its guard dtypes."""
    def ok(p) -> bool:
        return isinstance(p, P.Var) or (p.op in _MATCHES and all(
            ok(a) for a, k in zip(p.args, P.OPS[p.op]) if k == "t"))
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
    if n.op != _MATCHES[p.op] or len(n.srcs) != sum(k == "t" for k in P.OPS[p.op]):
        return False
    if p.op in ("sum", "max", "contract"):
        if len(n.arg) != 1:
            return False
        axis = p.args[-1]
        if isinstance(axis, P.IntVar):
            if env.setdefault(axis.name, n.arg[0]) != n.arg[0]:
                return False
        elif axis != n.arg[0]:
            return False
    tensors = [a for a, k in zip(p.args, P.OPS[p.op]) if k == "t"]
    return all(_match(a, s, env) for a, s in zip(tensors, n.srcs))


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
            if not isinstance(a, (int, P.IntVar)):
                raise IRError(f"integer expression {a} in a directly applied rule")
            ints.append(a if isinstance(a, int) else env[a.name])
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
    """`graph` with every node that a rule of `rules` matches rewritten (bottom up, the first
    matching rule per node, iteratively: any depth). Inputs and output order are kept."""
    rules = [r for r in rules if applicable(r)]
    if not rules:
        return graph
    new: dict[Node, Node] = {}
    for n in toposort(graph.outputs):
        srcs = tuple(new[s] for s in n.srcs)
        m = n if srcs == n.srcs else Node(n.op, n.dtype, n.shape, srcs, n.arg)
        for rule in rules:
            env: dict = {}
            if _match(rule.lhs, m, env) and _guarded(rule, env):
                try:
                    out = _build(rule.rhs, env)
                except IRError:
                    continue
                if out.shape == m.shape and out.dtype == m.dtype:
                    m = out
                    break
        new[n] = m
    return Graph(graph.inputs, tuple(new[o] for o in graph.outputs))


def kernel_terms(graph: Graph) -> Graph:
    """`graph` with the kernels family's term-making rules applied: its sums of products as
    contraction terms (a rule that takes a term apart, e.g. contraction-as-sum, is for the
    e-graph only: applied here it would undo what the others make)."""
    from rewrites.registry import family_rules
    return apply_rules(graph, [r for r in family_rules("kernels") if not _has_kernel_op(r.lhs)])


def _has_kernel_op(p) -> bool:
    return isinstance(p, P.App) and (p.op in P.KERNEL_OPS or any(
        _has_kernel_op(a) for a, k in zip(p.args, P.OPS[p.op]) if k == "t"))
