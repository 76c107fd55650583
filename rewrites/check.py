"""Soundness check of a rule: instantiate both sides as real IR nodes on random shapes and
dtypes, evaluate them on random inputs, compare.

The left side is evaluated in float64 with a propagated error bound (`ir.bounds`); the right
side, run by the reference interpreter in the program's own types, must stay within that
bound. Inputs cycle through families that expose instability (`ir.numerics`: large
magnitudes, a mean-1e4 offset, cancelling signs, wide dynamic range), so a rule that is exact
over the reals but loses digits (distributing a product over a sum that cancels) fails. Such a
rule may be kept marked `unstable` (out of the default search): it is then checked for
exactness only, both sides in float64, each within its own bound.

Instantiation walks the left-hand side top-down from a root shape whose sizes are unknown
cells; each op constrains or derives its children's shapes (sum: the reduced axis is 1 on
top and any size below; split: a+1 has size t; ...). Unknown sizes are drawn at random, so
every trial is a different well-formed instance; guards are evaluated on the drawn shapes
(binding `n == dim(x, a)`) and instances that fail them are redrawn.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from ir import node as N
from ir.dtypes import DType
from ir import numerics
from ir.bounds import evaluate_nodes_bounded, mismatches
from ir.interpreter import evaluate_nodes
from ir.node import IRError, Node
from rewrites import pattern as P
from rewrites.build import build

CHECK_TILES = (2, 3, 4)
SIZES = (1, 2, 3, 4, 5, 6, 8, 12)
# input families by instance, per dtype: the first is plain, the others expose instability
# (x200 reaches f32 overflow: a rule may turn an overflow into a finite value, never the reverse)
FAMILIES = {
    DType.f32: (numerics.NORMAL, numerics.Family("x200", 200.0), numerics.OFFSET, numerics.CANCEL),
    DType.f16: (numerics.NORMAL, numerics.Family("offset100", 1.0, 100.0)),   # squares stay in range
    DType.bf16: (numerics.NORMAL, numerics.Family("offset100", 1.0, 100.0)),
}


class Retry(Exception):
    """This random draw does not fit the pattern; draw again."""


class Cell:
    __slots__ = ("v",)

    def __init__(self, v=None):
        self.v = v


@dataclass
class CheckResult:
    rule: str
    ok: bool
    trials: int
    message: str = ""

    unstable: bool = False

    def __str__(self) -> str:
        mark = " [unstable: exact only, not in the default search]" if self.unstable else ""
        return (f"{'ok  ' if self.ok else 'FAIL'} {self.rule} ({self.trials} instances){mark}"
                f"{': ' + self.message if self.message else ''}")


class _Instance:
    def __init__(self, rng: random.Random, dtype: DType):
        self.rng, self.dtype = rng, dtype
        self.shapes: dict[str, list[Cell]] = {}
        self.dtypes: dict[str, DType] = {}
        self.ints: dict[str, int] = {}
        self.floats: dict[str, float] = {}

    # --- values ---
    def force(self, cell: Cell) -> int:
        if cell.v is None:
            cell.v = self.rng.choice(SIZES)
        return cell.v

    def int_(self, e, kind_hint: str = "size", bound: int = 8) -> int:
        if isinstance(e, int):
            return e
        if isinstance(e, P.IntVar):
            if e.name not in self.ints:
                if e.kind == "tile":
                    self.ints[e.name] = self.rng.choice(CHECK_TILES)
                elif e.kind == "axis" or kind_hint == "axis":
                    if bound <= 0:
                        raise Retry()
                    self.ints[e.name] = self.rng.randrange(bound)
                else:
                    self.ints[e.name] = self.rng.choice(SIZES[1:])
            return self.ints[e.name]
        if isinstance(e, P.Dim):
            cells = self.shapes.get(e.x.name)
            if cells is None:
                raise Retry()
            ax = self.int_(e.axis, "axis", len(cells))
            if not 0 <= ax < len(cells):
                raise Retry()
            return self.force(cells[ax])
        lhs = self.int_(e.lhs, kind_hint, bound)
        rhs = self.int_(e.rhs, kind_hint, bound)
        if e.op in "/%" and rhs == 0:
            raise Retry()
        return {"+": lhs + rhs, "-": lhs - rhs, "*": lhs * rhs, "/": lhs // rhs, "%": lhs % rhs}[e.op]

    def float_(self, e) -> float:
        if isinstance(e, (int, float)):
            return float(e)
        if isinstance(e, P.FloatVar):
            if e.name not in self.floats:  # sometimes an exact special value, so float guards hold
                self.floats[e.name] = self.rng.choice((1.0, -1.0, 0.5, 2.0, 0.0)) if self.rng.random() < 0.3 \
                    else self.rng.choice((-1, 1)) * self.rng.uniform(0.25, 2.0)
            return self.floats[e.name]
        if isinstance(e, P.ToFloat):
            return float(self.int_(e.x))
        lhs = self.float_(e.lhs)
        if e.op == "neg":
            return -lhs
        rhs = self.float_(e.rhs)
        return lhs * rhs if e.op == "*" else lhs + rhs if e.op == "+" else lhs - rhs

    # --- shapes, top-down ---
    def need(self, cell: Cell, v: int) -> None:
        if cell.v is None:
            cell.v = v
        elif cell.v != v:
            raise Retry()

    def walk(self, p, shape: list[Cell], dtype: DType) -> None:
        if isinstance(p, P.Var):
            if p.name in self.shapes:
                old = self.shapes[p.name]
                if len(old) != len(shape) or self.dtypes[p.name] != dtype:
                    raise Retry()
                for o, s in zip(old, shape):
                    if o.v is None and s.v is None:
                        self.force(o)
                    if o.v is None:
                        o.v = s.v
                    else:
                        self.need(s, o.v)
            else:
                self.shapes[p.name] = shape
                self.dtypes[p.name] = dtype
            return
        op, args, r = p.op, p.args, len(shape)
        if op in ("exp2", "log2", "sin", "sqrt", "recip", "contiguous", "addc", "mulc"):
            if not dtype.is_float:
                raise Retry()
            return self.walk(args[0], shape, dtype)
        if op in ("add", "mul", "mod"):
            self.walk(args[0], shape, dtype)
            return self.walk(args[1], list(shape), dtype)
        if op == "lt":
            if dtype != DType.bool:
                raise Retry()
            self.walk(args[0], shape, self.dtype)
            return self.walk(args[1], list(shape), self.dtype)
        if op == "where":
            self.walk(args[0], shape, DType.bool)
            self.walk(args[1], list(shape), dtype)
            return self.walk(args[2], list(shape), dtype)
        if op == "cast":
            if DType(args[1]) != dtype:
                raise Retry()
            source = self.rng.choice([d for d in (DType.f32, DType.f16, DType.bf16, DType.i32) if d != dtype])
            return self.walk(args[0], shape, source)
        if op in P.REDUCING_OPS:     # operands, then the reduced axis
            if op in P.KERNEL_OPS and not dtype.is_float:
                raise Retry()
            a = self.int_(args[-1], "axis", r)
            if not 0 <= a < r:
                raise Retry()
            self.need(shape[a], 1)
            child = list(shape)
            child[a] = Cell()
            for k, x in enumerate(args[:-1]):
                self.walk(x, child if k == 0 else list(child), dtype)
            return
        if op == "expand":
            a = self.int_(args[1], "axis", r)
            if not 0 <= a < r:
                raise Retry()
            if isinstance(args[2], P.IntVar) and args[2].name not in self.ints:
                self.ints[args[2].name] = self.force(shape[a]) if shape[a].v is not None else \
                    self.rng.choice(SIZES[1:])
            n = self.int_(args[2])
            self.need(shape[a], n)
            child = list(shape)
            child[a] = Cell(1)
            return self.walk(args[0], child, dtype)
        if op == "unsq":
            a = self.int_(args[1], "axis", r)
            if not 0 <= a < r:
                raise Retry()
            self.need(shape[a], 1)
            return self.walk(args[0], shape[:a] + shape[a + 1:], dtype)
        if op == "sqz":
            a = self.int_(args[1], "axis", r + 1)
            if not 0 <= a <= r:
                raise Retry()
            return self.walk(args[0], shape[:a] + [Cell(1)] + shape[a:], dtype)
        if op == "split":
            a = self.int_(args[1], "axis", r - 1)
            if not 0 <= a < r - 1:
                raise Retry()
            t = self.int_(args[2])
            self.need(shape[a + 1], t)
            return self.walk(args[0], shape[:a] + [Cell(self.force(shape[a]) * t)] + shape[a + 2:], dtype)
        if op == "merge":
            a = self.int_(args[1], "axis", r)
            if not 0 <= a < r:
                raise Retry()
            total = self.force(shape[a])
            q = self.rng.choice([d for d in range(1, total + 1) if total % d == 0])
            return self.walk(args[0], shape[:a] + [Cell(total // q), Cell(q)] + shape[a + 1:], dtype)
        if op == "pad":
            a = self.int_(args[1], "axis", r)
            if not 0 <= a < r:
                raise Retry()
            p = self.int_(args[2])
            size = self.force(shape[a]) - p
            if size < 1:
                raise Retry()
            child = list(shape)
            child[a] = Cell(size)
            return self.walk(args[0], child, dtype)
        raise Retry()

    # --- guards ---
    def guards(self, guard) -> None:
        pending = list(guard)
        for g in list(pending):  # bindings first: `n == dim(x, a)` with n unbound
            if isinstance(g, P.Cond) and g.op == "==" and isinstance(g.lhs, P.IntVar) and g.lhs.name not in self.ints:
                self.ints[g.lhs.name] = self.int_(g.rhs)
                pending.remove(g)
        for g in pending:
            if isinstance(g, P.IsTile):
                if self.int_(g.t) not in CHECK_TILES:
                    raise Retry()
                continue
            if isinstance(g, P.FloatCond):
                lhs, rhs = self.float_(g.lhs), self.float_(g.rhs)
                if not (lhs < rhs if g.op == "<" else lhs > rhs):
                    raise Retry()
                continue
            if isinstance(g, P.IsFloat):
                if g.x.name not in self.dtypes or not self.dtypes[g.x.name].is_float:
                    raise Retry()
                continue
            if isinstance(g, P.IsF32):
                if self.dtypes.get(g.x.name) != DType.f32:
                    raise Retry()
                continue
            lhs, rhs = self.int_(g.lhs, "axis", 4), self.int_(g.rhs, "axis", 4)
            ok = {"==": lhs == rhs, "!=": lhs != rhs, "<": lhs < rhs, ">": lhs > rhs, "<=": lhs <= rhs,
                  ">=": lhs >= rhs}[g.op]
            if not ok:
                raise Retry()

    # --- IR nodes ---
    def node(self, p, leaves: dict[str, Node]) -> Node:
        if isinstance(p, P.Var):
            return leaves[p.name]
        ts, ints, floats, strs = [], [], [], []
        for arg, kind in zip(p.args, P.OPS[p.op]):
            if kind == "t":
                ts.append(self.node(arg, leaves))
            elif kind == "i":
                ints.append(self.int_(arg))
            elif kind == "f":
                floats.append(self.float_(arg))
            else:
                strs.append(arg)
        return build(p.op, ts, ints, floats, strs)


def instantiate(rule: P.Rule, rng: random.Random, dtype: DType, attempts: int = 400):
    """(lhs node, rhs node, leaves) for one random well-formed instance, or None."""
    for attempt in range(attempts):
        inst = _Instance(rng, dtype)
        try:
            rank = rng.choice((1, 2, 3, 4))
            root_dtype = DType.bool if attempt % 4 == 3 else dtype   # rules on comparisons
            inst.walk(rule.lhs, [Cell() for _ in range(rank)], root_dtype)
            for cells in inst.shapes.values():
                for c in cells:
                    inst.force(c)
            inst.guards(rule.guard)
            leaves = {name: N.input_(i, name, tuple(c.v for c in cells), inst.dtypes[name])
                      for i, (name, cells) in enumerate(sorted(inst.shapes.items()))}
            lhs = inst.node(rule.lhs, leaves)
        except (Retry, IRError, KeyError, ZeroDivisionError, ValueError):
            continue
        try:
            rhs = inst.node(rule.rhs, leaves)
        except (Retry, IRError, ZeroDivisionError, ValueError) as e:
            # the left side is well-formed and the guard holds, but the right side is not
            shapes = ", ".join(f"{k}: {v.dtype.value}{list(v.shape)}" for k, v in leaves.items())
            raise IllFormed(f"right-hand side is ill-formed on {shapes}: {e}") from None
        return lhs, rhs, leaves
    return None


class IllFormed(Exception):
    """The rule's right-hand side cannot be built where its left-hand side matches."""


