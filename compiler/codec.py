"""A data-only serialization of Saturn's IR objects, for files that are loaded later.

The winners' cache (`compiler/cache.py`) and saved functions (`compiler/saved.py`) store a
Graph, a backend schedule and a lowered kernel program. Encoding turns them into JSON: plain
values (None, bool, int, str; floats as `float.hex` so -0.0, NaN and inf survive; lists,
tuples, dicts), the enums `DType` and `Op` by value, and objects — IR nodes and the dataclasses
named in `TYPES` — in one table, each written once (shared sub-trees stay shared) and after
everything it refers to. Decoding rebuilds only what that table names, through each class's
own constructor with exactly its fields; anything else (an unknown type tag, a field the class
does not have, a reference forward or out of range, a stray JSON float) is a `CodecError`. No
name in a file is ever looked up outside `TYPES`, so loading a file cannot run its code.
"""
from __future__ import annotations

import dataclasses
import importlib
import json

from ir.dtypes import DType
from ir.node import Node, check_arity
from ir.ops import Op

FORMAT = 1

# type tag -> (module, class). The only classes a file can name; imported when first needed
# (the CUDA schedule classes import no CUDA driver).
TYPES = {
    "Graph": ("ir.graph", "Graph"),
    "View": ("ir.view", "View"),
    "ShapeTracker": ("ir.view", "ShapeTracker"),
    **{name: ("ir.kernel", name) for name in (
        "Var", "Div", "Mod", "Lin", "Bound", "Load", "Const", "Compute", "Reduce", "Ref", "Iota", "Gather",
        "Let", "Online", "Store", "Kernel", "Buffer", "KernelProgram", "KernelSchedule", "Schedule")},
    "cuda.Schedule": ("backends.cuda.render", "Schedule"),
    "cuda.TCConfig": ("backends.cuda.templates.gemm_tc", "TCConfig"),
    "cuda.SimtConfig": ("backends.cuda.templates.gemm_simt", "SimtConfig"),
    "cuda.AttnConfig": ("backends.cuda.templates.attention", "AttnConfig"),
    "cuda.WGConfig": ("backends.cuda.templates.gemm_wgmma", "WGConfig"),
    "cuda.TMAConfig": ("backends.cuda.templates.gemm_tma", "TMAConfig"),
    "cuda.AttnWGConfig": ("backends.cuda.templates.attention_wgmma", "AttnWGConfig"),
}
NODE = "Node"          # ir.node.Node: not a dataclass, built by Node(op, dtype, shape, srcs, arg)


class CodecError(ValueError):
    """Data that is not a valid encoding (or an object that cannot be encoded)."""


def _class(tag: str):
    module, name = TYPES[tag]
    return getattr(importlib.import_module(module), name)


_TAGS = {where: tag for tag, where in TYPES.items()}


def _tag_of(obj) -> str | None:
    return _TAGS.get((type(obj).__module__, type(obj).__name__))


def _fields(obj) -> dict:
    if isinstance(obj, Node):
        return {"op": obj.op, "dtype": obj.dtype, "shape": obj.shape, "srcs": obj.srcs, "arg": obj.arg}
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}


def _is_object(v) -> bool:
    return isinstance(v, Node) or (dataclasses.is_dataclass(v) and not isinstance(v, type))


# --- encoding ----------------------------------------------------------------------------------

def encode(value) -> dict:
    """`value` (plain data, IR nodes, the dataclasses in TYPES) as JSON-ready data."""
    objects, index = [], {}
    for obj in _post_order(value):
        tag = NODE if isinstance(obj, Node) else _tag_of(obj)
        if tag is None:
            raise CodecError(f"cannot store a {type(obj).__module__}.{type(obj).__qualname__}")
        objects.append([tag, {k: _plain(v, index) for k, v in _fields(obj).items()}])
        index[id(obj)] = len(objects) - 1
    return {"format": FORMAT, "objects": objects, "value": _plain(value, index)}


def dumps(value) -> bytes:
    return json.dumps(encode(value), separators=(",", ":"), allow_nan=False).encode()


def _post_order(root) -> list:
    """Every object reachable from `root`, each after the objects it refers to (iterative:
    graphs can be thousands of nodes deep)."""
    order, done, stack = [], set(), [(root, False)]
    while stack:
        v, expanded = stack.pop()
        if _is_object(v):
            if id(v) in done:
                continue
            if expanded:
                done.add(id(v))
                order.append(v)
                continue
            stack.append((v, True))
            stack.extend((c, False) for c in reversed(list(_fields(v).values())))
        elif isinstance(v, (list, tuple)):
            stack.extend((c, False) for c in reversed(v))
        elif isinstance(v, dict):
            stack.extend((c, False) for kv in reversed(list(v.items())) for c in kv)
    return order


