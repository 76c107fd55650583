"""One immutable, hash-consed node type for the primitive IR.

Building the same (op, dtype, shape, srcs, arg) twice returns the same object, so structural
equality is identity and common sub-expressions are shared for free.
"""
from __future__ import annotations

import math
import struct
import weakref

from ir.dtypes import DType
from ir.ops import ARITY, BINARY, REDUCE, UNARY, Op
from ir.view import Shape, ShapeTracker, View, same_float


class IRError(ValueError):
    """An ill-formed primitive graph (a bug in whatever built it, not a user error)."""


def _arg_key(arg):
    # 0.0 and -0.0 hash equal and NaN != NaN: key floats by their bits
    if isinstance(arg, float):
        return ("f", struct.pack("<d", arg))
    if isinstance(arg, bool):
        return ("b", arg)
    return arg


class Node:
    __slots__ = ("op", "dtype", "shape", "srcs", "arg", "__weakref__")
    _interned: "weakref.WeakValueDictionary[tuple, Node]" = weakref.WeakValueDictionary()

    op: Op
    dtype: DType
    shape: Shape
    srcs: tuple["Node", ...]
    arg: object

    def __new__(cls, op: Op, dtype: DType, shape: Shape, srcs: tuple = (), arg=None):
        shape, srcs = tuple(shape), tuple(srcs)
        key = (op, dtype, shape, srcs, _arg_key(arg))
        node = cls._interned.get(key)
        if node is None:
            node = object.__new__(cls)
            node.op, node.dtype, node.shape, node.srcs, node.arg = op, dtype, shape, srcs, arg
            cls._interned[key] = node
        return node

    def __setattr__(self, name, value):
        if hasattr(self, "arg"):
            raise AttributeError("Node is immutable")
        object.__setattr__(self, name, value)

    def __reduce__(self):
        return (Node, (self.op, self.dtype, self.shape, self.srcs, self.arg))

    def __repr__(self) -> str:
        return f"Node({self.op.value}, {self.dtype.value}{list(self.shape)})"

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


# --- constructors that check well-formedness -----------------------------------------------

def input_(index: int, name: str, shape: Shape, dtype: DType) -> Node:
    return Node(Op.INPUT, dtype, tuple(shape), (), (index, name))


def const(value, shape: Shape, dtype: DType) -> Node:
    if dtype.is_float:
        value = float(value)
    elif dtype == DType.bool:
        value = bool(value)
    else:
        value = dtype.wrap(value)    # modulo 2**bits, as numpy's and C's conversions do
    return Node(Op.CONST, dtype, tuple(shape), (), value)


def iota(shape: Shape) -> Node:
    """i32 whose every element is its own row-major position (arange(n) for a 1-D shape)."""
    shape = tuple(shape)
    if math.prod(shape) > 2 ** 31:
        raise IRError(f"iota of shape {shape} does not fit i32")
    return Node(Op.IOTA, DType.i32, shape, (), None)


def gather(x: Node, idx: Node, axis: int) -> Node:
    """x read along `axis` at the positions in idx (i32, x's rank, x's sizes on every other
    axis); positions outside [0, x.shape[axis]) read 0."""
    if idx.dtype != DType.i32:
        raise IRError(f"gather needs i32 indices, got {idx.dtype.value}")
    if len(idx.shape) != len(x.shape) or not 0 <= axis < len(x.shape):
        raise IRError(f"gather along axis {axis} needs indices of rank {len(x.shape)}, got {idx!r}")
    if any(a != b for i, (a, b) in enumerate(zip(x.shape, idx.shape)) if i != axis):
        raise IRError(f"gather along axis {axis}: {x!r} and indices {idx!r} differ on another axis")
    return Node(Op.GATHER, x.dtype, idx.shape, (x, idx), axis)


def unary(op: Op, x: Node) -> Node:
    if op not in UNARY or op == Op.CAST:
        raise IRError(f"{op} is not a unary math op")
    if not x.dtype.is_float:
        raise IRError(f"{op.value} needs a float operand, got {x.dtype.value}")
    return Node(op, x.dtype, x.shape, (x,))


def cast(x: Node, dtype: DType) -> Node:
    return x if x.dtype == dtype else Node(Op.CAST, dtype, x.shape, (x,))


