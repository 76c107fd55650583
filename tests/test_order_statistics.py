"""kthvalue and median return torch's indices too: ties give the earliest position, a row with
NaN its first NaN; bad k and empty axes are errors that name the op."""
from __future__ import annotations

import numpy as np
import pytest

import compiler as saturn
from compiler.errors import SaturnError
from ir.interpreter import evaluate

X = np.array([[3.0, np.nan, 1.0, np.nan], [4.0, 2.0, 2.0, 1.0], [5.0, 1.0, 3.0, 2.0]], np.float32)


def _eval(fn, x):
    return [np.asarray(o) for o in evaluate(saturn.trace(fn, saturn.spec(x.shape)), [x])]


def test_median_values_and_indices():
    values, idx = _eval(lambda t: t.median(1), X)
    np.testing.assert_array_equal(values, [np.nan, 2.0, 2.0])
    np.testing.assert_array_equal(idx, [1, 1, 3])          # torch.median(X, 1) gives the same
    (whole,) = _eval(lambda t: t.median(), X[1:])
    assert whole == 2.0


def test_kthvalue_values_and_indices_keepdim():
    values, idx = _eval(lambda t: t.kthvalue(2, 0, keepdim=True), X)
    np.testing.assert_array_equal(values, [[4.0, 2.0, 2.0, 2.0]])
    np.testing.assert_array_equal(idx, [[1, 1, 1, 2]])    # torch.kthvalue(X, 2, 0, True)


@pytest.mark.parametrize("fn,match", [(lambda t: t.kthvalue(0), "k=0"), (lambda t: t.kthvalue(5), "k=5"),
                                      (lambda t: t[:, :0].median(1), "empty")])
def test_bad_arguments_are_named(fn, match):
    with pytest.raises(SaturnError, match=match):
        saturn.trace(fn, saturn.spec((3, 4)))
