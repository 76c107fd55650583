"""`saturn fuzz`: random programs from the frontend against an independent float64 reference.

A case is a seed: it fixes a program (1 to 6 frontend ops over one or two inputs: elementwise
math, binary ops with broadcasting, reductions, norms, softmax family, matmul, movement ops,
casts; f32/f16/bf16/i32/bool inputs, casts also to f64/i64/i8/u8 (values of those types flow into
the ops after the cast and into new inputs); 0-d and 0-size tensors sometimes) and its inputs (normal
values, sometimes with NaN, +-inf, +-0 and subnormals); a quarter of the seeds draw an attention-like
program instead (`attention_program`). The reference is numpy in float64
(integers exact, wrapping to their type), written here op by op and independent of the tracer and
the interpreter; each op's result is rounded to its dtype's range (overflow is inf there too). Saturn's output must equal it
within the propagated error bound (`ir.bounds`) of the program as written (before kernel terms). Cases run in
subprocesses with a timeout (`CaseServer`: one process per job, checking case after case), so a
crash or a hang is recorded, not suffered. A failure is re-run in a fresh process, minimized
(ops dropped, special inputs turned off) and printed as a standalone reproduction.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

import numpy as np

FLOATS = ("f32", "f16", "bf16", "f64")
INTS = ("i64", "i32", "i8", "u8")
CASTS = ("f32", "f16", "bf16", "i32", "bool", "f64", "i64", "i8", "u8")


# --- programs --------------------------------------------------------------------------------

@dataclass
class Program:
    """One random program: inputs (shape, dtype), a list of steps, an input family."""
    inputs: list                        # [(shape, dtype)]
    steps: list                         # [(op name, params dict)]
    special: bool = False
    seed: int = 0
    notes: list = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"inputs": [[list(s), d] for s, d in self.inputs], "steps": self.steps,
                           "special": self.special, "seed": self.seed})

    @staticmethod
    def from_json(text: str) -> "Program":
        d = json.loads(text)
        return Program([(tuple(s), t) for s, t in d["inputs"]], [tuple(x) for x in d["steps"]], d["special"], d["seed"])


# op name -> (kind, needs float) ; kinds: unary, binary, reduce, norm, move, matmul, cast
UNARY = ["exp", "log", "sqrt", "abs", "neg", "relu", "sigmoid", "tanh", "sin", "square", "recip"]
REDUCE = ["sum", "max", "mean", "var", "std", "logsumexp", "min"]
NORM = ["softmax", "log_softmax", "layer_norm", "rms_norm"]
BINARY = ["add", "sub", "mul", "div", "maximum", "where_gt"]
MOVE = ["transpose", "flatten", "slice", "unsqueeze", "expand"]


def random_program(seed: int) -> Program:
    # a quarter of the seeds draw an attention-like program, from a stream of their own so that
    # the other seeds draw the same programs as before
    pick = np.random.default_rng([seed, 7])
    if pick.random() < ATTENTION_SHARE:
        return attention_program(seed, pick)
    rng = np.random.default_rng(seed)
    dtype = str(rng.choice(["f32"] * 5 + ["f16", "bf16", "i32", "bool"]))
    rank = int(rng.choice([0, 1, 2, 2, 3, 4]))
    shape = tuple(int(rng.choice([0, 1, 2, 3, 5, 8, 17, 33])) if rng.random() < 0.05 else
                  int(rng.choice([1, 2, 3, 4, 5, 7, 8, 16, 31, 64])) for _ in range(rank))
    inputs = [(shape, dtype)]
    steps, cur_shape, cur_dtype = [], shape, dtype
    for _ in range(int(rng.integers(1, 7))):
        step = _random_step(rng, cur_shape, cur_dtype, inputs)
        if step is None:
            continue
        steps.append(step)
        cur_shape, cur_dtype = _shape_after(step, cur_shape, cur_dtype, inputs)
    if not steps:
        steps.append(("cast", {"to": "f32"}))
    return Program(inputs, steps, special=bool(rng.random() < 0.3), seed=seed)


ATTENTION_SHARE = 0.25
ODD = [1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 33]


def attention_program(seed: int, rng) -> Program:
    """`softmax(q @ k.T * c [masked]) @ v` (a softmax followed by a product, the shape of the
    online contraction `attend`): batch and head axes that broadcast, grouped key/value heads
    (GQA: each key head repeated for `groups` query heads), keys stored transposed or not,
    -inf masks (selected or added; whole masked rows happen), halves, and a few ordinary steps
    after it."""
    dtype = str(rng.choice(["f32", "f32", "f16", "bf16"]))
    sq, sk, d, dv = (int(rng.choice(ODD)) for _ in range(4))
    batch = [int(rng.choice([1, 2, 3])) for _ in range(int(rng.integers(0, 3)))]
    groups = int(rng.choice([2, 3])) if len(batch) == 2 and rng.random() < 0.4 else 1
    if groups > 1:
        batch[1] = batch[1] * groups                     # query heads; the keys hold batch[1] / groups
    kv = list(batch)
    if groups > 1:
        kv[1] //= groups
    elif kv and rng.random() < 0.4:                        # keys broadcast along a batch or head axis
        if rng.random() < 0.5:
            kv = kv[1:]
        else:
            kv[int(rng.integers(0, len(kv)))] = 1
    transpose = bool(rng.random() < 0.7)                   # q @ k.transpose(-1, -2), else keys stored (d, sk)
    inputs = [(tuple(batch) + (sq, d), dtype), (tuple(kv) + ((sk, d) if transpose else (d, sk)), dtype),
              (tuple(kv) + (sk, dv), dtype)]
    steps = [("bmm", {"input": 1, "transpose": transpose, "groups": groups})]
    scale = float(rng.choice([1 / np.sqrt(d), 0.125, 1.0, 2.0, -0.5]))
    mask = None
    if rng.random() < 0.5:
        mshape = [(sq, sk), (1, sk), (sq, 1), tuple(batch) + (sq, sk)][int(rng.integers(0, 4))]
        inputs.append((tuple(mshape), "bool"))
        mask = ("mask", {"input": len(inputs) - 1, "additive": bool(rng.random() < 0.5)})
    if mask and scale > 0 and rng.random() < 0.3:           # masked, then scaled
        steps += [mask, ("scale", {"c": scale})]
    else:
        steps += [("scale", {"c": scale})] + ([mask] if mask else [])
    steps.append(("norm", {"op": "softmax", "axis": -1}))
    if dtype == "f32" and rng.random() < 0.2:              # the probabilities rounded to a half
        half = str(rng.choice(["f16", "bf16"]))
        steps.append(("cast", {"to": half}))
        inputs[2] = (inputs[2][0], half)
    steps.append(("bmm", {"input": 2, "transpose": False, "groups": groups}))
    shape, dt = tuple(batch) + (sq, dv), inputs[2][1]
    for _ in range(int(rng.choice([0, 0, 1, 2]))):
        step = _random_step(rng, shape, dt, inputs)
        if step is not None:
            steps.append(step)
            shape, dt = _shape_after(step, shape, dt, inputs)
    return Program(inputs, steps, special=bool(rng.random() < 0.3), seed=seed)


def _random_step(rng, shape, dtype, inputs):
    r = len(shape)
    kinds = ["unary", "binary", "reduce", "move", "cast"] + (["norm"] if r else []) + (["matmul"] if r == 2 else [])
    kind = str(rng.choice(kinds))
    axis = int(rng.integers(-r, r)) if r else None
    if kind == "unary":
        return ("unary", {"op": str(rng.choice(UNARY))})
    if kind == "binary":
        # the other operand: same shape, or a trailing-axes broadcast; a new input
        other = shape[int(rng.integers(0, r + 1)):] if r else shape
        inputs.append((tuple(other), dtype))
        return ("binary", {"op": str(rng.choice(BINARY)), "input": len(inputs) - 1})
    if kind == "reduce":
        op = str(rng.choice(REDUCE))
        if op == "logsumexp" and axis is None:      # logsumexp takes an axis
            op = "sum"
        return ("reduce", {"op": op, "axis": axis, "keepdim": bool(rng.random() < 0.5)})
    if kind == "norm":
        return ("norm", {"op": str(rng.choice(NORM)), "axis": -1})
    if kind == "matmul":
        k, n = shape[1], int(rng.choice([1, 3, 8, 16]))
        inputs.append(((k, n), dtype))
        return ("matmul", {"input": len(inputs) - 1})
    if kind == "cast":
        return ("cast", {"to": str(rng.choice(CASTS))})
    op = str(rng.choice(MOVE))
    if op == "transpose" and r < 2:
        op = "unsqueeze"
    if op == "slice" and (not r or shape[-1] < 2):
        op = "flatten"
    params = {"op": op}
    if op == "transpose":
        params["axes"] = [int(a) for a in rng.choice(r, 2, replace=False)]
    if op == "slice":
        params["stop"] = int(rng.integers(1, shape[-1]))
    if op == "expand":
        params["n"] = int(rng.choice([1, 2, 3]))
    return ("move", params)


def _shape_after(step, shape, dtype, inputs):
    kind, p = step
    if kind == "reduce":
        ax = p["axis"]
        if ax is None:
            return (), _float_of(dtype) if p["op"] not in ("sum", "max", "min") else _sum_dtype(dtype, p["op"])
        ax %= len(shape)
        out = shape[:ax] + ((1,) if p["keepdim"] else ()) + shape[ax + 1:]
        return out, _float_of(dtype) if p["op"] not in ("sum", "max", "min") else _sum_dtype(dtype, p["op"])
    if kind == "matmul":
        return (shape[0], inputs[p["input"]][0][1]), dtype if dtype != "bool" else "bool"
    if kind == "bmm":
        o = inputs[p["input"]][0]
        batch = np.broadcast_shapes(shape[:-2], o[:-2])
        return tuple(batch) + (shape[-2], o[-2] if p["transpose"] else o[-1]), _promote(dtype, inputs[p["input"]][1])
    if kind in ("scale", "mask"):
        return shape, dtype
    if kind == "cast":
        return shape, p["to"]
    if kind == "move":
        op = p["op"]
        if op == "transpose":
            s = list(shape)
            a, b = p["axes"]
            s[a], s[b] = s[b], s[a]
            return tuple(s), dtype
        if op == "flatten":
            return (int(np.prod(shape)),), dtype
        if op == "slice":
            return shape[:-1] + (p["stop"],), dtype
        if op == "unsqueeze":
            return (1,) + shape, dtype
        return (p["n"],) + shape, dtype
    if kind in ("unary", "norm"):
        return shape, _float_of(dtype)
    return shape, dtype if p["op"] not in ("div",) else _float_of(dtype)


def _promote(a, b):
    """The result type of two float operands (as `ir.dtypes.promote`: f16 with bf16 is f32)."""
    if a == b:
        return a
    return "f32" if {a, b} == {"f16", "bf16"} else max(a, b, key=("f16", "bf16", "f32", "f64").index)


def _float_of(dtype):
    return dtype if dtype in FLOATS else "f32"


def _sum_dtype(dtype, op):
    return "i32" if dtype in ("bool", "i8", "u8") and op == "sum" else dtype   # small ints sum in i32


# --- the Saturn side -------------------------------------------------------------------------

def saturn_fn(prog: Program):
    """The program as a function of Saturn tensors."""
    def fn(*xs):
        t = xs[0]
        for kind, p in prog.steps:
            t = _saturn_step(t, kind, p, xs)
        return t
    return fn


def _saturn_step(t, kind, p, xs):
    if kind == "unary":
        op = p["op"]
        if op in ("neg", "square", "recip", "sigmoid", "tanh", "relu", "abs", "sin", "exp", "log", "sqrt"):
            t = t if t.dtype.is_float else t.astype("f32")
        return {"exp": lambda: t.exp(), "log": lambda: t.log(), "sqrt": lambda: t.sqrt(), "abs": lambda: t.abs(),
                "neg": lambda: -t, "relu": lambda: t.relu(), "sigmoid": lambda: t.sigmoid(), "tanh": lambda: t.tanh(),
                "sin": lambda: t.sin(), "square": lambda: t * t, "recip": lambda: 1.0 / t}[op]()
    if kind == "binary":
        o = xs[p["input"]]
        op = p["op"]
        if op == "where_gt":
            return (t > o).where(t, o)
        if op == "maximum":
            return t.maximum(o)
        return {"add": lambda: t + o, "sub": lambda: t - o, "mul": lambda: t * o, "div": lambda: t / o}[op]()
    if kind == "reduce":
        op, ax, keep = p["op"], p["axis"], p["keepdim"]
        if op in ("mean", "var", "std", "logsumexp") and not t.dtype.is_float:
            t = t.astype("f32")
        return getattr(t, op)(ax, keepdim=keep) if ax is not None else getattr(t, op)()
    if kind == "norm":
        t = t if t.dtype.is_float else t.astype("f32")
        op = p["op"]
        if op == "layer_norm":
            return t.layer_norm((t.shape[-1],))
        if op == "rms_norm":
            return t.rms_norm((t.shape[-1],))
        return getattr(t, op)(-1)
    if kind == "matmul":
        return t @ xs[p["input"]]
    if kind == "bmm":
        o, g = xs[p["input"]], p["groups"]
        if g > 1:                                   # each key head repeated for g query heads
            s = o.shape
            o = o.reshape(s[:-2] + (1,) + s[-2:]).expand(s[:-2] + (g,) + s[-2:])
            o = o.reshape(s[:-3] + (s[-3] * g,) + s[-2:])
        return t @ (o.transpose(-1, -2) if p["transpose"] else o)
    if kind == "scale":
        return t * p["c"]
    if kind == "mask":
        m = xs[p["input"]]
        if p["additive"]:
            return t + m.where(0.0, float("-inf")).astype(t.dtype)
        return m.where(t, float("-inf"))
    if kind == "cast":
        return t.astype(p["to"])
    op = p["op"]
    if op == "transpose":
        return t.transpose(*p["axes"])
    if op == "flatten":
        return t.reshape(-1)
    if op == "slice":
        return t[..., :p["stop"]]
    if op == "unsqueeze":
        return t.reshape((1,) + t.shape)
    return t.reshape((1,) + t.shape).expand((p["n"],) + t.shape)


# --- the independent numpy reference ---------------------------------------------------------

def _np_dtype(name):
    from ir.dtypes import DType
    return DType(name).np


def _round(a, dtype):
    """A float64 value rounded to `dtype`'s range and precision, back in float64 (ints exact)."""
    with np.errstate(all="ignore"):
        if dtype in FLOATS:
            return np.asarray(a, np.float64).astype(_np_dtype(dtype)).astype(np.float64)
        if dtype == "bool":
            return np.asarray(a).astype(bool)
        return np.asarray(a)


