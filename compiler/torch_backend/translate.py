"""One FX node of an ATen graph -> lazy Saturn Tensors, and whether a node can be translated.

`translate(node, env)` applies the node's `registry.OPS` entry to the Saturn values of its
arguments and checks the result against the node's recorded example value (shape; the dtype
is cast to PyTorch's where promotion differs). `why_unsupported(node)` tries exactly that on
fresh inputs of the argument shapes, so a node is kept in PyTorch, with the reason, before any
region is compiled.
"""
from __future__ import annotations

import operator

from compiler.errors import SaturnError
from compiler.tensor import Tensor
from compiler.torch_backend import aten, attention, cnn  # noqa: F401 - they fill OPS
from compiler.torch_backend.registry import OPS, Unsupported
from ir import node as N
from ir.dtypes import DType

# torch dtype names Saturn has (not int16, the unsigned types but uint8, float8, complex)
DTYPES = {"torch.float32": DType.f32, "torch.float16": DType.f16, "torch.bfloat16": DType.bf16,
          "torch.float64": DType.f64, "torch.int32": DType.i32, "torch.int64": DType.i64, "torch.int8": DType.i8,
          "torch.uint8": DType.u8, "torch.bool": DType.bool}

# why a common operator has no translation yet (the general message covers the rest)
MISSING = {
    "aten.native_dropout.default": "random numbers (dropout) are not supported",
}


def op_name(node) -> str:
    """'aten.add.Tensor' for an ATen overload, 'operator.getitem', else the target's name."""
    t = node.target
    if t is operator.getitem:
        return "operator.getitem"
    return str(t) if hasattr(t, "_overloadname") else getattr(t, "__name__", str(t))


def _tensors(val) -> list:
    if isinstance(val, (list, tuple)):
        return [t for v in val for t in _tensors(v)]
    return [val] if hasattr(val, "shape") and hasattr(val, "dtype") else []


def value_problem(val, device: str = "cpu") -> str | None:
    """Why a node's example value cannot be a Saturn value (None if it can)."""
    if val is None:
        return "no example value recorded"
    for t in _tensors(val):
        if str(t.dtype) not in DTYPES:
            return f"dtype {str(t.dtype).removeprefix('torch.')} (Saturn has {', '.join(d.value for d in DTYPES.values())})"
        if t.device.type != device:
            return f"a tensor on {t.device} (the backend takes {device} tensors)"
        if any(not isinstance(s, int) for s in t.shape):
            return "a dynamic shape (Saturn compiles static shapes)"
    if isinstance(val, (int, float, bool)) or type(val).__name__.startswith("Sym"):
        return "a scalar result (not a tensor)"
    return None


def spec_of(val):
    """(shape, Saturn dtype) of a tensor example value."""
    return tuple(int(s) for s in val.shape), DTYPES[str(val.dtype)]


def _map(x, fn):
    if isinstance(x, (list, tuple)):
        return type(x)(_map(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: _map(v, fn) for k, v in x.items()}
    return fn(x) if hasattr(x, "op") and hasattr(x, "meta") else x   # an fx.Node


def _conform(out, val, name: str):
    """`out` with PyTorch's dtype; Unsupported where the shape or arity differs from `val`."""
    if isinstance(val, (list, tuple)):
        if not isinstance(out, (list, tuple)) or len(out) != len(val):
            raise Unsupported(f"{name}: result arity differs from PyTorch's")
        # None: a result the translation does not compute (an RNG state, a debug mask); only
        # unused results may be None (`why_unsupported` checks the used ones)
        return tuple(_conform(o, v, name) if v is not None and o is not None else o for o, v in zip(out, val))
    shape, dtype = spec_of(val)
    if not isinstance(out, Tensor):
        raise Unsupported(f"{name}: did not give a tensor")
    if out.shape != shape:
        raise Unsupported(f"{name}: gives shape {out.shape}, PyTorch {shape}")
    return out if out.dtype == dtype else out.astype(dtype)


def translate(node, env: dict):
    """The Saturn value of `node`, its arguments looked up in `env` (fx.Node -> Tensor or tuple)."""
    if node.target is operator.getitem:
        return env[node.args[0]][node.args[1]]
    name = op_name(node)
    fn = OPS[name]
    args, kwargs = _map(node.args, env.__getitem__), _map(node.kwargs, env.__getitem__)
    return _conform(fn(*args, **kwargs), node.meta.get("val"), name)


def used_results(node) -> set[int] | None:
    """For a node with several results, the indices its getitem users read (None otherwise)."""
    if not isinstance(node.meta.get("val"), (list, tuple)):
        return None
    return {u.args[1] for u in node.users if u.target is operator.getitem}


def why_unsupported(node, device: str = "cpu") -> str | None:
    """None if `node` translates on its own; else the reason it stays in PyTorch."""
    name = op_name(node)
    if node.target is operator.getitem:
        return None   # follows the node it indexes (the partitioner keeps the two together)
    if name not in OPS:
        return MISSING.get(name, "no Saturn translation for this op")
    inputs = [n for n in node.all_input_nodes]
    used = used_results(node)
    for n in inputs + [node]:
        val = n.meta.get("val")
        if n is node and used is not None:   # a tuple of results: only those read must be Saturn values
            val = tuple(val[i] for i in sorted(used))
        problem = value_problem(val, device)
        if problem:
            return problem if n is node else f"input {n.name}: {problem}"
    env = {}
    for i, n in enumerate(inputs):
        val = n.meta["val"]
        if isinstance(val, (list, tuple)):   # a multi-result node used directly (rare)
            return f"input {n.name} is a tuple"
        shape, dtype = spec_of(val)
        env[n] = Tensor(N.input_(i, n.name, shape, dtype))
    try:
        out = translate(node, env)
        if used is not None and any(out[i] is None for i in used):
            return (f"result {min(i for i in used if out[i] is None)} is read, and the translation does not "
                    "compute it (e.g. pooling indices)")
    except Unsupported as e:
        return str(e).split("\n")[0].removeprefix(f"{name}: ")
    except (SaturnError, TypeError, ValueError, IndexError, KeyError) as e:
        return f"translation failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None
