"""The meaning of every pattern-language op as real IR nodes (`ir.node` constructors).

Used twice: to instantiate a rule's two sides for the soundness check, and to turn an
extracted e-graph term back into an ordinary primitive `Graph`. Structured views become
ordinary VIEW nodes (reshape / expand / pad on a ShapeTracker).
"""
from __future__ import annotations

from ir import node as N
from ir.dtypes import DType
from ir.node import IRError, Node
from ir.ops import Op

_UNARY = {"exp2": Op.EXP2, "log2": Op.LOG2, "sin": Op.SIN, "sqrt": Op.SQRT, "recip": Op.RECIP}
_BINARY = {"add": Op.ADD, "mul": Op.MUL, "mod": Op.MOD, "lt": Op.CMPLT}


def _reshape(x: Node, shape) -> Node:
    shape = tuple(shape)
    if shape == x.shape:
        return x
    return N.move(x, lambda st: st.reshape(shape))


def _axis(x: Node, a: int, extra: int = 0) -> None:
    if not 0 <= a < len(x.shape) + extra:
        raise IRError(f"axis {a} out of range for shape {x.shape}")


def build(op: str, ts: list[Node], ints: list[int], floats: list[float], strs: list[str]) -> Node:
    """One IR node (or a few) computing pattern op `op` on tensors `ts`."""
    if op in _UNARY:
        return N.unary(_UNARY[op], ts[0])
    if op == "contiguous":
        return N.contiguous(ts[0])
    if op == "cast":
        return N.cast(ts[0], DType(strs[0]))
    if op in _BINARY:
        return N.binary(_BINARY[op], ts[0], ts[1])
    if op == "where":
        return N.where(*ts)
    if op in ("addc", "mulc"):
        x = ts[0]
        if not x.dtype.is_float:
            raise IRError(f"{op} on {x.dtype.value}")
        return N.binary(Op.ADD if op == "addc" else Op.MUL, x, N.const(floats[0], x.shape, x.dtype))
    if op == "contract":
        _axis(ts[0], ints[0])
        return N.contract(ts[0], ts[1], (ints[0],))
    if op == "attend":
        _axis(ts[0], ints[0])
        return N.attend(ts[0], ts[1], ints[0])
    if op in ("sum", "max"):
        _axis(ts[0], ints[0])
        return N.reduce(Op.SUM if op == "sum" else Op.MAX, ts[0], (ints[0],))
    x = ts[0]
    s = list(x.shape)
    if op == "expand":
        a, n = ints
        _axis(x, a)
        if s[a] != 1 or n < 1:
            raise IRError(f"expand axis {a} of {x.shape} to {n}")
        s[a] = n
        return N.move(x, lambda st: st.expand(tuple(s)))
    if op == "unsq":
        _axis(x, ints[0], extra=1)
        return _reshape(x, s[:ints[0]] + [1] + s[ints[0]:])
    if op == "sqz":
        _axis(x, ints[0])
        if s[ints[0]] != 1:
            raise IRError(f"squeeze of axis {ints[0]} of {x.shape}")
        return _reshape(x, s[:ints[0]] + s[ints[0] + 1:])
    if op == "split":
        a, t = ints
        _axis(x, a)
        if t < 1 or s[a] % t:
            raise IRError(f"split axis {a} of {x.shape} by {t}")
        return _reshape(x, s[:a] + [s[a] // t, t] + s[a + 1:])
    if op == "merge":
        a = ints[0]
        if not 0 <= a < len(s) - 1:
            raise IRError(f"merge axis {a} of {x.shape}")
        return _reshape(x, s[:a] + [s[a] * s[a + 1]] + s[a + 2:])
    if op == "pad":
        a, p = ints
        _axis(x, a)
        if p < 0:
            raise IRError("negative pad")
        if p == 0:
            return x
        pads = tuple((0, p) if i == a else (0, 0) for i in range(len(s)))
        return N.move(x, lambda st: st.pad(pads, floats[0]), floats[0])
    raise IRError(f"unknown pattern op {op}")