def reference(prog: Program, args) -> tuple[np.ndarray, str]:
    """(float64 result, its dtype), op by op in numpy."""
    xs = [np.asarray(a).astype(np.float64) if d in FLOATS else np.asarray(a) for a, (_, d) in zip(args, prog.inputs)]
    t, dt = xs[0], prog.inputs[0][1]
    shapes = [s for s, _ in prog.inputs]
    with np.errstate(all="ignore"):
        for kind, p in prog.steps:
            t, dt = _np_step(t, dt, kind, p, xs, prog)
            t = _round(t, dt)
    return t, dt


def _as_float(t, dt):
    return (t.astype(np.float64), dt) if dt in FLOATS else (t.astype(np.float64), "f32")


def _wrap(v, dt):
    """Exact integers (int64, whose numpy arithmetic wraps) wrapped into integer type `dt`."""
    return np.asarray(v, np.int64).astype(_np_dtype(dt))


def _np_step(t, dt, kind, p, xs, prog):
    if kind == "unary":
        t, dt = _as_float(t, dt)
        op = p["op"]
        return {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "abs": np.abs, "neg": np.negative,
                "relu": lambda a: np.where(a < 0, 0.0, a), "sigmoid": lambda a: 1 / (1 + np.exp(-a)),
                "tanh": np.tanh, "sin": np.sin, "square": lambda a: a * a, "recip": lambda a: 1 / a}[op](t), dt
    if kind == "binary":
        o = xs[p["input"]]
        op = p["op"]
        if op == "where_gt":
            return np.where(t > o, t, o), dt
        if op == "maximum":
            # PyTorch's: the first operand where they are equal (max(+0, -0) is +0, max(-0, +0)
            # is -0; numpy's maximum gives the second)
            return np.where(np.isnan(t) | np.isnan(o), np.nan, np.where(t < o, o, t)) if dt in FLOATS \
                else np.maximum(t, o), dt
        if op == "div":
            a, b = t.astype(np.float64), o.astype(np.float64)
            return a / b, _float_of(dt)
        if dt == "bool":
            if op == "sub":                       # as in numpy and PyTorch: the frontend rejects it
                raise ValueError("bool subtraction")
            t, o = t.astype(bool), o.astype(bool)
            return {"add": lambda: t | o, "mul": lambda: t & o}[op](), dt
        if dt in INTS:
            a, b = t.astype(np.int64), o.astype(np.int64)
            return _wrap({"add": a + b, "sub": a - b, "mul": a * b}[op], dt), dt
        return {"add": t + o, "sub": t - o, "mul": t * o}[op], dt
    if kind == "reduce":
        op, ax, keep = p["op"], p["axis"], p["keepdim"]
        axis = tuple(range(t.ndim)) if ax is None else (ax % t.ndim,)
        keep = keep if ax is not None else False
        if op in ("sum", "max", "min"):
            if dt in ("bool",) + INTS and op == "sum":
                return _wrap(t.astype(np.int64).sum(axis=axis, keepdims=keep), _sum_dtype(dt, op)), _sum_dtype(dt, op)
            f = np.max if op == "max" else np.min if op == "min" else np.sum
            if t.size == 0 and op != "sum":
                raise ValueError("max of an empty axis")
            return f(t, axis=axis, keepdims=keep), dt
        t, dt = _as_float(t, dt)
        n = int(np.prod([t.shape[a] for a in axis]))
        if op == "mean":
            return t.sum(axis=axis, keepdims=keep) / n if n else np.full(np.sum(t, axis=axis, keepdims=keep).shape, np.nan), dt
        if op in ("var", "std"):
            m = t.mean(axis=axis, keepdims=True) if n else np.nan
            v = ((t - m) ** 2).sum(axis=axis, keepdims=keep) / (n - 1) if n > 1 else \
                np.full(np.sum(t, axis=axis, keepdims=keep).shape, np.nan)
            return (np.sqrt(v) if op == "std" else v), dt
        m = t.max(axis=axis, keepdims=True) if n else -np.inf
        with np.errstate(all="ignore"):
            s = np.log(np.exp(t - np.where(np.isfinite(m), m, 0)).sum(axis=axis, keepdims=True)) + np.where(np.isfinite(m), m, 0)
        return (s if keep else np.squeeze(s, axis=axis)), dt
    if kind == "norm":
        t, dt = _as_float(t, dt)
        op = p["op"]
        if op in ("softmax", "log_softmax"):
            m = t.max(-1, keepdims=True) if t.shape[-1] else 0
            z = t - m
            if op == "softmax":
                e = np.exp(z)
                return e / e.sum(-1, keepdims=True), dt
            return z - np.log(np.exp(z).sum(-1, keepdims=True)), dt
        if op == "layer_norm":
            m = t.mean(-1, keepdims=True)
            v = ((t - m) ** 2).mean(-1, keepdims=True)
            return (t - m) / np.sqrt(v + 1e-5), dt
        return t / np.sqrt((t * t).mean(-1, keepdims=True) + 1e-6), dt
    if kind == "matmul":
        o = xs[p["input"]]
        if dt == "bool":
            return (t.astype(np.int64) @ o.astype(np.int64)) > 0, dt
        if dt in INTS:
            return _wrap(t.astype(np.int64) @ o.astype(np.int64), dt), dt
        odt = prog.inputs[p["input"]][1]     # a minimized program may mix float types
        return t @ o, _promote(dt, odt) if odt in FLOATS else dt
    if kind == "bmm":
        o = xs[p["input"]]
        o = np.repeat(o, p["groups"], axis=-3) if p["groups"] > 1 else o
        return t @ (np.swapaxes(o, -1, -2) if p["transpose"] else o), _promote(dt, prog.inputs[p["input"]][1])
    if kind == "scale":
        return t * p["c"], dt
    if kind == "mask":
        m = xs[p["input"]].astype(bool)
        return (t + np.where(m, 0.0, -np.inf) if p["additive"] else np.where(m, t, -np.inf)), dt
    if kind == "cast":
        to = p["to"]
        if to == "bool":
            return t != 0, to
        if to in INTS:
            if dt in FLOATS:
                with np.errstate(all="ignore"):
                    tr = np.trunc(t)                # out-of-range and NaN: left unchecked (bounds)
                    if to == "i32":
                        return tr, to
                    # to i64 directly; to i8, u8 through i32, then wrapped (ir.interpreter.float_to_int)
                    ok = np.abs(tr) < (2.0 ** 63 if to == "i64" else 2.0 ** 31)
                    return np.where(ok, _wrap(np.where(ok, tr, 0), to).astype(np.float64), tr), to
            return _wrap(np.asarray(t).astype(np.int64), to), to
        return t.astype(np.float64), to
    op = p["op"]
    if op == "transpose":
        return np.swapaxes(t, *p["axes"]), dt
    if op == "flatten":
        return t.reshape(-1), dt
    if op == "slice":
        return t[..., :p["stop"]], dt
    if op == "unsqueeze":
        return t[None], dt
    return np.broadcast_to(t[None], (p["n"],) + t.shape), dt