def _random_array(n: Node, rng: np.random.Generator, family: numerics.Family) -> np.ndarray:
    if n.dtype == DType.i32:
        return rng.integers(-8, 8, n.shape).astype(np.int32)
    return numerics.random_array(rng, n.shape, n.dtype, family)


def _differs(lhs: Node, rhs: Node, env, exact_only: bool, slack: float = 0.0) -> str | None:
    """Why the right side is not within the left side's error bound, or None. With
    `exact_only`, both sides are evaluated in float64 and must agree within their two bounds
    (the rule is exact over the reals, whatever its rounding). `slack`: extra error allowed,
    relative to the largest finite reference magnitude (Rule.tolerance)."""
    want, = evaluate_nodes_bounded([lhs], env)
    if slack:
        fin = np.isfinite(want.value.astype(np.float64))
        top = float(np.abs(want.value[fin]).max(initial=0.0)) if fin.any() else 0.0
        want.bound = want.bound + slack * top
    if exact_only:
        other, = evaluate_nodes_bounded([rhs], env)
        bound = want.bound + other.bound
        got = other.value if lhs.dtype.is_float else other.value
        dtype = DType.f32 if lhs.dtype.is_float else lhs.dtype   # float64 values: compare unrounded
        bad, ratio = mismatches(want.value, bound, got, dtype)
    else:
        got, = evaluate_nodes([rhs], env)
        bad, ratio = mismatches(want.value, want.bound, got, lhs.dtype)
    if not bad.any():
        return None
    i = int(np.argmax(np.where(bad, ratio, -1.0))) if bad.ndim else 0
    g, w = np.asarray(got, np.float64).reshape(-1)[i], want.value.astype(np.float64).reshape(-1)[i]
    return f"{int(bad.sum())} of {bad.size} elements outside the error bound (e.g. {g:.6g} vs {w:.6g}, {ratio.reshape(-1)[i]:.3g}x the bound)"


