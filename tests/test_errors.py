"""User mistakes raise a SaturnError subclass whose message names the op, the shapes and the
user's own file and line, with no numpy (or Saturn-internal) exception chained to it."""
from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler import DTypeError, SaturnError, ShapeError

HERE = __file__


def f32(*shape):
    return compiler.spec(shape, "f32")


# (function traced on the specs, specs, error class, words the message must contain). Each
# function is a one-line lambda, so the line that raises is its first line.
TRACE_ERRORS = [
    (lambda x, y: x + y, [f32(2, 3), f32(4)], ShapeError, ["add", "(2, 3)", "(4,)", "broadcast"]),
    (lambda x, y: x * y, [f32(5, 1, 3), f32(2, 4)], ShapeError, ["mul", "(5, 1, 3)", "(2, 4)"]),
    (lambda x, y: x.where(y, y), [f32(2), f32(2)], DTypeError, ["where", "bool", "f32"]),
    (lambda c, y: (c > 0).where(y, y), [f32(3), f32(4)], ShapeError, ["where", "(3,)", "(4,)"]),
    (lambda x, y: x @ y, [f32(2, 3), f32(4, 5)], ShapeError, ["matmul", "(2, 3)", "(4, 5)"]),
    (lambda x, y: x @ y, [f32(2, 2, 3), f32(3, 3, 4)], ShapeError, ["matmul", "(2, 2, 3)", "(3, 3, 4)"]),
    (lambda x: x.reshape(4, 2), [f32(2, 3)], ShapeError, ["reshape", "(2, 3)", "(4, 2)"]),
    (lambda x: x.sum(2), [f32(2, 3)], ShapeError, ["sum", "axis 2", "(2, 3)"]),
    (lambda x: x.mean((0, -3)), [f32(2, 3)], ShapeError, ["mean", "axis -3", "(2, 3)"]),
    (lambda x: x.softmax(5), [f32(2, 3)], ShapeError, ["softmax", "axis 5", "(2, 3)"]),
    (lambda x: x.permute(0, 0), [f32(2, 3)], ShapeError, ["permute", "(2, 3)"]),
    (lambda x: x.transpose(0, 2), [f32(2, 3)], ShapeError, ["transpose", "(2, 3)"]),
    (lambda x: x.expand(4, 3), [f32(2, 3)], ShapeError, ["expand", "(2, 3)", "(4, 3)"]),
    (lambda x: x[5], [f32(2, 3)], ShapeError, ["getitem", "index 5", "size 2"]),
    (lambda x: x[0, 0, 0], [f32(2, 3)], ShapeError, ["getitem", "(2, 3)"]),
    (lambda x: x[::0], [f32(2, 3)], ShapeError, ["getitem", "step"]),
    (lambda x: x.pad([(1, 1)]), [f32(2, 3)], ShapeError, ["pad", "(2, 3)"]),
    (lambda x, y: compiler.cat([x, y], 0), [f32(2, 3), f32(2, 4)], ShapeError, ["cat", "(2, 3)", "(2, 4)"]),
    (lambda x: x.layer_norm((4,)), [f32(2, 3)], ShapeError, ["layer_norm", "(4,)", "(2, 3)"]),
    (lambda x, w: x.layer_norm((3,), w), [f32(2, 3), f32(2)], ShapeError, ["layer_norm", "weight", "(2,)"]),
    (lambda x, w: x.rms_norm((3,), w), [f32(2, 3), f32(3, 1)], ShapeError, ["rms_norm", "weight", "(3, 1)"]),
    (lambda x: x.astype("int16"), [f32(2)], DTypeError, ["astype", "int16"]),
    (lambda x: x + np.ones(2), [f32(2)], DTypeError, ["add", "ndarray"]),
    (lambda x: x + "a", [f32(2)], DTypeError, ["add", "str"]),
    (lambda x: x @ np.ones((2, 2)), [f32(2, 2)], DTypeError, ["matmul", "ndarray"]),
    (lambda x: x.logical_not(), [f32(2)], DTypeError, ["logical_not", "f32"]),
    (lambda x: (x > 0).logical_or(x), [f32(2)], DTypeError, ["logical_or", "f32"]),
    (lambda x: (x > 0) % (x > 1), [f32(2)], DTypeError, ["mod", "bool"]),
    (lambda x: x.gelu("fast"), [f32(2)], ShapeError, ["gelu", "fast"]),
    (lambda x: _F().fold(x, (4, 4), 2), [f32(1, 8, 5)], ShapeError, ["fold", "(1, 8, 5)", "(N, C*4, 9)"]),
    (lambda x: _F().unfold(x, 5), [f32(1, 2, 3, 3)], ShapeError, ["unfold", "kernel", "larger"]),
    (lambda x: _F().pixel_shuffle(x, 2), [f32(1, 3, 2, 2)], ShapeError, ["pixel_shuffle", "(1, 3, 2, 2)"]),
    (lambda x, y: _F().cdist(x, y), [f32(3, 4), f32(2, 5)], ShapeError, ["cdist", "(3, 4)", "(2, 5)"]),
]