# --- running one case ------------------------------------------------------------------------

def inputs_for(prog: Program) -> list[np.ndarray]:
    from ir import numerics
    from ir.dtypes import DType
    family = numerics.SPECIAL if prog.special else numerics.NORMAL
    return numerics.random_inputs([(s, DType(d)) for s, d in prog.inputs], prog.seed, family)


def check(prog: Program, target: str, budget: float) -> dict:
    """Compile and run `prog` on `target` in this process; {'status': 'ok'|'mismatch'|'error'|'invalid', ...}."""
    import compiler as saturn
    from compiler.errors import SaturnError
    from compiler.trace import trace_primitives
    from ir.bounds import evaluate_bounded
    args = inputs_for(prog)
    specs = [saturn.spec(s, d) for s, d in prog.inputs]
    fn = saturn_fn(prog)
    try:
        want, want_dt = reference(prog, args)
    except (ValueError, IndexError) as e:
        return {"status": "invalid", "reason": f"reference undefined: {e}"}
    try:
        graph = saturn.trace(fn, *specs)
    except SaturnError as e:
        return {"status": "invalid", "reason": f"{type(e).__name__}: {e}"}
    except Exception as e:  # noqa: BLE001  (a valid call that fails to trace is a finding)
        return {"status": "error", "reason": f"trace: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:400]}
    try:
        if target == "cuda-host":
            runs = _run_cuda_host(graph, args)
            if runs is None:
                return {"status": "invalid", "reason": "a kernel kind the host does not emulate"}
        else:
            f = saturn.compile(fn, *specs, target=target, budget=budget, quiet=True, cache=False)
            runs = [("", np.asarray(f(*args)))]
    except Exception as e:  # noqa: BLE001  (any exception is a finding)
        # (the first line names the failure; the rest, e.g. each trial's status, goes with the reproduction)
        return {"status": "error", "reason": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:400],
                "detail": str(e)[:4000]}
    out_dt = graph.outputs[0].dtype
    written = trace_primitives(fn, *specs)      # the bound of the program as written, not as Saturn rewrote it
    b = evaluate_bounded(written, args)[0]
    for label, got in runs:
        reason = _difference(got, want, want_dt, out_dt, b)
        if reason:
            return {"status": "mismatch", "reason": (f"{label}: " if label else "") + reason}
    return {"status": "ok"}


