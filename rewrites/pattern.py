"""Saturn's small pattern language: rewrite rules as plain data.

A rule is `Rule(name, lhs, rhs, guard)`. `lhs`/`rhs` are trees of `App(op, args)` whose
leaves are pattern variables: `Var` (a tensor), `IntVar` (an axis, size or tile), `FloatVar`
(a scalar). The ops mirror the e-graph term language (see `OPS`): the primitive ops of
`ir.ops` plus a few structured views (expand one axis, split one axis into (n/t, t), ...)
so that rules can talk about broadcasts and tiles. Shapes are never part of a term; a guard
asks for them with `Dim(X, axis)`.

The same data is (1) translated to egglog rules by `rewrites.bridge` and (2) instantiated
as real IR nodes on random shapes by `rewrites.check` to test the rule's soundness.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union


# --- integer and float expressions (axes, sizes, tiles, scalars) ----------------------------

@dataclass(frozen=True)
class IntVar:
    """An integer pattern variable. `kind` ('axis' | 'size' | 'tile') guides random checks."""
    name: str
    kind: str = "axis"

    def __add__(self, o): return IntOp("+", self, o)
    def __sub__(self, o): return IntOp("-", self, o)
    def __mul__(self, o): return IntOp("*", self, o)
    def __floordiv__(self, o): return IntOp("/", self, o)
    def __mod__(self, o): return IntOp("%", self, o)


@dataclass(frozen=True)
class IntOp:
    op: str  # + - * / %
    lhs: "IntExpr"
    rhs: "IntExpr"

    __add__ = IntVar.__add__
    __sub__ = IntVar.__sub__
    __mul__ = IntVar.__mul__
    __floordiv__ = IntVar.__floordiv__
    __mod__ = IntVar.__mod__


@dataclass(frozen=True)
class Dim:
    """The size of tensor variable `x` along `axis` (shape analysis)."""
    x: "Var"
    axis: "IntExpr"


IntExpr = Union[IntVar, IntOp, Dim, int]


@dataclass(frozen=True)
class FloatVar:
    name: str

    def __mul__(self, o): return FloatOp("*", self, o)
    def __add__(self, o): return FloatOp("+", self, o)
    def __sub__(self, o): return FloatOp("-", self, o)


@dataclass(frozen=True)
class FloatOp:
    op: str  # * + neg
    lhs: "FloatExpr"
    rhs: "FloatExpr | None" = None

    __mul__ = FloatVar.__mul__
    __add__ = FloatVar.__add__
    __sub__ = FloatVar.__sub__


@dataclass(frozen=True)
class ToFloat:
    """An integer expression used as a float (e.g. a size n as the scalar n)."""
    x: IntExpr


FloatExpr = Union[FloatVar, FloatOp, ToFloat, float]


# --- tensor patterns ------------------------------------------------------------------------

@dataclass(frozen=True)
class Var:
    """A tensor pattern variable; the same name twice means the same e-class."""
    name: str


@dataclass(frozen=True)
class App:
    op: str
    args: tuple

    def __str__(self) -> str:
        return show(self)


Pattern = Union[Var, App]

# op -> argument kinds: 't' tensor, 'i' integer (axis/size/tile), 'f' float, 's' dtype string.
OPS: dict[str, str] = {
    "exp2": "t", "log2": "t", "sin": "t", "sqrt": "t", "recip": "t", "contiguous": "t",
    "cast": "ts",
    "add": "tt", "mul": "tt", "mod": "tt", "lt": "tt", "where": "ttt",
    "addc": "tf",       # x + c (c a scalar broadcast to x's shape)
    "mulc": "tf",       # x * c
    "sum": "ti", "max": "ti",     # reduce one axis (kept with size 1)
    "expand": "tii",    # expand(x, a, n): axis a of size 1 broadcast to n
    "unsq": "ti",       # insert a size-1 axis at a
    "sqz": "ti",        # remove the size-1 axis a
    "split": "tii",     # split(x, a, t): axis a of size n -> (n/t, t)
    "merge": "ti",      # merge(x, a): axes a, a+1 -> one axis
    "pad": "tiif",      # pad(x, a, p, fill): p elements of `fill` after axis a's end
    "contract": "tti",  # contract(x, y, a): the contraction kernel sum(x * y, a) (floats)
    "attend": "tti",    # attend(x, y, a): the online contraction sum(softmax2(x, a) * y, a) (floats)
}
KERNEL_OPS = ("contract", "attend")           # two operands of one shape, one axis reduced
REDUCING_OPS = ("sum", "max") + KERNEL_OPS     # ops whose integer argument is the axis they reduce
UNARY_OPS = ("exp2", "log2", "sin", "sqrt", "recip")
ELEMENTWISE_OPS = UNARY_OPS + ("cast", "add", "mul", "mod", "lt", "where", "addc", "mulc", "contiguous")
VIEW_OPS = ("expand", "unsq", "sqz", "split", "merge", "pad")


def _app(op: str, *args) -> App:
    kinds = OPS[op]
    if len(args) != len(kinds):
        raise TypeError(f"{op} takes {len(kinds)} arguments ({kinds}), got {len(args)}")
    return App(op, tuple(float(a) if k == "f" and isinstance(a, int) else a for a, k in zip(args, kinds)))


# constructors, one per op (used in rule files: `sum_(mul(x, y), a)`)
def exp2(x): return _app("exp2", x)
def log2(x): return _app("log2", x)
def sin(x): return _app("sin", x)
def sqrt(x): return _app("sqrt", x)
def recip(x): return _app("recip", x)
def contiguous(x): return _app("contiguous", x)
def cast(x, dtype: str): return _app("cast", x, dtype)
def add(x, y): return _app("add", x, y)
def mul(x, y): return _app("mul", x, y)
def mod(x, y): return _app("mod", x, y)
def lt(x, y): return _app("lt", x, y)
def where(c, x, y): return _app("where", c, x, y)
def addc(x, c): return _app("addc", x, c)
def mulc(x, c): return _app("mulc", x, c)
def sum_(x, a): return _app("sum", x, a)
def max_(x, a): return _app("max", x, a)
def expand(x, a, n): return _app("expand", x, a, n)
def unsq(x, a): return _app("unsq", x, a)
def sqz(x, a): return _app("sqz", x, a)
def split(x, a, t): return _app("split", x, a, t)
def merge(x, a): return _app("merge", x, a)
def pad(x, a, p, fill): return _app("pad", x, a, p, fill)
def contract(x, y, a): return _app("contract", x, y, a)
def attend(x, y, a): return _app("attend", x, y, a)


# --- guards -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Cond:
    """`lhs op rhs` over integer expressions; op in == != < > <= >=. `n == Dim(x, a)` with n
    not yet bound binds n."""
    op: str
    lhs: IntExpr
    rhs: IntExpr


@dataclass(frozen=True)
class IsTile:
    """t is one of the tile sizes registered for this search (a relation filled from real dims)."""
    t: IntExpr


@dataclass(frozen=True)
class IsFloat:
    """x holds floating-point values (a dtype analysis), e.g. before padding with -inf."""
    x: "Var"


@dataclass(frozen=True)
class FloatCond:
    """`lhs op rhs` over float expressions; op in < > (e.g. a constant that is 1 up to rounding)."""
    op: str
    lhs: "FloatExpr"
    rhs: "FloatExpr"


@dataclass(frozen=True)
class IsF32:
    """x holds f32 values (a dtype analysis): for rules whose two sides type-check only then."""
    x: "Var"


Guard = Union[Cond, IsTile, IsFloat, IsF32, FloatCond]


def flt(a, b) -> FloatCond: return FloatCond("<", a, b)
def fgt(a, b) -> FloatCond: return FloatCond(">", a, b)
def eq(a, b) -> Cond: return Cond("==", a, b)
def ne(a, b) -> Cond: return Cond("!=", a, b)
def lt_(a, b) -> Cond: return Cond("<", a, b)
def gt(a, b) -> Cond: return Cond(">", a, b)
def ge(a, b) -> Cond: return Cond(">=", a, b)


@dataclass(frozen=True)
class Rule:
    """A rewrite `lhs -> rhs`, applied where every guard holds. Sound means: for every binding
    of the variables that makes lhs well-formed and the guard true, both sides compute the same
    values (checked by `rewrites.check` with the reference interpreter)."""
    name: str
    lhs: Pattern
    rhs: Pattern
    guard: tuple = ()
    family: str = "user"
    doc: str = ""
    # extra error allowed relative to the largest reference magnitude (the check's error
    # bound already counts every rounding of the left side; no built-in rule needs this)
    tolerance: float = field(default=0.0, compare=False)
    # exact over the reals but numerically unstable (it can turn a well-conditioned program
    # into one that cancels catastrophically): checked for exactness only, and kept out of
    # the default search (rewrites.registry)
    unstable: bool = field(default=False, compare=False)
    # sound on infinite inputs too (a max shift meeting a mask's -inf tiles): its check adds
    # inputs with -inf past a cut per row (`ir.numerics.MASKED`). Most algebra is not (x * (y + z)
    # is -inf where x * y + x * z is -inf + inf = NaN), so the other rules are checked on finite inputs
    infinities: bool = field(default=False, compare=False)

    def __str__(self) -> str:
        g = f"  if {', '.join(show_guard(c) for c in self.guard)}" if self.guard else ""
        return f"{self.name}: {show(self.lhs)} -> {show(self.rhs)}{g}"


# --- printing -------------------------------------------------------------------------------

def show_int(e) -> str:
    if isinstance(e, IntVar):
        return e.name
    if isinstance(e, IntOp):
        return f"({show_int(e.lhs)} {e.op} {show_int(e.rhs)})"
    if isinstance(e, Dim):
        return f"dim({e.x.name}, {show_int(e.axis)})"
    return str(e)


def show_float(e) -> str:
    if isinstance(e, FloatVar):
        return e.name
    if isinstance(e, FloatOp):
        return f"({show_float(e.lhs)} {e.op} {show_float(e.rhs)})"
    if isinstance(e, ToFloat):
        return f"float({show_int(e.x)})"
    return repr(e)


def show(p) -> str:
    if isinstance(p, Var):
        return p.name
    parts = []
    for a, k in zip(p.args, OPS[p.op]):
        parts.append(show(a) if k == "t" else show_int(a) if k == "i" else show_float(a) if k == "f" else repr(a))
    return f"{p.op}({', '.join(parts)})"


def show_guard(g) -> str:
    if isinstance(g, FloatCond):
        return f"{show_float(g.lhs)} {g.op} {show_float(g.rhs)}"
    if isinstance(g, IsTile):
        return f"tile({show_int(g.t)})"
    if isinstance(g, IsFloat):
        return f"float({g.x.name})"
    if isinstance(g, IsF32):
        return f"f32({g.x.name})"
    return f"{show_int(g.lhs)} {g.op} {show_int(g.rhs)}"


def variables(p, out=None) -> dict:
    """Every variable in a pattern (tensor, int and float), by name."""
    out = {} if out is None else out
    if isinstance(p, (Var, IntVar, FloatVar)):
        out[p.name] = p
    elif isinstance(p, App):
        for a in p.args:
            variables(a, out)
    elif isinstance(p, (IntOp, FloatOp)):
        variables(p.lhs, out)
        if p.rhs is not None:
            variables(p.rhs, out)
    elif isinstance(p, Dim):
        variables(p.x, out)
        variables(p.axis, out)
    elif isinstance(p, ToFloat):
        variables(p.x, out)
    elif isinstance(p, Cond):
        variables(p.lhs, out)
        variables(p.rhs, out)
    elif isinstance(p, IsTile):
        variables(p.t, out)
    elif isinstance(p, (IsFloat, IsF32)):
        variables(p.x, out)
    elif isinstance(p, FloatCond):
        variables(p.lhs, out)
        variables(p.rhs, out)
    return out