def _plain(v, index: dict):
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, (int, float)) or type(v).__module__ == "numpy":
        return _number(v)
    if isinstance(v, DType):
        return {"dtype": v.value}
    if isinstance(v, Op):
        return {"op": v.value}
    if _is_object(v):
        return {"ref": index[id(v)]}
    if isinstance(v, tuple):
        return {"tuple": [_plain(x, index) for x in v]}
    if isinstance(v, list):
        return [_plain(x, index) for x in v]
    if isinstance(v, dict):
        return {"dict": [[_plain(k, index), _plain(x, index)] for k, x in v.items()]}
    raise CodecError(f"cannot store a {type(v).__module__}.{type(v).__qualname__}")


def _number(v):
    import numpy as np
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return {"float": float(v).hex()}
    raise CodecError(f"cannot store a {type(v).__module__}.{type(v).__qualname__}")


# --- decoding ----------------------------------------------------------------------------------

def loads(data: bytes):
    try:
        doc = json.loads(data, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise CodecError(f"not JSON: {e}") from None
    try:
        return decode(doc)
    except RecursionError:
        raise CodecError("nested too deeply") from None


def _no_constant(name):
    raise CodecError(f"{name} is not a stored value")


def decode(doc):
    """The value `encode` produced `doc` from; CodecError if `doc` is anything else."""
    if not isinstance(doc, dict) or set(doc) != {"format", "objects", "value"} or not isinstance(doc["objects"], list):
        raise CodecError("not an encoded value")
    if doc["format"] != FORMAT:
        raise CodecError(f"encoding format {doc['format']!r}, expected {FORMAT}")
    built: list = []
    for i, item in enumerate(doc["objects"]):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], dict)):
            raise CodecError(f"object {i} is malformed")
        tag, raw = item
        fields = {k: _value(v, built) for k, v in raw.items()}
        try:
            built.append(_build(tag, fields))
        except CodecError:
            raise
        except Exception as e:   # a constructor refusing its fields: the data is not one we wrote
            raise CodecError(f"object {i} ({tag}) rejected: {type(e).__name__}: {e}") from None
    return _value(doc["value"], built)


def _build(tag: str, fields: dict):
    if tag == NODE:
        if set(fields) != {"op", "dtype", "shape", "srcs", "arg"}:
            raise CodecError(f"a node has fields {sorted(fields)}")
        op, dtype, shape, srcs = fields["op"], fields["dtype"], fields["shape"], fields["srcs"]
        if not (isinstance(op, Op) and isinstance(dtype, DType) and isinstance(shape, tuple)
                and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)
                and isinstance(srcs, tuple) and all(isinstance(s, Node) for s in srcs)):
            raise CodecError("a node with an ill-typed op, dtype, shape or sources")
        node = Node(op, dtype, shape, srcs, fields["arg"])
        check_arity(node)
        return node
    if tag not in TYPES:
        raise CodecError(f"unknown type {tag!r}")
    cls = _class(tag)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    if set(fields) != names:
        raise CodecError(f"{tag} has fields {sorted(names)}, the data gives {sorted(fields)}")
    return cls(**fields)


def _value(v, built: list):
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, list):
        return [_value(x, built) for x in v]
    if isinstance(v, dict) and len(v) == 1:
        (kind, x), = v.items()
        if kind == "float" and isinstance(x, str):
            try:
                return float.fromhex(x)
            except ValueError:
                raise CodecError(f"bad float {x!r}") from None
        if kind == "dtype" and x in DType._value2member_map_:
            return DType(x)
        if kind == "op" and x in Op._value2member_map_:
            return Op(x)
        if kind == "ref" and isinstance(x, int) and not isinstance(x, bool) and 0 <= x < len(built):
            return built[x]          # only objects already built: no cycles, no forward references
        if kind == "tuple" and isinstance(x, list):
            return tuple(_value(y, built) for y in x)
        if kind == "dict" and isinstance(x, list) and all(isinstance(p, list) and len(p) == 2 for p in x):
            out = {}
            for k, y in x:
                out[_hashable(_value(k, built))] = _value(y, built)
            return out
    raise CodecError(f"not a stored value: {str(v)[:80]}")


def _hashable(k):
    try:
        hash(k)
    except TypeError:
        raise CodecError("a dict key that is not hashable") from None
    return k