def _difference(got: np.ndarray, want, want_dt: str, out_dt, b) -> str | None:
    """Why `got` is not the reference `want` within the bound `b` (ir.bounds), or None."""
    from ir.bounds import allowed
    if got.shape != np.shape(want):
        return f"shape {got.shape}, reference {np.shape(want)}"
    if out_dt.value != want_dt:
        return f"dtype {out_dt.value}, reference {want_dt}"
    with np.errstate(all="ignore"):
        tol = allowed(np.asarray(want, np.float64), b.bound, out_dt)
        g, w = got.astype(np.float64), np.asarray(want).astype(np.float64)
        if out_dt.is_float:
            bad = np.where(np.isnan(w), ~np.isnan(g), np.where(np.isinf(w), g != w, ~np.isfinite(g) | (np.abs(g - w) > tol)))
        else:
            bad = np.abs(g - w) > tol
            if np.asarray(want).dtype.kind in "iu":    # exactly (float64 cannot hold every i64)
                bad |= (tol == 0) & (got.astype(np.int64) != np.asarray(want).astype(np.int64))
        bad &= tol < np.inf
        if out_dt.is_float:   # where a correct implementation may give NaN (ir.bounds.Bounded.nan)
            bad &= ~(np.isnan(g) & b.nan)
            # the float64 reference's NaN at a rounding edge (sqrt of a layer norm's 0 that it
            # computed as -1e-17, the bounded evaluation as +8e-8; seed 119874): a number within
            # the bound of the bounded value is as correct as NaN there
            edge = np.isnan(w) & b.nan & ~np.isnan(b.value)
            if np.any(edge):
                near = np.abs(g - b.value) <= allowed(b.value, b.bound, out_dt)
                bad &= ~(edge & near)
    if bad.any():
        i = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.ndim else ()
        return (f"{int(bad.sum())} of {bad.size} elements differ; at {tuple(map(int, i))}: "
                f"got {g[i]!r}, reference {w[i]!r} +- {tol[i]:.3g}")
    return None


