"""Random programs: chains of frontend ops (elementwise, reductions, movement on computed
values, cat, softmax) traced once and compared with the same chain in numpy (float64)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

import compiler
from ir.interpreter import evaluate
from tolerances import assert_close

SIZES = [1, 2, 3, 5, 7]


def _step(data, values):
    """Append one new (tensor-fn, numpy-fn) pair computed from earlier values."""
    i = data.draw(st.integers(0, len(values) - 1))
    shape, _ = values[i]
    rank = len(shape)
    kind = data.draw(st.sampled_from(["unary", "binary", "reduce", "permute", "pad", "step",
                                      "flatten", "cat", "softmax"]))
    if kind == "unary":
        name = data.draw(st.sampled_from(["sin", "tanh", "relu", "abs", "sigmoid", "neg"]))
        f = (lambda t: -t) if name == "neg" else (lambda t, n=name: getattr(t, n)())
        g = {"sin": np.sin, "tanh": np.tanh, "relu": lambda a: np.maximum(a, 0), "abs": np.abs,
             "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "neg": np.negative}[name]
        return shape, ("u", i, f, g)
    if kind == "binary":
        # a partner of the same shape, or a reduction of it with keepdim (broadcasts back)
        same = [j for j, (s, _) in enumerate(values) if s == shape]
        j = data.draw(st.sampled_from(same))
        name = data.draw(st.sampled_from(["add", "mul", "maximum", "where"]))
        f = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "maximum": lambda a, b: a.maximum(b),
             "where": lambda a, b: (a > b).where(a, b * 0.5)}[name]
        g = {"add": np.add, "mul": np.multiply, "maximum": np.maximum,
             "where": lambda a, b: np.where(a > b, a, b * 0.5)}[name]
        return shape, ("b", (i, j), f, g)
    if kind == "reduce" and rank:
        axis = data.draw(st.integers(0, rank - 1))
        op = data.draw(st.sampled_from(["sum", "max", "mean"]))
        new = shape[:axis] + (1,) + shape[axis + 1:]
        return new, ("u", i, lambda t: getattr(t, op)(axis, keepdim=True),
                     lambda a: getattr(np, op)(a, axis=axis, keepdims=True))
    if kind == "permute" and rank >= 2:
        order = tuple(data.draw(st.permutations(range(rank))))
        return tuple(shape[o] for o in order), ("u", i, lambda t: t.permute(order), lambda a: a.transpose(order))
    if kind == "pad" and rank:
        pads = [(data.draw(st.integers(0, 2)), data.draw(st.integers(0, 1))) for _ in shape]
        value = data.draw(st.sampled_from([0.0, -1.0]))
        new = tuple(s + a + b for s, (a, b) in zip(shape, pads))
        return new, ("u", i, lambda t: t.pad(pads, value), lambda a: np.pad(a, pads, constant_values=value))
    if kind == "step" and rank:
        index = tuple(slice(data.draw(st.integers(0, 1)), None, data.draw(st.integers(1, 2))) for _ in shape)
        new = tuple(len(range(*ix.indices(s))) for ix, s in zip(index, shape))
        if 0 in new:
            return None
        return new, ("u", i, lambda t: t[index], lambda a: a[index])
    if kind == "flatten" and rank:
        return (int(np.prod(shape)),), ("u", i, lambda t: t.reshape(-1), lambda a: a.reshape(-1))
    if kind == "cat" and rank:
        axis = data.draw(st.integers(0, rank - 1))
        new = shape[:axis] + (2 * shape[axis],) + shape[axis + 1:]
        return new, ("u", i, lambda t: compiler.cat([t, t.sin()], axis),
                     lambda a: np.concatenate([a, np.sin(a)], axis))
    if kind == "softmax" and rank:
        return shape, ("u", i, lambda t: t.softmax(-1),
                       lambda a: np.exp(a - a.max(-1, keepdims=True)) / np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True))
    return None


def _run(program, x, tensor: bool):
    vals = [x]
    for kind, src, f, g in program:
        fn = f if tensor else g
        vals.append(fn(vals[src]) if kind == "u" else fn(vals[src[0]], vals[src[1]]))
    return vals[-1]


@given(st.data(), st.lists(st.sampled_from(SIZES), min_size=1, max_size=3).map(tuple),
       st.sampled_from(["f32", "f16"]))
def test_random_programs_match_numpy(data, shape, dtype):
    values, program = [(shape, None)], []
    for _ in range(data.draw(st.integers(1, 8))):
        step = _step(data, values)
        if step is not None and max(step[0], default=1) <= 64 and int(np.prod(step[0])) <= 4096:
            values.append(step)
            program.append(step[1])
    seed = data.draw(st.integers(0, 2**32 - 1))
    x = np.random.default_rng(seed).standard_normal(shape).astype({"f32": np.float32, "f16": np.float16}[dtype])
    graph = compiler.trace(lambda t: _run(program, t, True), compiler.spec(shape, dtype))
    (out,) = evaluate(graph, [x])
    expected = _run(program, x.astype(np.float64), False)
    assert_close(out, expected, dtype, scale=10 * (len(program) + 1), err_msg=str(graph))
