"""Hash-consing, immutability, graph printing and hashing."""
from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, strategies as st

import compiler
from ir import node as N
from ir.dtypes import DType
from ir.graph import Graph
from ir.interpreter import evaluate
from ir.ops import Op


def build(x):
    """A small expression that touches views, reductions, constants and where."""
    y = (x.permute(1, 0)[::2] * 1.5 + x.T[::2].exp()).softmax(-1)
    return (y > 0.1).where(y, -0.0).sum(0) + x.pad([(1, 0), (0, 2)], -1.0)[1:, :3].max(1)


@given(st.sampled_from([(3, 3), (4, 3), (1, 3)]), st.sampled_from(["f32", "f16", "bf16"]))
def test_same_expression_twice_gives_identical_nodes(shape, dtype):
    g1 = compiler.trace(build, compiler.spec(shape, dtype))
    g2 = compiler.trace(build, compiler.spec(shape, dtype))
    assert g1.outputs[0] is g2.outputs[0]
    assert all(a is b for a, b in zip(g1.nodes, g2.nodes))
    assert g1.structural_hash() == g2.structural_hash()


def test_common_subexpressions_are_shared():
    x = compiler.Tensor(N.input_(0, "x", (4,), DType.f32))
    a, b = (x * 2).exp(), (x * 2).exp()
    assert a.node is b.node
    g = Graph((x.node,), ((a + b).node,))
    assert g.op_counts()["exp2"] == 1


def test_zero_and_negative_zero_constants_stay_distinct():
    pos, neg = N.const(0.0, (2,), DType.f32), N.const(-0.0, (2,), DType.f32)
    assert pos is not neg
    assert N.const(-0.0, (2,), DType.f32) is neg
    x = N.input_(0, "x", (2,), DType.f32)
    (out,) = evaluate(Graph((x,), (N.binary(Op.MUL, x, neg),)), [np.array([1.0, -1.0], np.float32)])
    assert list(np.signbit(out)) == [True, False]


def test_nan_constants_work_and_are_shared():
    a, b = N.const(float("nan"), (3,), DType.f32), N.const(math.nan, (3,), DType.f32)
    assert a is b
    (out,) = evaluate(Graph((), (a,)), [])
    assert np.isnan(out).all()
    g = compiler.trace(lambda x: x + float("nan"), compiler.spec((2,)))
    assert "nan" in str(g)
    assert np.isnan(evaluate(g, [np.ones(2, np.float32)])[0]).all()


def test_constants_of_different_dtypes_differ():
    assert N.const(1, (2,), DType.f32) is not N.const(1, (2,), DType.i32)
    assert N.const(1, (2,), DType.i32) is not N.const(True, (2,), DType.bool)


def test_nodes_are_immutable_and_pickle_back_to_the_same_node():
    n = N.unary(Op.EXP2, N.input_(0, "x", (2,), DType.f32))
    with pytest.raises(AttributeError):
        n.op = Op.LOG2
    assert pickle.loads(pickle.dumps(n)) is n


def test_printed_graph_is_readable():
    g = compiler.trace(lambda x, w: (x @ w).relu(), compiler.spec((2, 3)), compiler.spec((3, 4)))
    text = str(g)
    lines = text.splitlines()
    assert lines[0] == "%0 = input(#0 x) : f32[2, 3]"
    assert lines[-1].startswith("return %")
    assert "contract(" in text and "axes=(1,)" in text and "where(" in text
    assert "view(" in text and "strides=" in text
    # every line names its result, the op, its sources and its type
    for line in lines[:-1]:
        assert line.startswith("%") and " = " in line and " : " in line


def test_structural_hash_differs_for_different_programs():
    g1 = compiler.trace(lambda x: x.exp(), compiler.spec((4,)))
    g2 = compiler.trace(lambda x: x.log(), compiler.spec((4,)))
    g3 = compiler.trace(lambda x: x.exp(), compiler.spec((5,)))
    assert len({g1.structural_hash(), g2.structural_hash(), g3.structural_hash()}) == 3


def test_docs_show_the_current_softmax_and_view_printouts():
    import os
    doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "ir.md")).read()
    g = compiler.trace(lambda x: x.softmax(-1), compiler.spec((4, 7)))
    assert str(g) in doc, "docs/ir.md: update the printed softmax graph"
    assert f"That is {g.num_compute_ops()} compute ops" in doc
    v = compiler.trace(lambda x: x.permute(1, 0).reshape(28)[::3].pad([(1, 2)], -1.0), compiler.spec((4, 7)))
    assert str(v) in doc, "docs/ir.md: update the printed view example"