def _run_cuda_host(graph, args) -> list[tuple[str, np.ndarray]] | None:
    """Target "cuda-host": the CUDA backend's kernels, compiled for this machine and run here
    (backends/cuda/hostsim.py), each output labelled: the traced program with its kernel terms
    (the search's first candidate) under the default schedule and a Hopper TMA schedule, then
    up to three of the e-graph's rewritten candidates under the default schedule. Programs the
    templates cannot plan run as the kernel IR's rendering, as the backend does. None where the
    traced program has a kernel kind the host does not emulate (a candidate with one is left out)."""
    from backends.cuda.render import Schedule
    from backends.cuda.templates.gemm_tma import TMA_CONFIGS
    from compiler.explore import Limits, explore
    from rewrites.apply import kernel_terms
    runs = []
    tma = Schedule(gemm="wgmma", tma=TMA_CONFIGS[0], name="tma", arch="sm_90a")
    traced = kernel_terms(graph)
    try:
        for label, sched in (("default schedule", None), ("TMA schedule", tma)):
            runs += _host_run(traced, args, sched, label)
    except _NotEmulated:
        return None
    rewritten = [c for c in explore(graph, limits=Limits(seconds=5), max_candidates=4).candidates
                 if c.graph is not graph]           # (the original ranks among them by cost)
    references = verification_references(graph) if rewritten else None
    for i, cand in enumerate(rewritten, 1):
        try:
            # as compile does: a candidate that fails verification is never run for a user
            if passes_verification(graph, cand.graph, *references):
                runs += _host_run(cand.graph, args, None, f"candidate {i} ({cand.description})")
        except _NotEmulated:
            pass
    return runs


