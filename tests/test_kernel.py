"""Index-expression simplification in the kernel IR: exact on every point of the range."""
import itertools

from hypothesis import given, settings, strategies as st

from ir.kernel import Div, Lin, Mod, Var, as_lin, bound, floordiv, lin_range, mod


def _eval(e: Lin, env) -> int:
    out = e.const
    for a, c in e.terms:
        if isinstance(a, Var):
            x = env[a]
        elif isinstance(a, Div):
            x = _eval(a.arg, env) // a.divisor
        else:
            x = _eval(a.arg, env) % a.divisor
        out += c * x
    return out


def _points(vs):
    for vals in itertools.product(*(range(v.extent) for v in vs)):
        yield dict(zip(vs, vals))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.lists(st.integers(-8, 12), min_size=3, max_size=3),
       st.integers(-10, 10), st.integers(1, 12), st.integers(1, 5))
def test_div_mod_simplification_is_exact(extents, coeffs, const, d1, d2):
    vs = [Var(f"v{i}", e) for i, e in enumerate(extents)]
    e = Lin(const=const)
    for v, c in zip(vs, coeffs):
        e = e + as_lin(v) * c
    exprs = {"div": floordiv(e, d1), "mod": mod(e, d1), "divdiv": floordiv(floordiv(e, d1), d2),
             "modmod": mod(mod(e, d1 * d2), d2), "round_trip": floordiv(e, d1) * d1 + mod(e, d1)}
    for env in _points(vs):
        x = _eval(e, env)
        want = {"div": x // d1, "mod": x % d1, "divdiv": x // d1 // d2, "modmod": x % (d1 * d2) % d2,
                "round_trip": x}
        for name, ex in exprs.items():
            assert _eval(ex, env) == want[name], (name, ex, env)
            lo, hi = lin_range(ex)
            assert lo <= want[name] <= hi
    for ex in exprs.values():
        _assert_operands_non_negative(ex)


def _assert_operands_non_negative(e: Lin) -> None:
    """The renderers divide truncating (C `/`, LLVM `sdiv`): that is floor division only while
    every Div/Mod argument is non-negative over its whole range."""
    for a, _ in e.terms:
        if isinstance(a, (Div, Mod)):
            assert lin_range(a.arg)[0] >= 0, (a, e)
            _assert_operands_non_negative(a.arg)


def test_reversed_unflatten_keeps_operands_non_negative():
    """A flip after a reshape, (3 - i) // 2 and (3 - i) % 2 over i < 4: the constant taken out of
    the argument must leave it non-negative (it once gave (1 - i) // 2, which truncates to 0 at
    i = 2 where floor is -1)."""
    i = Var("i", 4)
    flat = as_lin(i) * -1 + 3
    for ex in (floordiv(flat, 2), mod(flat, 2)):
        _assert_operands_non_negative(ex)
    for env in _points([i]):
        assert _eval(floordiv(flat, 2), env) == (3 - env[i]) // 2


def test_contiguous_unflatten_leaves_no_div_mod():
    i, j = Var("i", 4), Var("j", 7)
    flat = as_lin(i) * 7 + as_lin(j)
    assert floordiv(flat, 7) == as_lin(i)
    assert mod(flat, 7) == as_lin(j)
    assert floordiv(flat, 7) * 7 + mod(flat, 7) == flat


def test_bounds_fold():
    i = Var("i", 4)
    assert bound(as_lin(i), 0, 4) is True
    assert bound(as_lin(i) + 10, 0, 4) is False
    assert str(bound(as_lin(i), 1, 4)) == "1 <= i < 4"


def test_substitute_replaces_variables_everywhere():
    from ir.dtypes import DType
    from ir.kernel import Bound, Compute, Load, substitute
    from ir.ops import Op
    r, i = Var("r", 8), Var("i", 8)
    x = Load("in0", DType.f32, as_lin(r) * 3 + 1, (Bound(as_lin(r), 1, 8),))
    e = Compute(Op.EXP2, DType.f32, (x,))
    got = substitute(e, {r: as_lin(i)})
    assert got == Compute(Op.EXP2, DType.f32, (Load("in0", DType.f32, as_lin(i) * 3 + 1, (Bound(as_lin(i), 1, 8),)),))


def test_pickle_drops_cached_hash():
    import pickle
    from ir.dtypes import DType
    from ir.kernel import Load
    x = Load("in0", DType.f32, as_lin(Var("i", 4)) * 2)
    hash(x)
    y = pickle.loads(pickle.dumps(x))
    assert "_hash" not in y.__dict__ and y == x and hash(y) == hash(x)