def check_rule(rule: P.Rule, trials: int = 12, seed: int = 0,
               dtypes=(DType.f32, DType.f16, DType.bf16)) -> CheckResult:
    """Evaluate both sides of `rule` on `trials` random instances (shapes, dtypes, inputs)."""
    rng = random.Random(f"{rule.name}:{seed}")
    nprng = np.random.default_rng(seed)
    done = 0
    for i in range(trials):
        inst = None
        for j in range(len(dtypes)):  # this trial's dtype first; others if the rule fixes one
            dtype = dtypes[(i + j) % len(dtypes)]
            try:
                inst = instantiate(rule, rng, dtype, attempts=400 if j == 0 else 100)
            except IllFormed as e:
                return CheckResult(rule.name, False, done + 1, str(e))
            if inst is not None:
                break
        if inst is None:
            continue
        lhs, rhs, leaves = inst
        if lhs.shape != rhs.shape or lhs.dtype != rhs.dtype:
            return CheckResult(rule.name, False, done + 1,
                               f"sides differ in type: {lhs.dtype.value}{list(lhs.shape)} vs "
                               f"{rhs.dtype.value}{list(rhs.shape)}")
        families = FAMILIES.get(dtype, (numerics.NORMAL,))
        if rule.infinities and dtype.is_float:     # masked inputs second, so few trials reach them
            families = families[:1] + (numerics.MASKED,) + families[1:]
        family = families[(i // len(dtypes)) % len(families)]
        env = {leaf: _random_array(leaf, nprng, family) for leaf in leaves.values()}
        done += 1
        why = _differs(lhs, rhs, env, exact_only=rule.unstable, slack=rule.tolerance)
        if why:
            shapes = ", ".join(f"{k}: {v.dtype.value}{list(v.shape)}" for k, v in leaves.items())
            return CheckResult(rule.name, False, done, f"differs on {shapes}, {family} inputs: {why}")
    if done == 0:
        return CheckResult(rule.name, False, 0, "no well-formed instance found; cannot check")
    return CheckResult(rule.name, True, done, unstable=rule.unstable)