def verification_references(graph, seed: int = 0) -> tuple[list, list]:
    """The input sets a search verifies `graph`'s candidates on (compiler/verify.py) and the
    float64 references on them: computed once for all of its candidates."""
    from compiler import verify
    inputs = verify.verification_inputs(graph, seed)
    return inputs, [verify.reference(graph, args) for args in inputs]


def passes_verification(graph, candidate, inputs, expected) -> bool:
    """Whether `candidate` (a rewritten program of `graph`), run as kernels on the host, passes
    the check a search makes before timing it (`verify.check_executable`). A rule exact only
    over finite values (a factor moved out of a sum: an infinite factor times a zero term is
    NaN, times the sum a signed inf) is caught here."""
    from compiler import verify
    run = lambda *a: [_host_run(candidate, list(a), None, "")[0][1]]     # (a fuzz program has one output)
    return verify.check_executable(run, inputs, expected, [o.dtype for o in graph.outputs]).ok


class _NotEmulated(Exception):
    pass


def _host_run(g, args, sched, label: str) -> list[tuple[str, np.ndarray]]:
    from backends.cuda import hostsim
    from backends.cuda.plan import needs_kernel_ir
    if needs_kernel_ir(g):
        return [] if sched is not None else [(label + ", kernel IR", np.asarray(hostsim.run_kernel_ir(g, args)[0]))]
    try:
        return [(label, np.asarray(hostsim.run_templates(g, args, sched)[0]))]
    except ValueError as e:
        if "need a GPU" in str(e):
            raise _NotEmulated(str(e)) from None
        raise


