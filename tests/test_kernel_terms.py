"""Kernel terms: a sum of products reaches the backends' product kernels only as a `contract`
term made by the kernels rules (rewrites/kernels.py), never by a matcher of the program."""
import numpy as np
import pytest

import compiler
from compiler import spec
from compiler.explore import Limits, explore
from ir.lower import lower
from ir import node as N
from ir.bounds import evaluate_bounded
from ir.dtypes import DType
from ir.graph import Graph
from ir.interpreter import evaluate
from ir.kernel import Reduce, walk
from ir.ops import Op
from rewrites.apply import apply_rules, kernel_terms
from rewrites.check import check_rule
from rewrites.registry import family_rules


def _ops(g: Graph) -> dict:
    return g.op_counts()


def _plain_product(m=8, k=32, n=16, dtype=DType.f32) -> Graph:
    """a @ b built from primitives by hand: no kernel term."""
    a, b = N.input_(0, "a", (m, k), dtype), N.input_(1, "b", (k, n), dtype)
    ax = N.move(a, lambda st: st.reshape((m, k, 1)).expand((m, k, n)))
    bx = N.move(b, lambda st: st.reshape((1, k, n)).expand((m, k, n)))
    s = N.reduce(Op.SUM, N.binary(Op.MUL, ax, bx), (1,))
    return Graph((a, b), (N.move(s, lambda st: st.reshape((m, n))),))


def test_traced_products_are_contraction_terms():
    g = compiler.trace(lambda a, b: (a @ b).relu(), spec((8, 32)), spec((32, 16)))
    ops = _ops(g)
    assert ops.get("contract") == 1 and "mul" not in ops and "sum" not in ops
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 32), np.float32), rng.standard_normal((32, 16), np.float32)
    np.testing.assert_allclose(evaluate(g, [a, b])[0], np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)


def test_any_float_sum_of_products_becomes_a_contraction_and_integers_do_not():
    # a product the user wrote as a broadcast multiply and a sum (no matmul call)
    g = compiler.trace(lambda a, b: (a.unsqueeze(-1) * b.unsqueeze(0)).sum(1), spec((5, 7)), spec((7, 3)))
    assert _ops(g).get("contract") == 1
    gi = compiler.trace(lambda a, b: (a * b).sum(-1), spec((5, 7), "i32"), spec((5, 7), "i32"))
    assert "contract" not in _ops(gi) and _ops(gi).get("sum") == 1


def test_the_kernel_rules_are_sound():
    for rule in family_rules("kernels"):
        assert check_rule(rule).ok, rule.name


def test_apply_rules_is_iterative_and_keeps_the_interface():
    g = _plain_product()
    t = kernel_terms(g)
    assert t.inputs == g.inputs and [o.shape for o in t.outputs] == [o.shape for o in g.outputs]
    assert _ops(t).get("contract") == 1 and "mul" not in _ops(t)
    # a chain deeper than Python's recursion limit
    x = N.input_(0, "x", (4,), DType.f32)
    y = x
    for _ in range(3000):
        y = N.binary(Op.ADD, y, x)
    assert apply_rules(Graph((x,), (y,)), family_rules("kernels")).outputs == (y,)


def test_only_the_term_runs_as_the_cpu_product_kernel():
    from backends.llvm import matmul
    term = lower(kernel_terms(_plain_product()))
    plain = lower(_plain_product())
    assert any(isinstance(x, Reduce) and x.contraction for k in term.kernels for v in k.values() for x in walk(v))
    assert [matmul.product_layout(k, term) is not None for k in term.kernels] == [True]
    assert [matmul.product_layout(k, plain) is not None for k in plain.kernels] == [False]


def test_only_the_term_is_planned_as_a_gemm_on_cuda():
    from backends.cuda.plan import plan
    assert [s.kind for s in plan(kernel_terms(_plain_product(64, 64, 64)))] == ["gemm"]
    assert "gemm" not in [s.kind for s in plan(_plain_product(64, 64, 64))]


@pytest.mark.parametrize("dtype", [DType.f32, DType.f16, DType.bf16])
def test_contraction_meaning_and_bound(dtype):
    a, b = N.input_(0, "a", (3, 40), dtype), N.input_(1, "b", (3, 40), dtype)
    g = Graph((a, b), (N.contract(a, b, (1,)),))
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal((3, 40)).astype(dtype.np) for _ in range(2))
    exact = (x.astype(np.float64) * y.astype(np.float64)).sum(1, keepdims=True)
    got = evaluate(g, [x, y])[0].astype(np.float64)
    bounded = evaluate_bounded(g, [x, y])[0]
    assert np.all(np.abs(got - exact) <= bounded.bound + 1e-12)
    assert np.all(np.isfinite(bounded.bound))


