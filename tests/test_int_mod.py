"""Integer mod never traps, and every target agrees (docs/ir.md): C's truncated remainder,
with x mod 0 = 0 and x mod -1 = 0 (INT_MIN mod -1 included, as in PyTorch)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import compiler as saturn

INT_MIN, INT_MAX = -2**31, 2**31 - 1
DIVIDENDS = [INT_MIN, INT_MIN + 1, -7, -1, 0, 1, 7, INT_MAX]
DIVISORS = [INT_MIN, -7, -2, -1, 0, 1, 2, 3, INT_MAX]


def _c_fmod(a: int, b: int) -> int:
    """The documented meaning, in Python integers."""
    if b in (0, -1):
        return 0
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def _py_remainder(a: int, b: int) -> int:
    """The frontend's `%`: the remainder with the divisor's sign (Python's, PyTorch's)."""
    return 0 if b in (0, -1) else a % b


def _grid():
    """Every (dividend, divisor) pair, repeated to 64 columns so the vector loop runs too."""
    a = np.array([[x] * 64 for x in DIVIDENDS for _ in DIVISORS], np.int32)
    b = np.array([[y] * 64 for _ in DIVIDENDS for y in DIVISORS], np.int32)
    return a, b


def fmod(a, b):
    return a.fmod(b)


def remainder(a, b):
    return a % b


def _expected(fn):
    a, b = _grid()
    ref = _c_fmod if fn is fmod else _py_remainder
    return np.vectorize(ref, otypes=[np.int64])(a.astype(np.int64), b.astype(np.int64)).astype(np.int32)


def test_documented_values():
    assert _c_fmod(INT_MIN, -1) == 0 and _c_fmod(5, 0) == 0 and _c_fmod(-7, 2) == -1 and _c_fmod(INT_MIN, 3) == -2
    assert _py_remainder(-7, 2) == 1 and _py_remainder(7, -2) == -1 and _py_remainder(INT_MIN, -1) == 0


@pytest.mark.parametrize("fn", [fmod, remainder])
def test_reference_target(fn):
    a, b = _grid()
    f = saturn.compile(fn, saturn.spec(a.shape, "i32"), saturn.spec(b.shape, "i32"), target="reference")
    np.testing.assert_array_equal(f(a, b), _expected(fn))


CPU_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import compiler as saturn
    from backends.llvm import LLVMBackend
    from tests.test_int_mod import _grid, fmod, remainder
    a, b = _grid()
    be = LLVMBackend()
    for fn in (fmod, remainder):
        g = saturn.trace(fn, saturn.spec(a.shape, "i32"), saturn.spec(b.shape, "i32"))
        for s in be.schedules(g)[:2]:
            np.save(sys.argv[1] + f"/{fn.__name__}-{s.name}.npy", be.build(g, s, use_cache=False)(a, b)[0])
    # compile(): the candidates are verified on small random integers, then the winner runs here
    f = saturn.compile(remainder, saturn.spec(a.shape, "i32"), saturn.spec(b.shape, "i32"), budget=1.0,
                       quiet=True, cache=False)
    np.save(sys.argv[1] + "/remainder-compiled.npy", f(a, b))
""")


def test_cpu_target(tmp_path):
    """Built directly under two schedules, and through compile(); in a child process, as the
    fault this guards against (SIGFPE) ends the process."""
    pytest.importorskip("llvmlite")
    import os
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", CPU_SCRIPT, str(tmp_path)], cwd=root, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "SATURN_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    for fn in (fmod, remainder):
        outs = sorted(p for p in os.listdir(tmp_path) if p.startswith(fn.__name__ + "-"))
        assert len(outs) == (3 if fn is remainder else 2), outs
        for name in outs:
            np.testing.assert_array_equal(np.load(tmp_path / name), _expected(fn), err_msg=name)


def test_cuda_expression_guards_both_divisors():
    from backends.cuda.cexpr import Emitter
    from ir.dtypes import DType
    from ir.ops import Op
    e = Emitter.math(Op.MOD, ["a", "b"], DType.i32)
    assert "b == 0" in e and "b == -1" in e


@pytest.mark.gpu
@pytest.mark.parametrize("fn", [fmod, remainder])
def test_cuda_target(fn):
    from backends.cuda import CUDABackend
    be = CUDABackend()
    reason = be.unavailable_reason()
    if reason:
        pytest.skip(reason)
    a, b = _grid()
    g = saturn.trace(fn, saturn.spec(a.shape, "i32"), saturn.spec(b.shape, "i32"))
    for s in be.schedules(g):
        np.testing.assert_array_equal(be.build(g, s)(a, b)[0], _expected(fn), err_msg=str(s))
