"""ShapeTracker properties: any chain of movement ops read through the interpreter equals the
same chain applied with numpy (directly on trackers, and through the frontend)."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, strategies as st

import compiler
from ir import node as N
from ir.dtypes import DType
from ir.interpreter import apply_tracker, evaluate, evaluate_nodes
from ir.ops import Op
from ir.view import ShapeTracker, View

SIZES = [1, 2, 3, 4, 5, 7]


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


@st.composite
def reshape_target(draw, shape):
    """A new shape with the same element count: merge/split neighbours, or any factorization."""
    kind = draw(st.sampled_from(["merge", "split", "factor", "unsqueeze", "squeeze"]))
    shape = list(shape)
    if kind == "merge" and len(shape) >= 2:
        i = draw(st.integers(0, len(shape) - 2))
        return tuple(shape[:i] + [shape[i] * shape[i + 1]] + shape[i + 2:])
    if kind == "split" and shape:
        i = draw(st.integers(0, len(shape) - 1))
        divisors = [d for d in range(1, shape[i] + 1) if shape[i] % d == 0]
        d = draw(st.sampled_from(divisors))
        return tuple(shape[:i] + [d, shape[i] // d] + shape[i + 1:])
    if kind == "unsqueeze":
        i = draw(st.integers(0, len(shape)))
        return tuple(shape[:i] + [1] + shape[i:])
    if kind == "squeeze" and 1 in shape:
        return tuple(s for s in shape if s != 1) or (1,)
    primes = draw(st.permutations(_prime_factors(math.prod(shape))))
    dims, cur = [], 1
    for p in primes:
        cur *= p
        if draw(st.booleans()):
            dims.append(cur)
            cur = 1
    dims.append(cur)
    return tuple(dims)


@st.composite
def movement_chain(draw, shape, max_ops=6):
    """A list of (op, arg) movement ops valid for `shape`, plus the resulting shape."""
    ops = []
    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(["reshape", "permute", "expand", "shrink", "step", "pad",
                                     "permute_reshape", "flip"]))
        if kind in ("permute", "permute_reshape") and len(shape) >= 2:
            order = tuple(draw(st.permutations(range(len(shape)))))
            ops.append(("permute", order))
            shape = tuple(shape[o] for o in order)
            if kind == "permute_reshape":  # a reshape after a permute often needs a second view
                new = draw(reshape_target(shape))
                ops.append(("reshape", new))
                shape = new
        elif kind == "reshape":
            new = draw(reshape_target(shape))
            ops.append(("reshape", new))
            shape = new
        elif kind == "expand" and 1 in shape:
            new = tuple(draw(st.sampled_from([1, 2, 3])) if s == 1 else s for s in shape)
            ops.append(("expand", new))
            shape = new
        elif kind == "shrink":
            bounds = []
            for s in shape:
                lo = draw(st.integers(0, s - 1))
                bounds.append((lo, draw(st.integers(lo + 1, s))))
            ops.append(("shrink", tuple(bounds)))
            shape = tuple(hi - lo for lo, hi in bounds)
        elif kind == "step":
            steps = tuple(draw(st.integers(1, 3)) for _ in shape)
            ops.append(("step", steps))
            shape = tuple((s + k - 1) // k for s, k in zip(shape, steps))
        elif kind == "pad":
            pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
            ops.append(("pad", pads))
            shape = tuple(s + a + b for s, (a, b) in zip(shape, pads))
        elif kind == "flip":   # negative strides; a flipped mask
            ops.append(("flip", tuple(draw(st.lists(st.integers(0, len(shape) - 1), unique=True)))))
    return ops


def numpy_chain(x: np.ndarray, ops, fill) -> np.ndarray:
    for op, arg in ops:
        if op == "reshape":
            x = x.reshape(arg)
        elif op == "permute":
            x = x.transpose(arg)
        elif op == "expand":
            x = np.broadcast_to(x, arg)
        elif op == "shrink":
            x = x[tuple(slice(lo, hi) for lo, hi in arg)]
        elif op == "step":
            x = x[tuple(slice(None, None, k) for k in arg)]
        elif op == "pad":
            x = np.pad(x, arg, constant_values=fill)
        elif op == "flip":
            x = np.flip(x, arg)
    return x


def tracker_chain(shape, ops, fill) -> ShapeTracker:
    t = ShapeTracker.from_shape(shape)
    for op, arg in ops:
        t = t.pad(arg, fill) if op == "pad" else getattr(t, op)(arg)
    return t


def tensor_chain(t, ops, fill):
    for op, arg in ops:
        if op == "shrink":
            t = t[tuple(slice(lo, hi) for lo, hi in arg)]
        elif op == "step":
            t = t[tuple(slice(None, None, k) for k in arg)]
        elif op == "pad":
            t = t.pad(arg, fill)
        elif op == "flip":
            t = t.flip(arg)
        else:
            t = getattr(t, op)(arg)
    return t


shapes = st.lists(st.sampled_from(SIZES), min_size=1, max_size=3).map(tuple)


@given(st.data(), shapes, st.sampled_from([0.0, -1.5, float("nan")]))
def test_tracker_chain_matches_numpy(data, shape, fill):
    ops = data.draw(movement_chain(shape))
    x = np.arange(1, math.prod(shape) + 1, dtype=np.float32).reshape(shape)
    tracker = tracker_chain(shape, ops, fill)
    expected = numpy_chain(x, ops, fill)
    assert tracker.shape == expected.shape
    np.testing.assert_array_equal(apply_tracker(tracker, x), expected, err_msg=f"{ops}\n{tracker}")
    # the same tracker as a VIEW node built with the ir.node constructor
    leaf = N.input_(0, "x", shape, DType.f32)
    (out,) = evaluate_nodes([N.view(leaf, tracker)], {leaf: x})
    np.testing.assert_array_equal(out, expected)


@given(st.data(), shapes)
def test_frontend_chain_matches_numpy(data, shape):
    """Through Tensor methods, each pad may use its own fill value (a new view is stacked)."""
    ops = data.draw(movement_chain(shape))
    fills = [data.draw(st.sampled_from([0.0, 2.0, -np.inf])) for _ in ops]
    x = np.arange(1, math.prod(shape) + 1, dtype=np.float32).reshape(shape)
    graph = compiler.trace(lambda t: _apply_each(t, ops, fills, tensor_chain), compiler.spec(shape))
    (out,) = evaluate(graph, [x])
    np.testing.assert_array_equal(out, _apply_each(x, ops, fills, numpy_chain), err_msg=str(graph))


def _apply_each(x, ops, fills, chain):
    for op, fill in zip(ops, fills):
        x = chain(x, [op], fill)
    return x


@given(st.data(), shapes)
def test_reshape_merges_when_strides_allow(data, shape):
    """A reshape of a permuted view stays one view exactly when numpy can reshape without a copy."""
    order = tuple(data.draw(st.permutations(range(len(shape)))))
    new = data.draw(reshape_target(tuple(shape[o] for o in order)))
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape).transpose(order)
    t = ShapeTracker.from_shape(shape).permute(order).reshape(new)
    try:
        x.view().shape = new  # numpy raises where a reshape needs a copy
        numpy_needs_copy = False
    except AttributeError:
        numpy_needs_copy = True
    assert (len(t.views) == 2) == numpy_needs_copy, (shape, order, new, t)


def test_views_are_metadata_only():
    x = N.input_(0, "x", (4, 6), DType.f32)
    t = compiler.Tensor(x).permute(1, 0)[1:5:2].reshape(2, 1, 4).expand(2, 3, 4)
    assert t.node.op == Op.VIEW and t.node.srcs == (x,)  # one VIEW node, no copies
    assert len(t.node.arg.views) == 1


def test_reshape_after_permute_pushes_a_second_view():
    t = ShapeTracker.from_shape((2, 3)).permute((1, 0)).reshape((6,))
    assert len(t.views) == 2 and t.views[1] == View.contiguous((6,))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(apply_tracker(t, x), x.T.reshape(6))


def test_pad_then_shrink_to_padding_then_expand_reads_fill():
    # regression: an empty mask range spelled (1, 1) used to become a full range on expand
    t = ShapeTracker.from_shape((4,)).pad(((2, 0),), 0.0).shrink(((0, 1),)).expand((5,))
    np.testing.assert_array_equal(apply_tracker(t, np.arange(1, 5, dtype=np.float32)), np.zeros(5))


def test_fill_is_compared_by_bits():
    a = ShapeTracker.from_shape((3,)).pad(((1, 0),), -0.0)
    b = ShapeTracker.from_shape((3,)).pad(((1, 0),), 0.0)
    assert a != b
    nan1 = ShapeTracker.from_shape((3,)).pad(((1, 0),), float("nan"))
    assert nan1 == ShapeTracker.from_shape((3,)).pad(((1, 0),), float("nan"))
    out = apply_tracker(a, np.ones(3, np.float32))
    assert np.signbit(out[0]) and out[0] == 0


def test_zero_size_views():
    x = np.zeros((0, 3), np.float32)
    cases = [
        (lambda t: t.permute(1, 0).reshape(0, 3), lambda a: a.T.reshape(0, 3)),
        (lambda t: t.pad([(1, 1), (0, 0)], 2.0), lambda a: np.pad(a, [(1, 1), (0, 0)], constant_values=2.0)),
        (lambda t: t.sum(0), lambda a: a.sum(0)),
        (lambda t: t[:, ::2].reshape(-1), lambda a: a[:, ::2].reshape(-1)),
    ]
    for ours, ref in cases:
        graph = compiler.trace(ours, compiler.spec(x.shape))
        np.testing.assert_array_equal(evaluate(graph, [x])[0], ref(x))


def test_out_of_bounds_views_are_refused():
    from ir.node import IRError
    bad = ShapeTracker((View((4,), (1,), 1),))  # reads one element past a 4-element source
    try:
        apply_tracker(bad, np.arange(4, dtype=np.float32))
    except IRError:
        return
    raise AssertionError("an out-of-bounds view was read")


def test_negative_strides_are_read_correctly():
    # the frontend never flips, but a rewrite may build a reversed view by hand
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(apply_tracker(ShapeTracker((View((6,), (-1,), 5),)), x), x[::-1])
    np.testing.assert_array_equal(apply_tracker(ShapeTracker((View((2, 3), (-3, 1), 3),)), x),
                                  x.reshape(2, 3)[::-1])


@given(st.data(), st.lists(st.sampled_from(SIZES), min_size=1, max_size=3).map(tuple),
       st.sampled_from([0.0, -1.5]))
def test_windows_match_sliding_window_view(data, shape, fill):
    """Sliding windows (overlapping strides) over the trailing axes of a view, padded or
    flipped first (then a second view is pushed), equal numpy's windows."""
    n = data.draw(st.integers(1, len(shape)))
    pads = tuple((data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) if data.draw(st.booleans()) else (0, 0)
                 for _ in shape)
    flips = tuple(data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True)))
    x = np.arange(1, math.prod(shape) + 1, dtype=np.float32).reshape(shape)
    base = np.flip(np.pad(x, pads, constant_values=fill), flips)
    spatial = base.shape[len(shape) - n:]
    dilation = tuple(data.draw(st.integers(1, 2)) for _ in spatial)
    kernel = tuple(data.draw(st.integers(1, max(1, (s - 1) // d + 1))) for s, d in zip(spatial, dilation))
    stride = tuple(data.draw(st.integers(1, 3)) for _ in spatial)
    t = ShapeTracker.from_shape(shape).pad(pads, fill).flip(flips).windows(kernel, stride, dilation)
    span = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
    axes = tuple(range(len(shape) - n, len(shape)))
    want = np.lib.stride_tricks.sliding_window_view(base, span, axis=axes)
    want = want[(Ellipsis,) + tuple(slice(None, None, d) for d in dilation)]
    want = want[(slice(None),) * (len(shape) - n) + tuple(slice(None, None, s) for s in stride)]
    assert t.shape == want.shape
    np.testing.assert_array_equal(apply_tracker(t, x), want, err_msg=str(t))
    assert len(t.views) == (2 if any(p != (0, 0) for p in pads[len(shape) - n:]) else 1)


def test_flip_and_windows_are_metadata_only():
    x = N.input_(0, "x", (4, 6), DType.f32)
    t = compiler.Tensor(x).flip(0)[:, ::-2].windows((2, 2), (1, 1))
    assert t.node.op == Op.VIEW and t.node.srcs == (x,) and len(t.node.arg.views) == 1
    assert t.node.arg.views[0].strides == (-6, -2, -6, -2)
