"""The primitive ops. Every program Saturn compiles is built from these and nothing else.

Fourteen compute ops (exact meaning in `ir.interpreter`), three leaves, two structural ops, and
two kernel ops the e-graph's rules introduce below them (the frontend never builds them):
CONTRACT is a contraction kernel, sum over axes of a * b, products and accumulation in f32 (never
rounded to a half type in between); the backends run it as their matrix-product kernels.
ATTEND is an online contraction, sum over one axis of softmax2(a) * b (softmax2: exp2(a - max a)
normalized over that axis), in f32: flash attention when a holds the scores; the backends run
it as one streaming kernel (no score tensor in memory) or as its primitive definition
(`ir.terms.attend_primitives`).

VIEW carries movement metadata (reshape/permute/expand/slice/pad) on an edge and never
computes; CONTIGUOUS marks a value to be materialized in memory.
"""
from __future__ import annotations

import enum


class Op(enum.Enum):
    # leaves
    INPUT = "input"        # arg: (index, name)
    CONST = "const"        # arg: python scalar, broadcast to the node's shape
    IOTA = "iota"          # i32: each element's own flat (row-major) position
    # unary
    EXP2 = "exp2"
    LOG2 = "log2"
    SIN = "sin"
    SQRT = "sqrt"
    RECIP = "recip"
    CAST = "cast"          # to the node's dtype
    # binary
    ADD = "add"
    MUL = "mul"
    MOD = "mod"            # C-style: sign follows the dividend (fmod / truncating for ints)
    CMPLT = "cmplt"        # a < b -> bool
    # ternary
    WHERE = "where"        # cond ? a : b
    # indexing: arg = axis; out[..., j, ...] = a[..., idx[..., j, ...], ...] (0 out of range)
    GATHER = "gather"
    # reductions: arg = tuple of axes reduced; reduced axes keep size 1
    SUM = "sum"
    MAX = "max"
    # structure
    VIEW = "view"          # arg: ir.view.ShapeTracker mapping the source to this shape
    CONTIGUOUS = "contiguous"
    # kernel kinds (introduced by rewrite rules, rendered by the backends' product kernels)
    CONTRACT = "contract"  # arg: tuple of axes reduced (kept with size 1); srcs a, b of one shape
    ATTEND = "attend"      # arg: (axis,) reduced (kept with size 1); srcs a (scores), b of one shape

    def __repr__(self) -> str:
        return f"Op.{self.name}"


LEAF = frozenset({Op.INPUT, Op.CONST, Op.IOTA})
UNARY = frozenset({Op.EXP2, Op.LOG2, Op.SIN, Op.SQRT, Op.RECIP, Op.CAST})
BINARY = frozenset({Op.ADD, Op.MUL, Op.MOD, Op.CMPLT})
TERNARY = frozenset({Op.WHERE})
ELEMENTWISE = UNARY | BINARY | TERNARY
REDUCE = frozenset({Op.SUM, Op.MAX})
INDEXING = frozenset({Op.GATHER})
STRUCTURAL = frozenset({Op.VIEW, Op.CONTIGUOUS})
KERNEL = frozenset({Op.CONTRACT, Op.ATTEND})
# ops whose arg is the axes they reduce (each kept with size 1)
REDUCING = REDUCE | KERNEL
COMPUTE = ELEMENTWISE | REDUCE | INDEXING | KERNEL
# algebraic properties, used by rewrite rules and the fuser
COMMUTATIVE = frozenset({Op.ADD, Op.MUL})
ASSOCIATIVE = frozenset({Op.ADD, Op.MUL, Op.SUM, Op.MAX})
# identity element of each reduction, used to pad a split axis
REDUCE_IDENTITY = {Op.SUM: 0.0, Op.MAX: float("-inf")}

ARITY = {**{o: 0 for o in LEAF}, **{o: 1 for o in UNARY | REDUCE | STRUCTURAL},
         **{o: 2 for o in BINARY}, Op.WHERE: 3, Op.GATHER: 2, Op.CONTRACT: 2, Op.ATTEND: 2}

# name, arity, dtype rule, numpy meaning of the compute ops (rendered into docs/ir.md by
# `op_table_markdown`; a test checks the doc against it). Halves compute in f32, round on store.
OP_TABLE = [
    ("exp2", 1, "float -> same", "np.exp2(a)"),
    ("log2", 1, "float -> same", "np.log2(a)"),
    ("sin", 1, "float -> same", "np.sin(a)"),
    ("sqrt", 1, "float -> same", "np.sqrt(a)"),
    ("recip", 1, "float -> same", "1 / a"),
    ("cast", 1, "any -> target; float -> i32 truncates, -> bool is a != 0", "a.astype(target)"),
    ("add", 2, "T, T -> T", "a + b"),
    ("mul", 2, "T, T -> T", "a * b"),
    ("mod", 2, "T, T -> T (not bool); C-style, sign of a", "np.fmod(a, b)"),
    ("cmplt", 2, "T, T -> bool", "a < b"),
    ("where", 3, "bool, T, T -> T", "np.where(c, a, b)"),
    ("sum", 1, "T -> T (not bool); accumulates in >= f32", "a.sum(axes, keepdims=True)"),
    ("max", 1, "T -> T; NaN propagates", "a.max(axes, keepdims=True)"),
    ("gather", 2, "T, i32 -> T; arg axis; shape of idx; 0 where idx is outside [0, n)",
     "np.take_along_axis(a, idx, axis)"),
    ("contract", 2, "T, T -> T (float); arg axes; products and sums in >= f32",
     "(a * b).sum(axes, keepdims=True)"),
    ("attend", 2, "T, T -> T (float); arg (axis,); computed in >= f32",
     "(softmax2(a, axis) * b).sum(axis, keepdims=True)"),
]

# the leaves and structural ops, same columns
OTHER_OP_TABLE = [
    ("input", 0, "-> declared dtype; arg (index, name)", "args[index]"),
    ("const", 0, "-> declared dtype; arg value", "np.full(shape, value, dtype)"),
    ("iota", 0, "-> i32; each element's flat position", "np.arange(size).reshape(shape)"),
    ("view", 1, "T -> T; arg ShapeTracker", "apply_tracker(tracker, a)"),
    ("contiguous", 1, "T -> T; materializes", "a.copy()"),
]


def op_table_markdown() -> str:
    """The markdown table of every op, as it appears in docs/ir.md."""
    lines = ["| op | arity | dtypes | numpy meaning |", "|---|---|---|---|"]
    for name, arity, rule, meaning in OP_TABLE + OTHER_OP_TABLE:
        lines.append(f"| `{name}` | {arity} | {rule} | `{meaning}` |")
    return "\n".join(lines)