def binary(op: Op, a: Node, b: Node) -> Node:
    if op not in BINARY:
        raise IRError(f"{op} is not binary")
    if a.shape != b.shape or a.dtype != b.dtype:
        raise IRError(f"{op.value} needs equal shapes and dtypes, got {a!r}, {b!r}")
    if op == Op.MOD and a.dtype == DType.bool:
        raise IRError("mod on bool")
    return Node(op, DType.bool if op == Op.CMPLT else a.dtype, a.shape, (a, b))


def where(c: Node, a: Node, b: Node) -> Node:
    if c.dtype != DType.bool or a.dtype != b.dtype or not (c.shape == a.shape == b.shape):
        raise IRError(f"where needs (bool, T, T) of one shape, got {c!r}, {a!r}, {b!r}")
    return Node(Op.WHERE, a.dtype, a.shape, (c, a, b))


def reduce(op: Op, x: Node, axes) -> Node:
    if op not in REDUCE:
        raise IRError(f"{op} is not a reduction")
    axes = tuple(sorted(set(axes)))
    if not axes or any(not 0 <= a < len(x.shape) for a in axes):
        raise IRError(f"bad reduce axes {axes} for shape {x.shape}")
    if op == Op.SUM and x.dtype == DType.bool:
        raise IRError("sum on bool (cast to i32 first)")
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    return Node(op, x.dtype, shape, (x,), axes)


def contract(a: Node, b: Node, axes) -> Node:
    """The contraction kernel sum(a * b, axes): a and b of one shape and one float dtype."""
    axes = tuple(sorted(set(axes)))
    if a.shape != b.shape or a.dtype != b.dtype or not a.dtype.is_float:
        raise IRError(f"contract needs two float operands of one shape and dtype, got {a!r}, {b!r}")
    if not axes or any(not 0 <= x < len(a.shape) for x in axes):
        raise IRError(f"bad contract axes {axes} for shape {a.shape}")
    shape = tuple(1 if i in axes else s for i, s in enumerate(a.shape))
    return Node(Op.CONTRACT, a.dtype, shape, (a, b), axes)


def attend(a: Node, b: Node, axis: int) -> Node:
    """The online contraction sum(softmax2(a, axis) * b, axis): a (the scores) and b of one shape
    and one float dtype; softmax2(a) = exp2(a - max a) / sum exp2(a - max a) along `axis`."""
    if a.shape != b.shape or a.dtype != b.dtype or not a.dtype.is_float:
        raise IRError(f"attend needs two float operands of one shape and dtype, got {a!r}, {b!r}")
    if not 0 <= axis < len(a.shape):
        raise IRError(f"bad attend axis {axis} for shape {a.shape}")
    shape = tuple(1 if i == axis else s for i, s in enumerate(a.shape))
    return Node(Op.ATTEND, a.dtype, shape, (a, b), (axis,))


def view(x: Node, st: ShapeTracker) -> Node:
    """x read through `st` (whose views[0] indexes x's contiguous layout)."""
    if st.is_identity and st.shape == x.shape:
        return x
    return Node(Op.VIEW, x.dtype, st.shape, (x,), st)


def is_pure_reshape(v: Node) -> bool:
    """v reads its source's contiguous layout in order (a reshape, nothing else)."""
    return v.op == Op.VIEW and len(v.arg.views) == 1 and v.arg.views[0] == View.contiguous(v.shape) \
        and v.numel == v.srcs[0].numel


def move(x: Node, fn, fill: float | None = None) -> Node:
    """Apply a movement `fn(tracker) -> tracker` to x, extending x's own view if it has one."""
    if x.op == Op.VIEW and (fill is None or not x.arg.has_mask or same_float(x.arg.fill, fill)):
        return view(x.srcs[0], fn(x.arg))
    return view(x, fn(ShapeTracker.from_shape(x.shape)))


def contiguous(x: Node) -> Node:
    return x if x.op == Op.CONTIGUOUS else Node(Op.CONTIGUOUS, x.dtype, x.shape, (x,))


def check_arity(node: Node) -> None:
    if len(node.srcs) != ARITY[node.op]:
        raise IRError(f"{node.op.value} takes {ARITY[node.op]} sources, got {len(node.srcs)}")