def test_contract_rejects_ill_formed_operands():
    a = N.input_(0, "a", (3, 4), DType.f32)
    with pytest.raises(ValueError):
        N.contract(a, N.input_(1, "b", (3, 5), DType.f32), (1,))
    with pytest.raises(ValueError):
        N.contract(N.input_(2, "i", (3, 4), DType.i32), N.input_(3, "j", (3, 4), DType.i32), (1,))


def test_every_explored_candidate_keeps_its_products_as_terms():
    g = compiler.trace(lambda a, b: a @ b, spec((64, 512)), spec((512, 64)))
    exp = explore(g, limits=Limits.for_budget(2))
    assert len(exp.candidates) > 1
    for c in exp.candidates:
        ops = _ops(c.graph)
        assert ops.get("contract", 0) >= 1, c.description   # split-K forms too: their tile products
        assert "mul" not in ops, c.description


def test_a_multi_axis_contraction_round_trips_through_the_egraph():
    a, b = N.input_(0, "a", (4, 6, 5), DType.f32), N.input_(1, "b", (4, 6, 5), DType.f32)
    g = Graph((a, b), (N.contract(a, b, (1, 2)),))
    exp = explore(g, limits=Limits.for_budget(1))
    rng = np.random.default_rng(2)
    x, y = (rng.standard_normal((4, 6, 5)).astype(np.float32) for _ in range(2))
    want = (x * y).sum((1, 2), keepdims=True)
    for c in exp.candidates:
        np.testing.assert_allclose(evaluate(c.graph, [x, y])[0], want, rtol=1e-5, atol=1e-5)


def test_extraction_does_not_depend_on_the_serialization_order(monkeypatch):
    """egglog may list e-nodes in another order on another build or platform; extraction breaks
    ties by position, so the serialized e-graph is put in a content order first. The rules'
    flash form of attention is found either way (it once depended on that order)."""
    from backends.cuda.plan import plan
    from compiler import nn
    from rewrites import bridge
    g = compiler.trace(nn.attention, *[spec((1, 1, 1024, 64), "f16")] * 3)

    def run():
        exp = explore(g, max_candidates=16)
        flash = [c for c in exp.candidates if [s.kind for s in plan(c.graph)] == ["attention"]]
        return [c.graph.structural_hash() for c in exp.candidates], len(flash)

    before = run()
    original = bridge.SerializedEGraph.from_json

    def reversed_json(js, session):
        return original({**js, "nodes": dict(reversed(list(js["nodes"].items())))}, session)
    monkeypatch.setattr(bridge.SerializedEGraph, "from_json", staticmethod(reversed_json))
    after = run()
    assert before == after and before[1] >= 1


def test_a_product_is_oriented_by_its_output_axes_not_its_operand_order():
    from backends.cuda.match import contraction_axes
    a, b = N.input_(0, "a", (8, 16), DType.f32), N.input_(1, "b", (16, 4), DType.f32)
    ax = N.move(a, lambda st: st.reshape((8, 16, 1)).expand((8, 16, 4)))
    bx = N.move(b, lambda st: st.reshape((1, 16, 4)).expand((8, 16, 4)))
    for x, y in ((ax, bx), (bx, ax)):
        g = contraction_axes(N.reduce(Op.SUM, N.binary(Op.MUL, x, y), (1,)))
        assert (g.m_axes, g.n_axes, g.a, g.b) == ((0,), (2,), ax, bx)


def test_kernel_terms_keep_existing_terms():
    """The direct translation only makes terms: a graph that already holds a contraction keeps it
    (the e-graph's contraction-as-sum is not applied outside the e-graph)."""
    a, b = N.input_(0, "a", (3, 40), DType.f32), N.input_(1, "b", (3, 40), DType.f32)
    g = Graph((a, b), (N.contract(a, b, (1,)),))
    assert kernel_terms(g).outputs == g.outputs


def test_every_kernel_term_is_declared_in_each_table():
    """The kernel terms are named once in the IR (`ir.ops.KERNEL`) and once in the pattern
    language (`KERNEL_OPS`); the e-graph's constructors, the direct rule application and the
    reducing-op lists follow from them."""
    from ir.ops import KERNEL, REDUCING
    from rewrites import apply, bridge, pattern as P
    assert {o.value for o in KERNEL} == set(P.KERNEL_OPS)
    assert {o.value for o in REDUCING} == set(P.REDUCING_OPS)
    for k in P.KERNEL_OPS:
        assert P.OPS[k] == "tti" and k in bridge.CTOR and apply._MATCHES[k].value == k