def test_digest_is_content_and_survives_deep_values():
    """`digest` keys the CPU object index: equal content gives the same digest in any process
    (no Python hash), any difference (even -0.0 against 0.0) another, and a value nested
    thousands deep is no recursion problem."""
    import subprocess
    import sys
    from ir.kernel import Compute, Const, digest
    from ir.dtypes import DType
    from ir.ops import Op
    a = Compute(Op.ADD, DType.f32, (Const(0.0, DType.f32), Const(1.5, DType.f32)))
    b = Compute(Op.ADD, DType.f32, (Const(-0.0, DType.f32), Const(1.5, DType.f32)))
    assert digest(a) == digest(Compute(Op.ADD, DType.f32, (Const(0.0, DType.f32), Const(1.5, DType.f32))))
    assert digest(a) != digest(b)
    code = ("from ir.kernel import Compute, Const, digest; from ir.dtypes import DType; from ir.ops import Op; "
            "print(digest(Compute(Op.ADD, DType.f32, (Const(0.0, DType.f32), Const(1.5, DType.f32)))))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other == digest(a)
    deep = Const(1.0, DType.f32)
    for _ in range(5000):
        deep = Compute(Op.EXP2, DType.f32, (deep,))
    assert len(digest(deep)) == 64


def _doubling_chain(depth: int):
    """x_{k+1} = x_k * x_k: a DAG of `depth` nodes whose tree has 2^depth paths."""
    from ir.kernel import Compute, Load, as_lin, Var
    from ir.dtypes import DType
    from ir.ops import Op
    x = Load("in0", DType.f32, as_lin(Var("i", 8)))
    for _ in range(depth):
        x = Compute(Op.MUL, DType.f32, (x, x))
    return x


def test_equal_values_built_apart_compare_in_linear_steps(monkeypatch):
    """Two equal DAG-shaped values built separately (a bf16 norm's scale, rebuilt at each use)
    compare in steps linear in their size: once two values are found equal, comparing them
    again is one step (the lowering of a bf16 layer_norm -> std -> softmax program took 22 s
    comparing such trees path by path; fuzz seed 105449)."""
    from ir import kernel
    a, b = _doubling_chain(24), _doubling_chain(24)    # (path by path: 2^24 comparisons)
    calls = []
    real = kernel.Struct._key
    monkeypatch.setattr(kernel.Struct, "_key", lambda self: calls.append(1) or real(self))
    assert hash(a) == hash(b)        # (hashes were cached while building)
    calls.clear()
    assert a == b
    assert len(calls) <= 4 * 24
    assert kernel.canonical(a) == b


def test_canonical_renames_shared_reductions_in_linear_steps(monkeypatch):
    """A reduction shared along a doubling chain (a bf16 std's scale built from a row max, used
    at every step of its overflow guard) is renamed once, not once per path: canonical() of
    such a value took 55 s in each lowering of fuzz seed 200749. Values equal up to the names
    of their bound variables still compare equal, nested reductions included."""
    from ir import kernel
    from ir.dtypes import DType
    from ir.ops import Op

    def chain(name: str, depth: int):
        k, j = Var(name, 8), Var(name + "j", 4)
        inner = kernel.Reduce(Op.SUM, DType.f32, (j,), kernel.Load("in1", DType.f32, as_lin(j) + as_lin(k) * 4))
        x = kernel.Reduce(Op.MAX, DType.f32, (k,), kernel.Compute(Op.MUL, DType.f32, (
            kernel.Load("in0", DType.f32, as_lin(k) + as_lin(Var("i", 8)) * 8), inner)))
        for _ in range(depth):
            x = kernel.Compute(Op.MUL, DType.f32, (x, x))
        return x

    calls = []
    real = kernel.substitute
    monkeypatch.setattr(kernel, "substitute", lambda *a, **k: calls.append(1) or real(*a, **k))
    a, b = kernel.canonical(chain("k", 12)), kernel.canonical(chain("r", 12))
    assert len(calls) <= 4          # (path by path: 2^12 renamings each)
    assert a == b
    assert kernel.canonical(chain("k", 3)) != kernel.canonical(chain("k", 4))


def test_window_index_divides_by_the_common_factor():
    """A flattened conv window, (784*r + p) // 7056 and % 7056 with p < 784: the factor 784 is
    divided out (r // 9, 784*(r % 9) + p), so no division of p remains."""
    r, p = Var("r", 576), Var("p", 784)
    flat = as_lin(r) * 784 + as_lin(p)
    assert floordiv(flat, 7056) == floordiv(as_lin(r), 9)
    assert mod(flat, 7056) == mod(as_lin(r), 9) * 784 + as_lin(p)
    assert floordiv(flat, 2352) == floordiv(as_lin(r), 3)
    q = as_lin(p) * 2 + as_lin(r) * 6 + 1                 # (6r + 2p + 1) // 4: 2p + 1 is not below 2
    assert any(isinstance(a, Div) for a, _ in floordiv(q, 4).terms)