def run_isolated(prog: Program, target: str, budget: float, timeout: float) -> dict:
    """`check` in a fresh subprocess: a crash or a hang is a result, not the fuzzer's end."""
    cmd = [sys.executable, "-m", "compiler.fuzz", "--one", prog.to_json(), "--target", target, "--budget", str(budget)]
    env = dict(os.environ, PYTHONHASHSEED="0")
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"status": "hang", "reason": f"no answer in {timeout:.0f} s"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            res = json.loads(line)
            res["seconds"] = time.perf_counter() - t0
            return res
    tail = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"status": "crash", "reason": f"exit {p.returncode}: {tail}"[:400]}


class CaseServer:
    """One long-lived `python -m compiler.fuzz --serve` process that checks cases one after
    another, as a user's notebook compiles one program after another: imports and the search's
    timing workers are paid once, not per case. A case that crashes the server or passes its
    timeout is a result (the process group is killed and a fresh server takes the next case);
    the server is also replaced every `cases_per_process` cases so that no state grows without
    bound. A failure is minimized and reproduced in fresh processes (`run_isolated`)."""

    def __init__(self, target: str, budget: float, cases_per_process: int = 50):
        self.target, self.budget, self.cases_per_process = target, budget, cases_per_process
        self.proc = None
        self.done = 0

    def _start(self) -> None:
        import tempfile
        cmd = [sys.executable, "-m", "compiler.fuzz", "--serve", "--target", self.target, "--budget", str(self.budget)]
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True,
                                     env=dict(os.environ, PYTHONHASHSEED="0"), start_new_session=True)
        self.done = 0

    def run(self, prog: Program, timeout: float) -> dict:
        import select
        if self.proc is None or self.proc.poll() is not None or self.done >= self.cases_per_process:
            self.close()
            self._start()
        err_at = self.err.seek(0, os.SEEK_END)
        t0 = time.perf_counter()
        try:
            self.proc.stdin.write(prog.to_json() + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass                                     # it died; reading below reports how
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.close()
            return {"status": "hang", "reason": f"no answer in {timeout:.0f} s"}
        line = self.proc.stdout.readline()
        self.done += 1
        if line.startswith("{"):
            res = json.loads(line)
            res["seconds"] = time.perf_counter() - t0
            return res
        code = self.proc.wait()
        self.err.seek(err_at)
        tail = (self.err.read().strip().splitlines() or ["(no output)"])[-1]
        self.close()
        return {"status": "crash", "reason": f"exit {code}: {tail}"[:400]}

    def close(self) -> None:
        if self.proc is None:
            return
        import signal
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)   # the server and the timing workers it started
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.err):
            try:
                f.close()
            except OSError:
                pass
        self.proc = None


def _kind(res: dict) -> str:
    return res["status"] + ":" + res.get("reason", "").split(":")[0][:60]


def minimize(prog: Program, target: str, budget: float, timeout: float, res: dict) -> Program:
    """Fewer steps and smaller shapes while the failure keeps its kind."""
    want = _kind(res)

    def still(p):
        try:
            return _kind(run_isolated(p, target, budget, timeout)) == want
        except Exception:  # noqa: BLE001
            return False
    best = prog
    changed = True
    while changed:
        changed = False
        for i in range(len(best.steps)):             # drop one step
            cand = Program(best.inputs, best.steps[:i] + best.steps[i + 1:], best.special, best.seed)
            if cand.steps and _valid(cand) and still(cand):
                best, changed = cand, True
                break
        if not changed and not best.special is False:
            cand = Program(best.inputs, best.steps, False, best.seed)
            if still(cand):
                best, changed = cand, True
    return best


def _valid(prog: Program) -> bool:
    import compiler as saturn
    try:
        saturn.trace(saturn_fn(prog), *[saturn.spec(s, d) for s, d in prog.inputs])
        reference(prog, inputs_for(prog))
        return True
    except Exception:  # noqa: BLE001
        return False


def reproduction(prog: Program, target: str, res: dict) -> str:
    """A standalone script that shows the failure."""
    detail = "".join(f"#   {line}\n" for line in res.get("detail", "").splitlines()[1:])
    return f'''# saturn fuzz failure: {res["status"]}: {res.get("reason", "")}
{detail}import numpy as np
import compiler as saturn
from compiler.fuzz import Program, check
prog = Program.from_json({prog.to_json()!r})
# steps: {prog.steps}
# inputs: {prog.inputs}, special values: {prog.special}
print(check(prog, {target!r}, budget=1.0))
'''