def _F():
    import compiler.functional as F
    return F


def check_message(err: SaturnError, words, line: int):
    msg = str(err)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    assert f"{HERE}:{line}" in msg, f"user location {HERE}:{line} not in {msg!r}"
    assert "Traceback" not in msg and "numpy" not in msg.lower()
    # nothing chained: the user sees this error alone, not a numpy or internal one before it
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)


@pytest.mark.parametrize("fn, specs, cls, words", TRACE_ERRORS,
                         ids=[f"{i}-{w[0]}" for i, (_, _, _, w) in enumerate(TRACE_ERRORS)])
def test_trace_errors_name_op_shapes_and_user_line(fn, specs, cls, words):
    with pytest.raises(cls) as info:
        compiler.trace(fn, *specs)
    assert isinstance(info.value, SaturnError)
    check_message(info.value, words, fn.__code__.co_firstlineno)
    assert str(info.value).startswith(words[0] + ": ")


def test_compiled_function_checks_argument_shapes_dtypes_and_count():
    f = compiler.compile(lambda x, y: x + y, f32(2, 3), compiler.spec((3,), "f16"), target="reference")
    good = [np.ones((2, 3), np.float32), np.ones(3, np.float16)]
    np.testing.assert_array_equal(f(*good), np.full((2, 3), 2, np.float32))

    with pytest.raises(ShapeError) as info:
        f(np.ones((3, 2), np.float32), good[1])
    check_message(info.value, ["call", "input 0", "(3, 2)", "(2, 3)"], test_line(info))

    with pytest.raises(DTypeError) as info:
        f(good[0], np.ones(3, np.float32))
    check_message(info.value, ["call", "input 1", "float32", "f16"], test_line(info))

    with pytest.raises(DTypeError) as info:
        f(np.ones((2, 3)), good[1])  # float64
    check_message(info.value, ["call", "input 0", "float64"], test_line(info))

    with pytest.raises(ShapeError) as info:
        f(good[0])
    check_message(info.value, ["call", "takes 2 inputs", "got 1"], test_line(info))


def test_line(info) -> int:
    """The line of this test file that raised (the first traceback entry in this file)."""
    tb = info.tb
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == HERE:
            return tb.tb_lineno
        tb = tb.tb_next
    raise AssertionError("no frame in the test file")


test_line.__test__ = False  # a helper, not a test


def test_bad_specs_and_return_values():
    with pytest.raises(ShapeError) as info:
        compiler.spec((2, -1))
    check_message(info.value, ["spec", "(2, -1)"], test_line(info))
    with pytest.raises(DTypeError) as info:
        compiler.spec((2,), "complex64")
    check_message(info.value, ["spec", "complex64"], test_line(info))
    with pytest.raises(ShapeError) as info:
        compiler.trace(lambda x: 3, f32(2))
    check_message(info.value, ["trace", "int"], test_line(info))


def test_errors_from_model_code_point_at_the_model_line():
    from compiler.nn import attention

    def model(q, k, v):
        return attention(q, k, v)  # the line the error must name
    line = model.__code__.co_firstlineno + 1
    with pytest.raises(ShapeError) as info:
        compiler.trace(model, f32(2, 4, 8), f32(2, 5, 7), f32(2, 5, 8))
    check_message(info.value, ["matmul", "(2, 4, 8)", "(2, 7, 5)"], line)


def test_saturn_errors_are_also_standard_python_errors():
    assert issubclass(ShapeError, ValueError) and issubclass(DTypeError, TypeError)
    with pytest.raises(ValueError):
        compiler.trace(lambda x: x.reshape(5), f32(2))


def test_example_array_of_unsupported_dtype():
    with pytest.raises(DTypeError) as info:
        compiler.trace(lambda x: x * 2, np.zeros((2, 3), np.int16))
    check_message(info.value, ["spec", "int16"], test_line(info))