def fuzz(n: int, target: str, seed: int, budget: float, timeout: float, out_dir: str | None,
         minimize_failures: bool = True, say=print, jobs: int = 1, fresh: bool = False) -> dict:
    """Run cases seed, seed + 1, ..., seed + n - 1, `jobs` at a time, each job a `CaseServer`
    (or, with `fresh`, each case its own subprocess); returns counts and the distinct failures.
    Results are taken in seed order, so the report for a seed range does not depend on `jobs`."""
    import queue
    from concurrent.futures import ThreadPoolExecutor
    counts = {"ok": 0, "invalid": 0, "mismatch": 0, "error": 0, "crash": 0, "hang": 0}
    failures = {}
    t0 = time.perf_counter()
    seeds = range(seed, seed + n)
    servers: queue.Queue = queue.Queue()
    for _ in range(max(1, jobs)):
        servers.put(CaseServer(target, budget) if not fresh else None)

    def one(s):
        server = servers.get()
        try:
            prog = random_program(s)
            return server.run(prog, timeout) if server else run_isolated(prog, target, budget, timeout)
        finally:
            servers.put(server)
    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:   # threads only wait on subprocesses
            results = pool.map(one, seeds)
            for s, res in zip(seeds, results):                       # in seed order, as they finish
                counts[res["status"]] = counts.get(res["status"], 0) + 1
                if res["status"] in FAILED:
                    say(f"case {s}: {res['status']}: {res.get('reason', '')}")
                    for line in res.get("detail", "").splitlines()[1:20]:
                        say(f"    {line}")
                    failures.setdefault(_kind(res), {"seed": s, "result": res})
    finally:
        while not servers.empty():
            server = servers.get()
            if server:
                server.close()
    for kind, f in failures.items():                             # minimized after the run, one by one
        prog = random_program(f["seed"])
        recurs = fresh or _kind(run_isolated(prog, target, budget, timeout)) == kind
        if not recurs:
            say(f"case {f['seed']}: {kind} does not recur in a fresh process (it depends on the cases before it)")
            f["result"] = dict(f["result"], reason=f["result"].get("reason", "") + " [not in a fresh process]")
        small = minimize(prog, target, budget, timeout, f["result"]) if minimize_failures and recurs else prog
        f["repro"] = reproduction(small, target, f["result"])
        if out_dir:
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, f"case-{f['seed']}.py"), "w") as fh:
                fh.write(f["repro"])
    return {"counts": counts, "failures": failures, "seconds": time.perf_counter() - t0,
            "seeds": [seed, seed + n - 1], "target": target, "jobs": max(1, jobs)}


FAILED = ("mismatch", "error", "crash", "hang")


def summary(report: dict) -> str:
    """One line: seeds, counts, time and rate."""
    c, n = report["counts"], sum(report["counts"].values())
    lo, hi = report["seeds"]
    minutes = report["seconds"] / 60
    return (f"saturn fuzz: target {report['target']}, seeds {lo}..{hi}, {n} programs, "
            f"{c['ok']} ok, {c['mismatch']} mismatches, {c['error']} errors, {c['crash']} crashes, "
            f"{c['hang']} hangs, {c['invalid']} rejected as invalid; {report['seconds']:.0f} s with "
            f"--jobs {report['jobs']} ({n / minutes if minutes else 0:.1f} programs/min)")


# --- command line ----------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=100, help="number of random programs (default 100)")
    parser.add_argument("--target", default="cpu", choices=["cpu", "cuda", "cuda-host", "reference"],
                        help="target (default cpu); cuda-host: the CUDA backend's kernels for each program, compiled "
                             "for this machine and run here (no GPU; a C++ compiler)")
    parser.add_argument("--seed", type=int, default=0, help="first case seed; cases are seed .. seed+n-1")
    parser.add_argument("--budget", type=float, default=1.0, help="search budget per case, seconds (default 1)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as a hang")
    parser.add_argument("--out", default=None, help="directory for the minimized reproductions")
    parser.add_argument("--no-minimize", action="store_true", help="report failures as found")
    parser.add_argument("--jobs", type=int, default=1, help="cases run at once, each job a process of its own (default 1)")
    parser.add_argument("--fresh", action="store_true", help="a fresh process for every case (slower; default: "
                        "each job's process checks case after case, replaced after a crash or a hang)")


def run(args) -> int:
    from compiler.errors import SaturnError
    if args.n < 1 or args.jobs < 1:
        raise SaturnError(f"--n and --jobs must be at least 1 (got --n {args.n}, --jobs {args.jobs})")
    if args.target == "cuda-host":
        from backends.cuda import hostsim
        if hostsim.available():
            raise SaturnError(f"--target cuda-host needs a C++ compiler here: {hostsim.available()}")
    report = fuzz(args.n, args.target, args.seed, args.budget, args.timeout, args.out, not args.no_minimize,
                  say=lambda line: print(line, flush=True), jobs=args.jobs, fresh=args.fresh)
    print(summary(report), flush=True)
    for kind, f in report["failures"].items():
        print(f"\n--- {kind} (first at seed {f['seed']}) ---\n{f['repro']}")
    return 1 if report["failures"] else 0


def _one(argv) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--one")
    p.add_argument("--serve", action="store_true")
    p.add_argument("--target", default="cpu")
    p.add_argument("--budget", type=float, default=1.0)
    a = p.parse_args(argv)
    if not a.serve:
        res = check(Program.from_json(a.one), a.target, a.budget)
        print(json.dumps(res, default=str), flush=True)
        return
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())   # whatever a case prints cannot pass for an answer
    for line in sys.stdin:
        res = check(Program.from_json(line), a.target, a.budget)
        answers.write(json.dumps(res, default=str) + "\n")
        answers.flush()


if __name__ == "__main__":
    _one(sys.argv[1:])
